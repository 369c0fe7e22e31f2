"""Shortest remaining time first on a speed model's estimate of each job's remaining work.

Jobs in order of their estimated remaining run time at the GPUs they hold (or asked for, when they
hold none) each get the count they asked for while it fits; GPUs left over go, one at a time, to
the admitted job whose remaining time one more GPU cuts most (Optimus's rule). With the
simulator's oracle speed model the estimate is exact (`benchmarks/dl2/reference.py`: the
"srtf-oracle" reference); with a fitted one it is as good as the fit. It is a teacher for DL2's
warm-up (`slurm-liquid policy train --supervised --teacher srtf`), not a shipped elastic policy.

`SRTFRestart` ("srtf-restart") is the same rule told what a restart costs. Plain SRTF ignores it: each
arrival reshuffles who is admitted and where the leftover GPUs go, so at a 150 s penalty and twice the
load running jobs restart slot after slot (on held-out Philly samples it is then 4% below DRF at fixed
batch and 23% above it with batch scaling; notes in `benchmarks/dl2/results.md`). Told the penalty p,
(a) a job that holds no GPUs ranks as if `start_margin` x p longer, so a running job is only preempted
by one clearly shorter (for two jobs R running and N waiting, running N first lowers the sum of their
completion times only when N is shorter by more than 2p; the margin of 8 was chosen on samples that no
table uses), and (b) a running job keeps the GPUs it holds unless the change saves more than
`resize_margin` x p of its remaining time, or the GPUs are needed by a job ranked ahead of it.
"""

from __future__ import annotations

import heapq

from slurm_liquid.views import ClusterView, Decision, JobView, SpeedModel


def ranking_times(jobs: tuple[JobView, ...] | list[JobView], speed: SpeedModel, start_margin_s: float = 0.0) -> list[float]:
    """Each job's estimated remaining run time at the GPUs it holds (or asked for, when it holds none),
    plus `start_margin_s` for a job that holds none: the key of shortest-remaining-time-first order,
    shared by the teacher and DL2's ranking columns (`dl2.state`)."""
    t = speed.iteration_time
    return [speed.remaining_iterations(j) * t(j, max(1, j.allocated or j.gpus)) + (0.0 if j.allocated else start_margin_s)
            for j in jobs]


class SRTF:
    name = "srtf"
    start_margin = 0.0  # in restart penalties; see the module's doc
    resize_margin = 0.0

    def __init__(self, speed: SpeedModel) -> None:
        self.speed = speed

    def reset(self) -> None:
        pass

    def allocate(self, view: ClusterView) -> list[int]:
        jobs, t, penalty = view.jobs, self.speed.iteration_time, view.restart_penalty_s
        remaining = [self.speed.remaining_iterations(j) for j in jobs]
        times = ranking_times(jobs, self.speed, self.start_margin * penalty)
        held = [j.allocated for j in jobs]
        ranked = sorted(range(len(jobs)), key=lambda i: (times[i], i))
        counts, free = [0] * len(jobs), view.total_gpus
        for i in ranked:
            if jobs[i].gpus <= free:
                counts[i], free = jobs[i].gpus, free - jobs[i].gpus
        if self.resize_margin:  # an admitted job keeps what it holds beyond its ask while that fits
            for i in ranked:
                if counts[i] and held[i] > counts[i] and held[i] - counts[i] <= free:
                    counts[i], free = held[i], free - (held[i] - counts[i])

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
        if self.resize_margin:  # a change that saves less than the margin is not worth its restart
            for i in range(len(jobs)):
                have, want = held[i], counts[i]
                if have and want and want != have and \
                        remaining[i] * (t(jobs[i], have) - t(jobs[i], want)) < self.resize_margin * penalty:
                    if want > have:
                        counts[i], free = have, free + (want - have)
                    elif have - want <= free:
                        counts[i], free = have, free - (have - want)
        return counts

    def decide(self, view: ClusterView) -> Decision:
        return Decision.resize(view, self.allocate(view))


class SRTFRestart(SRTF):
    name = "srtf-restart"
    start_margin = 8.0
    resize_margin = 8.0
