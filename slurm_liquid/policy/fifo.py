"""FIFO with EASY backfill: what a Slurm site runs today.

Jobs run rigidly at the GPU count they asked for and are never preempted or resized.
The queue starts in arrival order; when the head job does not fit, it gets a
reservation at the earliest time enough GPUs free up (from the running jobs' time
limits), and later jobs may jump ahead only if they fit now and either end before that
time or use GPUs the reservation does not need. A job without a time limit is assumed
to run forever, which makes backfill conservative, as in Slurm; past Slurm's backfill window
(`window_s`, its bf_window) no reservation is held at all.
"""

from __future__ import annotations

import math

from slurm_liquid.views import ClusterView, Decision, JobView


def _end(job: JobView, now: float) -> float:
    if job.time_limit_s is None:
        return math.inf
    start = job.started_at if job.started_at is not None else now
    return start + job.time_limit_s


class FifoBackfill:
    name = "fifo"

    def __init__(self, backfill: bool = True, window_s: float = math.inf) -> None:
        self.backfill = backfill
        # Slurm's bf_window (default 1 day): a head job that cannot start within it gets no reservation,
        # and every later job that fits starts (with no time limits, as on a cluster without --time).
        self.window_s = window_s

    def reset(self) -> None:
        pass

    def decide(self, view: ClusterView) -> Decision:
        now = view.now
        running = [j for j in view.jobs if j.allocation]
        free = view.total_gpus - sum(j.allocated for j in running)
        ends = [(_end(j, now), j.allocated) for j in running]
        start: list[tuple[JobView, int]] = []
        shadow = None  # the head job's reserved start time, once it is blocked
        extra = 0  # GPUs free at `shadow` beyond what the head job needs
        for job in view.jobs:
            if job.allocation:
                continue
            if shadow is None:
                if job.gpus <= free:
                    start.append((job, job.gpus))
                    free -= job.gpus
                    ends.append((_end(job, now), job.gpus))
                    continue
                if not self.backfill:
                    break
                shadow, avail = math.inf, free
                for end, gpus in sorted(ends):
                    avail += gpus
                    if avail >= job.gpus:
                        shadow = end
                        break
                extra = avail - job.gpus if shadow - now <= self.window_s else math.inf
                continue
            if job.gpus > free:
                continue
            end = _end(job, now)
            if end < math.inf and end <= shadow:
                start.append((job, job.gpus))
                free -= job.gpus
            elif job.gpus <= extra:
                start.append((job, job.gpus))
                free -= job.gpus
                extra -= job.gpus
        return Decision(tuple((job.id, gpus) for job, gpus in start))
