"""DL2's state and action loop for all-reduce GPU jobs (DL2 paper section 4, adapted).

One scheduling slot is a loop of decisions. Each decision sees a matrix with one row per job
in the window (the first `window` active jobs in the window order: least attained GPU service
first, ties by arrival, as Tiresias and Pollux rank jobs, so that a job that just arrived is
always among those decided; files trained before that ordering use arrival order) and a final
"stop" row. A job
row holds: application (one-hot), time since submission, GPU-hours attained, progress (epoch
over epochs), GPUs held now, GPUs given so far in this slot, how far ahead of the least-served
unsaturated job it is, whether one more GPU changes its current allocation (a restart), its
elastic upper bound, arrival rank, restarts, and, where a speed model is known, the marginal
speed-up of one more GPU and the estimated remaining time, and where the job stands in shortest-
estimated-remaining-time-first order among all active jobs: its rank, the GPUs asked for by the
jobs ahead of it (over the cluster's) and its own ask, how far what it was given in this slot is
past its ask, and the time one more GPU saves it (a policy file taught by the restart-aware teacher
ranks a job that holds no GPUs as that teacher does, `start_margin` restart penalties later:
`slurm_liquid.policy.srtf.ranking_times`). Rank and GPUs ahead are relative: a per-row
network sees only its own row, and whether a job is among the shortest that fit is a property
of the others. Then come the cluster-wide features: GPUs still free in this slot, active jobs,
jobs beyond the window, cluster size. The last column (RATE, added after the others, so that a file
written before it reads it with zero weights: `io.load_policy`) is, for a file taught by the
completion-rate teacher (`rate`), the gain per GPU of the job's best next step in the sum of
completion rates, as that teacher prices it (`slurm_liquid.policy.rate.best_step`, with the file's
`start_margin` as both of its margins), on a log scale; 0 where no step raises it.

Actions: "+1 GPU to job j" (a job at 0 first gets its minimum: 1 if elastic, its request if
rigid) or "stop" (legal once some job holds GPUs in this slot). The loop runs until stop or until no job can take a GPU; then jobs beyond
the window keep what they hold if it still fits, else get their minimum while GPUs remain,
in window order. The batch size is not an action: a job that scales its batch picks it for
the GPUs it gets (`ClusterConfig.batch_scaling`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from slurm_liquid.views import ClusterView, JobView, SpeedModel
from slurm_liquid.policy.rate import best_step, job_top, rates
from slurm_liquid.policy.srtf import ranking_times

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
JOB_FEATURES = 25
GLOBAL_FEATURES = 4
RATE = JOB_FEATURES + GLOBAL_FEATURES  # appended last: files from before it have one column fewer
FEATURES = RATE + 1
STOP_FLAG = JOB_FEATURES - 1
# columns that change within a slot's loop
ASSIGNED, AHEAD, CHANGES, SPEEDUP, REMAINING, FREE = 10, 11, 12, 16, 17, JOB_FEATURES
SRTF_RANK, ASKED_AHEAD, ASKED = 19, 20, 21  # fixed within a slot
OVER_ASK, GAIN = 22, 23  # change with the GPUs given in the slot


WINDOW_ORDERS = ("service", "arrival")
DEFAULT_WINDOW = 64  # rows the network sees; the Pollux workloads reach 49 active jobs


def window_order(view: ClusterView, order: str) -> list[int]:
    """Indices into `view.jobs` in the order the window takes them."""
    if order == "arrival":
        return list(range(len(view.jobs)))
    if order != "service":
        raise ValueError(f"unknown window order {order!r} (known: {', '.join(WINDOW_ORDERS)})")
    return sorted(range(len(view.jobs)), key=lambda i: (view.jobs[i].attained_gpu_seconds, i))


class SlotState:
    """The evolving state of one slot's decision loop."""

    def __init__(self, view: ClusterView, window: int, speed: SpeedModel | None = None,
                 order: str = "service", start_margin_s: float = 0.0, rate: bool = False) -> None:
        self.view = view
        self.window = window
        self.index = window_order(view, order)  # position in view.jobs of each window row, then the rest
        self.jobs: list[JobView] = [view.jobs[i] for i in self.index[:window]]
        self.beyond: list[JobView] = [view.jobs[i] for i in self.index[window:]]
        self.speed = speed
        self.total = view.total_gpus
        self.free = self.total
        n = len(self.jobs)
        self.assigned = np.zeros(n, dtype=int)
        self.current = np.array([j.allocated for j in self.jobs], dtype=int)
        self.upper = np.array([min(j.upper, self.total) for j in self.jobs], dtype=int)
        self.minimum = np.array([j.least for j in self.jobs], dtype=int)
        self._speed_cache: dict[tuple[int, int], tuple[float, float]] = {}
        self.base = np.zeros((n + 1, FEATURES))
        now = view.now
        for i, job in enumerate(self.jobs):
            row = self.base[i]
            if job.app in APPS:
                row[APPS.index(job.app)] = 1.0
            row[6] = math.log1p(max(0.0, now - job.submit_time) / 3600)
            row[7] = math.log1p(job.attained_gpu_seconds / 3600)
            row[8] = job.epoch / job.epochs if job.epochs else 0.0
            row[9] = self.current[i] / 16
            row[13] = self.upper[i] / 64
            row[14] = self.index[i] / window  # arrival rank among the active jobs
            row[15] = math.log1p(job.restarts)
            row[18] = 1.0 if speed is not None else 0.0
        self.srtf_rank = np.zeros(n, dtype=int)
        if speed is not None and n:
            self._srtf_features(view, speed, start_margin_s)
        self._rates = None
        if rate and speed is not None:
            margin = start_margin_s / view.restart_penalty_s if view.restart_penalty_s > 0 else 0.0
            self._rates = [rates(j, speed, view.restart_penalty_s, margin, margin) for j in self.jobs]
            self._tops = [min(job_top(j, self.total), u) for j, u in zip(self.jobs, self.upper)]
            self._rate_cache: dict[tuple[int, int, int], float] = {}
        self.base[n, STOP_FLAG] = 1.0
        self.base[:, FREE + 1] = len(view.jobs) / window
        self.base[:, FREE + 2] = len(self.beyond) / window
        self.base[:, FREE + 3] = self.total / 64

    def _srtf_features(self, view: ClusterView, speed: SpeedModel, start_margin_s: float) -> None:
        """Rank of every window job in shortest-estimated-remaining-time-first order (remaining steps at
        the GPUs it holds, or asked for when it holds none), and the GPUs asked by the jobs ahead of it."""
        times = ranking_times(view.jobs, speed, start_margin_s)
        order = sorted(range(len(view.jobs)), key=lambda i: (times[i], i))
        place = {job_index: rank for rank, job_index in enumerate(order)}
        ahead, asked_before = 0, {}
        for i in order:
            asked_before[i] = ahead
            ahead += view.jobs[i].gpus
        for row, job_index in enumerate(self.index[:self.window]):
            self.srtf_rank[row] = place[job_index]
            self.base[row, SRTF_RANK] = place[job_index] / self.window
            self.base[row, ASKED_AHEAD] = asked_before[job_index] / max(1, self.total)
            self.base[row, ASKED] = view.jobs[job_index].gpus / 16

    def _speed_features(self, i: int, gpus: int) -> tuple[float, float, float]:
        """At `gpus`: the log speed-up of one more GPU, the remaining time (log1p hours) and the time
        one more GPU saves over the remaining steps (log1p hours; Optimus's marginal gain)."""
        key = (i, gpus)
        hit = self._speed_cache.get(key)
        if hit is None:
            job, g = self.jobs[i], max(gpus, 1)
            t_now = self.speed.iteration_time(job, g)
            up = min(g + 1, self.upper[i])
            t_up = self.speed.iteration_time(job, up) if up > g else t_now
            steps = max(self.speed.remaining_iterations(job), 0.0)
            hit = (math.log(t_now / t_up) if t_up > 0 and t_now > 0 else 0.0, math.log1p(steps * t_now / 3600),
                   math.log1p(max(t_now - t_up, 0.0) * steps / 3600))
            self._speed_cache[key] = hit
        return hit

    def gain(self, i: int) -> float:
        """The GAIN feature of window row `i` at what it has been given so far (0 without a speed model)."""
        return self._speed_features(i, int(self.assigned[i]))[2] if self.speed is not None else 0.0

    def rate_gain(self, i: int) -> float:
        """Window row `i`'s best next step's gain per GPU in the sum of completion rates (1/s; 0 when no
        step raises it, or without the column), within what is free now."""
        if self._rates is None:
            return 0.0
        have = int(self.assigned[i])
        top = min(self._tops[i], have + self.free)
        key = (i, have, top)
        hit = self._rate_cache.get(key)
        if hit is None:
            hit = self._rate_cache[key] = best_step(self._rates[i], have, int(self.minimum[i]), top)[0]
        return hit

    def increment(self, i: int) -> int:
        return self.minimum[i] if self.assigned[i] == 0 else 1

    def valid(self) -> np.ndarray:
        """Legal actions: rows of jobs that can take their next increment, plus stop (last).

        Stop becomes legal once some job holds GPUs in this slot, so that every slot makes
        progress and no policy, however badly trained, can idle the cluster forever."""
        n = len(self.jobs)
        inc = np.where(self.assigned == 0, self.minimum, 1)
        ok = (self.assigned < self.upper) & (inc <= self.free)
        if not ok.any():
            return np.zeros(n + 1, dtype=bool)
        return np.append(ok, bool(self.assigned.any()))

    def matrix(self) -> np.ndarray:
        x = self.base.copy()
        n = len(self.jobs)
        if n:
            unsat = self.assigned < self.upper
            floor = self.assigned[unsat].min() if unsat.any() else 0
            x[:n, ASSIGNED] = self.assigned / 16
            x[:n, AHEAD] = np.clip((self.assigned - floor) / 4, -4, 4)
            x[:n, CHANGES] = self.assigned == self.current
            x[:n, OVER_ASK] = np.clip((self.assigned - [j.gpus for j in self.jobs]) / 4, -4, 4)
            if self.speed is not None:
                for i in range(n):
                    x[i, SPEEDUP], x[i, REMAINING], x[i, GAIN] = self._speed_features(i, int(self.assigned[i]))
            if self._rates is not None:
                for i in range(n):
                    gain = self.rate_gain(i)  # 1/s per GPU: about 1e-12 (weeks) to 1e-2 (a minute)
                    x[i, RATE] = max(math.log(gain) + 30.0, 0.1) / 10 if gain > 0 else 0.0
        x[:, FREE] = self.free / 16
        return x

    def apply(self, action: int) -> None:
        inc = self.increment(action)
        self.assigned[action] += inc
        self.free -= inc

    def counts(self) -> list[int]:
        """GPU counts for every active job, in `view.jobs` order: the window's from the loop,
        the rest by the beyond-window rule."""
        free = self.free
        extra = []
        for job in self.beyond:
            want = job.allocated or job.least
            if want > free:
                want = job.least if job.least <= free else 0
            extra.append(want)
            free -= want
        out = [0] * len(self.index)
        for i, n in zip(self.index, [int(a) for a in self.assigned] + extra):
            out[i] = n
        return out

    def window_targets(self, counts: Sequence[int]) -> list[int]:
        """Per window row, its entry of `counts` (given in `view.jobs` order)."""
        return [counts[i] for i in self.index[:self.window]]


def target_sequence(assigned: Sequence[int], target: Sequence[int], valid: np.ndarray,
                    arrival: Sequence[int] | None = None, priority: Sequence[Any] | None = None) -> int:
    """The teacher's next action towards `target` counts, or stop. This turns any scheduler's
    allocation into DL2's "+1 GPU" sequence.

    Without `priority`: the least-served job still short of its target (ties: earliest `arrival`,
    default the row order), which reproduces DRF's water-filling order exactly. With `priority`
    (one comparable key per row, lowest first): the job with the lowest key still short of its
    target. A scheduler that ranks jobs (shortest remaining time first) is learnt in its own
    order, because a per-row network can score a row by its own rank but cannot know whether
    every other job has reached its target."""
    rank = range(len(assigned)) if arrival is None else arrival
    short = [i for i, (a, t) in enumerate(zip(assigned, target)) if a < t and valid[i]]
    if not short:
        return len(assigned)
    if priority is not None:
        return min(short, key=lambda i: (priority[i], i))
    return min(short, key=lambda i: (assigned[i], rank[i]))
