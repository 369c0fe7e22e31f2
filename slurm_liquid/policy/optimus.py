"""Optimus: give each next GPU to the job whose remaining time it cuts most (SIMULATOR.md 6).

Every job gets one GPU in arrival order while any remain; then GPUs go one at a time to
the job with the largest marginal gain (T(n) - T(n+1)) x remaining iterations, as the
`SpeedModel` predicts (the simulator's oracle, or a model fitted on the live cluster).
A job keeps its nodes when its GPU count is unchanged; the loop places the others in
ascending order of GPU count.
"""

from __future__ import annotations

import heapq

from slurm_liquid.views import ClusterView, Decision, JobView, SpeedModel

# The artifact fixes ncf to one GPU under Optimus.
FIXED_GPUS = {"ncf": 1}


class Optimus:
    name = "optimus"
    payback = 2.0   # prices speed, not restarts: guarded as DRF is (`Rules.guard`)

    def __init__(self, speed: SpeedModel) -> None:
        self.speed = speed

    def reset(self) -> None:
        pass

    def max_gpus(self, job: JobView) -> int:
        if job.app in FIXED_GPUS:
            return FIXED_GPUS[job.app]
        return max(1, job.upper)

    def allocate(self, view: ClusterView) -> list[int]:
        jobs = view.jobs
        free = view.total_gpus
        counts = [0] * len(jobs)
        for i in range(min(free, len(jobs))):
            counts[i] = 1
        free -= sum(counts)
        heap: list[tuple[float, int]] = []
        rem = [0.0] * len(jobs)

        def gain(i: int) -> float:
            n = counts[i]
            if n + 1 > self.max_gpus(jobs[i]):
                return 0.0
            t = self.speed.iteration_time
            return (t(jobs[i], n) - t(jobs[i], n + 1)) * rem[i]

        if free > 0:
            for i, job in enumerate(jobs):
                rem[i] = self.speed.remaining_iterations(job)
                g = gain(i)
                if g > 0:
                    heap.append((-g, i))
            heapq.heapify(heap)
        while free > 0 and heap:
            _, i = heapq.heappop(heap)  # largest gain, ties to the earliest job
            counts[i] += 1
            free -= 1
            g = gain(i)
            if g > 0:
                heapq.heappush(heap, (-g, i))
        return counts

    def decide(self, view: ClusterView) -> Decision:
        return Decision.resize(view, self.allocate(view))
