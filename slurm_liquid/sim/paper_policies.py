"""The replica's policies (`slurm_liquid.sim.paper`): the artifact's DRF and Optimus, and two
references, best-split DRF and `hull` (DL2's teacher). Each adds tasks through `Slot.add`, so each
runs under whatever placement the slot has (`slurm_liquid.psworld.slot`)."""

from __future__ import annotations

import heapq
import math

from slurm_liquid.psworld.slot import Slot, assign_bundles, first_bundles, reach
from slurm_liquid.psworld.world import PaperJob, next_step, uses_gpu


class PaperDRF:
    """The artifact's DRF: one worker + one PS at a time to the job with the least dominant share
    (ties: earliest arrival), until the slot refuses one (`Slot.add`), or every job is capped."""

    name = "drf"

    def reset(self) -> None:
        pass

    def key(self, job: PaperJob, slot: Slot) -> float:
        """Queue order for the job's next bundle, least first: its dominant share."""
        return job.share(slot.setting.nodes)

    def schedule(self, slot: Slot) -> None:
        queue = [(0.0, j.arrival, j.index, j) for j in slot.jobs]
        heapq.heapify(queue)
        while queue:
            _, arrival, index, job = heapq.heappop(queue)
            if not slot.add(job, "bundle"):
                break
            if slot.can_grow(job, "bundle"):
                heapq.heappush(queue, (self.key(job, slot), arrival, index, job))


class PaperBestSplit(PaperDRF):
    """A reference, not the artifact's: DRF's task count per job (DRF run on a shadow of the slot,
    under the same placement), split between PS and workers (at least one of each) the way the speed
    table makes fastest, then added to the slot like any policy's tasks: every job's bundle first,
    then the rest job by job in arrival order, stopping at the first task the slot refuses. The
    per-role cap is not applied to the split (DRF's count already respects it); a split uses no more
    GPUs than DRF's (a PS needs none) and the same CPUs, so under `cpu-first` it always fits. Beyond
    the table's 23 measured tasks the speed is the RBF's extrapolation, as in the artifact."""

    name = "drf-best-split"

    def schedule(self, slot: Slot) -> None:
        super().schedule(Slot(slot.setting, slot.ts, slot.jobs, slot.placement))
        targets = []
        for job in sorted(slot.jobs, key=lambda j: (j.arrival, j.index)):
            best_split(job)
            if job.ps and job.workers:
                targets.append((job, job.ps, job.workers))
        for job in slot.jobs:  # the counts were the shadow's
            job.ps = job.workers = 0
        reach(slot, [(job, 1, 1) for job, _, _ in targets] + targets)


def best_split(job: PaperJob) -> None:
    """Re-split the job's tasks between PS and workers (at least one of each) as the speed table makes
    fastest (ties: fewer PS)."""
    tasks = job.ps + job.workers
    if tasks >= 2:
        splits = [(p, tasks - p) for p in range(1, tasks)]
        job.ps, job.workers = max(splits, key=lambda pw: (job.epochs_per_slot(*pw), -pw[0]))


class PaperOptimus:
    """The artifact's Optimus: every job first gets a worker and a PS; then, repeatedly, the task
    (worker or PS) with the largest cut in the job's remaining time, while one is positive."""

    name = "optimus"

    def reset(self) -> None:
        pass

    @staticmethod
    def _gain(job: PaperJob, cap: int) -> tuple[float, str]:
        if job.workers == 0:
            return math.inf, "worker"
        if job.ps == 0:
            return math.inf, "ps"
        now = job.epochs_per_slot()
        best = (-math.inf, "worker")
        for role, (p, w) in (("worker", (job.ps, job.workers + 1)), ("ps", (job.ps + 1, job.workers))):
            after = job.epochs_per_slot(p, w)
            if now <= 0:
                gain = math.inf if after > 0 else 0.0
            else:
                gain = job.remaining() / now - (job.remaining() / after if after > 0 else math.inf)
            if gain >= best[0]:  # ties to the PS, as the artifact
                best = (gain, role)
        return best

    def schedule(self, slot: Slot) -> None:
        cap = slot.setting.max_tasks
        queue = []
        for job in slot.jobs:
            gain, role = self._gain(job, cap)
            queue.append((-gain, job.index, role, job))
        heapq.heapify(queue)
        while queue:
            neg, _, role, job = heapq.heappop(queue)
            if -neg <= 0:
                break
            if not slot.can_grow(job, role):
                continue
            if not slot.add(job, role):
                break
            gain, role = self._gain(job, cap)
            heapq.heappush(queue, (-gain, job.index, role, job))


class PaperHull:
    """A reference, not the artifact's, and the PS/worker DL2's teacher: every active job a worker
    and a PS (arrival order), then, step after step, the job whose `next_step` gains the most epochs
    per slot per task, while the cluster's `capacity` lasts. The plan is made on counts; the slot
    then takes the bundle round (`assign_bundles`, as DL2's) and the steps in the plan's order,
    stopping at the first task it refuses (which under `cpu-first` never happens: the plan keeps to
    the cluster's totals)."""

    name = "hull"

    def reset(self) -> None:
        pass

    @staticmethod
    def plan(slot: Slot) -> list[tuple[PaperJob, int, int]]:
        """The (job, PS, workers) targets in the order they are decided: the first bundles, then the steps."""
        setting = slot.setting
        bundled, tasks_left, gpu_left = first_bundles(slot)
        held = {job.id: (1, 1) for job in bundled}
        plan = [(job, 1, 1) for job in bundled]
        queue: list = []

        def push(job: PaperJob) -> None:
            step = next_step(job.model, setting.max_tasks, *held[job.id])
            if step is not None:
                ps, workers, speed = step
                now = job.epochs_per_slot(*held[job.id])
                heapq.heappush(queue, (-(speed - now) / (ps + workers - sum(held[job.id])), job.index, ps, workers, job))

        for job in bundled:
            push(job)
        while queue:
            _, _, ps, workers, job = heapq.heappop(queue)
            had_ps, had_workers = held[job.id]
            tasks, gpus = ps + workers - had_ps - had_workers, (workers - had_workers) * uses_gpu(job)
            if tasks <= tasks_left and gpus <= gpu_left:
                held[job.id] = (ps, workers)
                plan.append((job, ps, workers))
                tasks_left, gpu_left = tasks_left - tasks, gpu_left - gpus
                push(job)
        return plan

    def schedule(self, slot: Slot) -> None:
        plan = self.plan(slot)
        assign_bundles(slot)
        reach(slot, plan)
