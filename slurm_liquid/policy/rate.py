"""Most completions per second: GPUs go where they raise the sum of the jobs' completion rates most.

A job that would finish in T seconds at n GPUs completes at the rate 1/T. Mean JCT falls fastest when
the sum of those rates is highest, so GPUs go, a step at a time, to the job whose rate one more step
raises most per GPU. With linear speed-up this is shortest remaining time first (a short job's rate
gains most from every GPU); with speed-ups that flatten it spreads GPUs as far as each one still pays,
which SRTF at the jobs' asks does not: with jobs that scale their batch under overload, SRTF at their
asks is no better than DRF's one GPU each, and this rule is 30% below both (oracle speeds, Philly
samples of seeds 30000-30003 at loads 1-2; `benchmarks/dl2/notes.md`).

T counts the restart a change costs, `start_margin` restart penalties for a job that holds no GPUs and
`resize_margin` for a running job given another count (8 each, SRTFRestart's margins), so that a
running job keeps what it holds unless a change is clearly worth it. The restart makes a job's rates
non-concave in its GPUs (its held count is a peak), so a step is the run of GPUs with the best gain
per GPU from where the job stands, as far as what is free allows (the upper hull, as the paper
replica's `hull` teacher takes it).

It is a teacher for DL2's warm-up (`slurm-liquid policy train --supervised --teacher completion-rate`)
and, on the simulator's oracle speed model, the "completion-rate-oracle" reference; DL2's state shows
each job's best step gain (`dl2.state`, the RATE column) computed by `best_step` below.
"""

from __future__ import annotations

import heapq
from typing import Callable

from slurm_liquid.views import ClusterView, Decision, JobView, SpeedModel


def job_top(job: JobView, total_gpus: int) -> int:
    """The most GPUs the rule gives `job`: its upper bound within the cluster; ncf runs on one GPU, as
    under Optimus and SRTF."""
    return 1 if job.app == "ncf" else min(job.upper, total_gpus)


def rates(job: JobView, speed: SpeedModel, penalty_s: float, start_margin: float,
          resize_margin: float) -> Callable[[int], float]:
    """The completion rate 1/T of `job` at n GPUs (0 at 0): T = its remaining steps x the step time at n,
    plus the margin's restarts when n differs from what it holds."""
    steps, held = max(speed.remaining_iterations(job), 0.0), job.allocated
    change = (start_margin if held == 0 else resize_margin) * penalty_s
    cache: dict[int, float] = {}

    def rate(n: int) -> float:
        if n <= 0:
            return 0.0
        hit = cache.get(n)
        if hit is None:
            hit = cache[n] = 1.0 / max(steps * speed.iteration_time(job, n) + (0.0 if n == held else change), 1e-9)
        return hit

    return rate


def best_step(rate: Callable[[int], float], have: int, least: int, top: int) -> tuple[float, int]:
    """(gain per GPU, GPUs) of the best step up from `have` GPUs to at most `top`: the run of GPUs that
    raises the rate most per GPU; a job at 0 steps to at least `least`. (0.0, 0) when no step raises it."""
    base, best, size = rate(have), 0.0, 0
    for n in range(max(have + 1, least if have == 0 else 1), top + 1):
        gain = (rate(n) - base) / (n - have)
        if gain > best:
            best, size = gain, n - have
    return best, size


def counts_of(plan: list[tuple[int, int]], jobs: int) -> list[int]:
    """The GPU count per job that a plan's steps add up to."""
    counts = [0] * jobs
    for i, size in plan:
        counts[i] += size
    return counts


class CompletionRate:
    name = "completion-rate"
    start_margin = 8.0  # in restart penalties; see the module's doc
    resize_margin = 8.0

    def __init__(self, speed: SpeedModel) -> None:
        self.speed = speed

    def reset(self) -> None:
        pass

    def plan(self, view: ClusterView) -> list[tuple[int, int]]:
        """The steps in the order they are taken: (index into `view.jobs`, GPUs added)."""
        jobs, total = view.jobs, view.total_gpus
        rate = [rates(j, self.speed, view.restart_penalty_s, self.start_margin, self.resize_margin) for j in jobs]
        top = [job_top(j, total) for j in jobs]
        counts, free, steps = [0] * len(jobs), total, []

        def push(i: int) -> None:
            gain, size = best_step(rate[i], counts[i], jobs[i].least, min(top[i], counts[i] + free))
            if size:
                heapq.heappush(heap, (-gain, i, size))

        heap: list[tuple[float, int, int]] = []
        for i in range(len(jobs)):
            push(i)
        while free > 0 and heap:
            _, i, size = heapq.heappop(heap)
            if size <= free:  # else the step was priced when more was free: price it again
                counts[i] += size
                free -= size
                steps.append((i, size))
            push(i)
        return steps

    def allocate(self, view: ClusterView) -> list[int]:
        return counts_of(self.plan(view), len(view.jobs))

    def decide(self, view: ClusterView) -> Decision:
        return Decision.resize(view, self.allocate(view))
