"""Shortest remaining time first on a speed model's estimate of each job's remaining work.

Jobs in order of their estimated remaining run time at the GPUs they hold (or asked for, when they
hold none) each get the count they asked for while it fits; GPUs left over go, one at a time, to
the admitted job whose remaining time one more GPU cuts most (Optimus's rule). With the
simulator's oracle speed model the estimate is exact (`benchmarks/dl2/reference.py`: the
"srtf-oracle" reference); with a fitted one it is as good as the fit. It is a teacher for DL2's
warm-up (`slurm-liquid policy train --supervised --teacher srtf`), not a shipped elastic policy.
"""

from __future__ import annotations

import heapq

from slurm_liquid.policy.base import ClusterView, Decision, SpeedModel


class SRTF:
    name = "srtf"

    def __init__(self, speed: SpeedModel) -> None:
        self.speed = speed

    def reset(self) -> None:
        pass

    def allocate(self, view: ClusterView) -> list[int]:
        jobs, t = view.jobs, self.speed.iteration_time
        remaining = [self.speed.remaining_iterations(j) for j in jobs]

        def run_time(i: int) -> float:
            return remaining[i] * t(jobs[i], max(1, jobs[i].allocated or jobs[i].gpus))

        counts, free = [0] * len(jobs), view.total_gpus
        for i in sorted(range(len(jobs)), key=lambda i: (run_time(i), i)):
            if jobs[i].gpus <= free:
                counts[i], free = jobs[i].gpus, free - jobs[i].gpus

        def gain(i: int) -> float:
            n = counts[i]
            if not n or n + 1 > jobs[i].upper or jobs[i].app == "ncf":  # ncf runs on one GPU, as under Optimus
                return 0.0
            return (t(jobs[i], n) - t(jobs[i], n + 1)) * remaining[i]

        heap = [(-g, i) for i in range(len(jobs)) if (g := gain(i)) > 0]
        heapq.heapify(heap)
        while free > 0 and heap:
            _, i = heapq.heappop(heap)
            counts[i] += 1
            free -= 1
            if (g := gain(i)) > 0:
                heapq.heappush(heap, (-g, i))
        return counts

    def decide(self, view: ClusterView) -> Decision:
        return Decision.resize(view, self.allocate(view))
