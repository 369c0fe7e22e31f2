"""A trace of the replica played slot after slot under one policy (the artifact's scheduler loop)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slurm_liquid.errors import UsageError
from slurm_liquid.psworld.slot import PLACEMENT, PaperPolicy, Slot
from slurm_liquid.psworld.world import SLOT_S, WORKER_SLOTS, PaperJob, PaperSetting


@dataclass
class TraceRun:
    """Every job of one trace under one policy, every slot under the same `placement`
    (`slurm_liquid.psworld.slot`). `play` leaves each job's `end` (the fractional slot of its
    completion: the artifact's FINE_GRAIN_JCT), the GPU slots used per slot and the changes."""

    setting: PaperSetting
    trace: list[PaperJob]
    name: str = "workload"
    placement: str = PLACEMENT
    gpu_slots_used: list[int] = field(default_factory=list)
    changes: int = 0

    def play(self, policy: PaperPolicy, max_slots: int = 10_000) -> None:
        for job in self.trace:
            job.ps = job.workers = 0
            job.progress, job.end = 0.0, None
        policy.reset()
        pending, active, done = list(self.trace), [], []
        self.gpu_slots_used, self.changes = [], 0
        ts = 0
        while (pending or active) and ts < max_slots:
            while pending and pending[0].arrival <= ts:
                active.append(pending.pop(0))
            before = {j.id: (j.ps, j.workers) for j in active}
            slot = Slot(self.setting, ts, active, self.placement)
            policy.schedule(slot)
            slot.finish()
            self.gpu_slots_used.append(sum(j.workers * WORKER_SLOTS[j.model][1] for j in active))
            self.changes += sum(1 for j in active if before[j.id] != (j.ps, j.workers) and before[j.id] != (0, 0))
            for job in list(active):
                epochs = job.epochs_per_slot()
                if epochs <= 0:
                    continue
                if job.progress + epochs >= job.epochs:
                    job.end = ts - 1 + (job.epochs - job.progress) / epochs
                    job.progress = job.epochs
                    active.remove(job)
                    done.append(job)
                else:
                    job.progress += epochs
            ts += 1
        if pending or active:
            raise UsageError(f"{self.name}: {policy.name} left {len(pending) + len(active)} job(s) unfinished "
                             f"after {max_slots} slots")

    def jcts(self) -> dict[str, float]:
        """Seconds from each finished job's arrival slot to its completion, counting the arrival slot."""
        return {j.id: (j.end - j.arrival + 1.0) * SLOT_S for j in self.trace if j.end is not None}

    def mean_jct(self) -> float:
        jcts = self.jcts()
        return sum(jcts.values()) / len(jcts) if jcts else math.nan
