"""The candidate teachers for the DL2 paper replica's warm-up, and the bound they are measured against:
three families of hand-written rules and the hull in other placement orders (`benchmarks/dl2/paper_teachers.py`
runs them on the validation traces and prints which teacher and which order to use).

- `srtf-F`: shortest remaining time first, each job given the (PS, workers) split that runs it fastest
  with the fewest tasks reaching F of its peak speed, while the cluster takes it.
- `gain/r^A`: Optimus's greedy task-by-task rule, its gain (cut in remaining time) divided by the job's
  remaining time to the power A (favouring short jobs).
- `drf-short^A`: best-split DRF with its queue keyed by dominant share x remaining time^A.
- `hull-order-*`: the hull's counts placed at the end of the slot in another order.
- `bound_s`: every job alone on the cluster at its peak speed within the per-role cap from its arrival slot.
"""

from __future__ import annotations

import math
import statistics

from slurm_liquid.sim.paper import (SLOT_S, PaperBestSplit, PaperHull, PaperOptimus, Slot, paper_trace, peak_speed,
                                    place_cpu_first, uses_gpu)

VALIDATION = 5_000  # seeds 5000-5007: every design choice of the replica's DL2 is made on these
HELD_OUT = 10_000  # seeds 10000-10007: measured after the choices (`paper.py`)


def remaining_slots(job) -> float:
    speed = max(job.epochs_per_slot(p, w) for p, w in ((1, 1), (2, 2), (4, 4)))
    return job.remaining() / speed if speed > 0 else math.inf


class SRTF:
    def __init__(self, fraction: float) -> None:
        self.fraction, self.name, self._plans = fraction, f"srtf-{fraction:g}", {}

    def reset(self) -> None:
        pass

    def _plan(self, job, cap: int) -> tuple[float, int, int]:
        key = (job.model, cap)
        if key not in self._plans:
            best: dict[int, tuple[float, int, int]] = {}
            for p in range(1, cap + 1):
                for w in range(1, cap + 1):
                    s = job.epochs_per_slot(p, w)
                    if p + w not in best or s > best[p + w][0]:
                        best[p + w] = (s, p, w)
            top = max(v[0] for v in best.values())
            self._plans[key] = best[min(t for t, v in best.items() if v[0] >= self.fraction * top)]
        return self._plans[key]

    def schedule(self, slot) -> None:
        cap = slot.setting.max_tasks
        for job in sorted(slot.jobs, key=lambda j: (j.remaining() / self._plan(j, cap)[0], j.arrival, j.index)):
            _, p, w = self._plan(job, cap)
            if not slot.add(job, "bundle"):
                return
            for role, n in (("ps", p - 1), ("worker", w - 1)):
                for _ in range(n):
                    if not slot.add(job, role):
                        return


class GainOverRemaining(PaperOptimus):
    def __init__(self, power: float) -> None:
        self.power, self.name = power, f"gain/r^{power:g}"

    def _gain(self, job, cap: int):
        gain, role = PaperOptimus._gain(job, cap)
        if math.isinf(gain):
            return gain, role
        now = job.epochs_per_slot()
        return gain / (job.remaining() / now) ** self.power if now > 0 else gain, role


class ShortFirstDRF(PaperBestSplit):
    def __init__(self, power: float) -> None:
        self.power, self.name = power, f"drf-short^{power:g}"

    def key(self, job, slot) -> float:
        return job.share(slot.setting.nodes) * remaining_slots(job) ** self.power


class Ordered(PaperHull):
    """`PaperHull`'s counts (made on a `cpu-first` shadow of the slot) placed at the end of the slot in
    `order`, a task the least-used node refuses skipped; for a slot under the artifact's placement."""

    def __init__(self, order: str) -> None:
        self.order, self.name = order, f"hull-order-{order}"

    def schedule(self, slot) -> None:
        shadow = Slot(slot.setting, slot.ts, slot.jobs, "cpu-first")
        super().schedule(shadow)
        targets = {j.id: (j.ps, j.workers) for j in slot.jobs if j.ps or j.workers}
        if self.order == "cpu-first":
            return place_cpu_first(slot, targets)
        jobs = [j for j in sorted(slot.jobs, key=lambda j: (j.arrival, j.index)) if j.id in targets]
        for job in slot.jobs:
            job.ps = job.workers = 0
        if self.order == "bundles-first":
            for job in jobs:
                slot.add(job, "bundle")
        for roles, among in ((("worker",), [j for j in jobs if uses_gpu(j)]), (("ps", "worker"), jobs)):
            added = True
            while added:
                added = False
                for job in among:
                    for role in roles:
                        held = job.ps if role == "ps" else job.workers
                        if held < targets[job.id][role == "worker"] and slot.add(job, role):
                            added = True


def bound_s(setting, seed: int) -> float:
    """Mean JCT with every job alone at its peak speed (within the per-role cap) from its arrival slot."""
    trace = paper_trace(setting, seed)
    return statistics.fmean(j.epochs / peak_speed(j.model, setting.max_tasks) for j in trace) * SLOT_S


