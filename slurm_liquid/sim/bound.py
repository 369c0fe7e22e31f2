"""A lower bound on the mean JCT any policy can reach on a workload: a small linear program
(`benchmarks/dl2/bound.py` computes it for the 8 Pollux workloads).

The bound relaxes the simulator (docs/simulator.md) in four ways, each of which can only make
jobs finish earlier, so the LP's optimum is below the mean JCT of every policy, the oracle
reference included:

1. **Concave speed-ups, fractional GPUs.** Job j's work is W_j = its run time alone on one GPU
   (T_j(1), in "1-GPU-seconds", summed epoch by epoch with the exact gradient statistics). Holding
   n GPUs it does at most S_j(n) 1-GPU-seconds of work per second, where S_j(n) is the best ratio
   rate_e(n) / rate_e(1) over all epochs e and over every placement of n GPUs the traces can time
   (all placements on up to 4 nodes, and every node count the fallback interpolates): time-varying
   epochs and placements cannot beat it. The LP may mix GPU counts within an interval, so the job
   runs on the upper concave envelope Ŝ_j of {(0, 0)} U {(n, S_j(n)) : 1 <= n <= upper_j} (upper_j:
   the engine's elastic bound). With `batch_scaling`, rate_e(n) is the best of the job's batch
   candidates (as `AppModel.goodput_config` chooses), taken per placement and per epoch.
2. **One restart per job.** Job j cannot work before e_j = its first decision tick (the smallest
   positive multiple of the interval at or after its arrival) + the restart penalty; later
   restarts, the GPUs a job holds while it restarts and the GPUs a finished job keeps to the next
   tick are free in the relaxation.
3. **64 GPUs as a fluid.** In every time interval the GPUs in use sum to at most the cluster's;
   nodes, placement and fragmentation are ignored.
4. **Mean busy time.** With M_j = (1/W_j) * integral of t * (work rate of j at t) dt, any schedule
   has C_j >= M_j + p_j / 2, where p_j = W_j / max_n S_j(n) is j's shortest possible run: the work
   is done at a rate of at most W_j / p_j, so the latest it can be centred is p_j / 2 before C_j.
   M_j is bounded below by placing each interval's work at the interval's start (or at e_j).

Variables: lambda[j, k, v] >= 0, the share of interval k (length d_k, start t_k) in which job j runs at
vertex v = (n_v, s_v) of its envelope (only vertices up to the envelope's peak: later ones are
dominated). With a_jk = max(t_k, e_j) and d_jk = max(0, t_k + d_k - a_jk):

    minimise   sum_j [ (1/W_j) sum_{k,v} lambda[j,k,v] s_v d_jk a_jk + p_j/2 - arrival_j - E_j/2 ]
    subject to sum_v lambda[j,k,v] <= 1                       (each job, each interval)
               sum_{j,v} lambda[j,k,v] n_v d_jk <= G d_k       (GPU-seconds in each interval)
               sum_{k,v} lambda[j,k,v] s_v d_jk  = W_j         (every job completes)

divided by the number of jobs: a bound on the mean JCT. E_j/2 covers the simulator rounding each
epoch crossing to whole seconds (at most half a second early per crossing, E_j crossings). The
grid is `step` seconds wide until 4 hours after the last job can start and then widens by 5% per
interval up to a horizon where running the jobs one after the other at full speed would have finished;
a finer grid raises the bound (interval starts are closer to the real work times).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from slurm_liquid.errors import LiquidError
from slurm_liquid.sim.apps import AppModel, load_app
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.workload import JobSpec


FINE_TAIL = 4 * 3600.0  # seconds of fine grid after the last job can start (the long jobs' tail)


@lru_cache(maxsize=None)
def placements(gpus: int, gpus_per_node: int, max_nodes: int) -> tuple[tuple[int, ...], ...]:
    """Every placement of `gpus` the traces time differently: all on 1-4 nodes (the measured
    table), one per larger node count (the fallback interpolates on node and GPU counts only)."""
    out = []
    for m in range(1, min(4, gpus, max_nodes) + 1):
        out += [p for p in itertools.product(range(1, gpus_per_node + 1), repeat=m) if sum(p) == gpus]
    for m in range(5, min(gpus, max_nodes) + 1):
        if m * gpus_per_node >= gpus:
            base, extra = divmod(gpus, m)
            out.append(tuple(base + (i < extra) for i in range(m)))
    return tuple(out)


def _best_time(app: AppModel, config, gpus: int, gpus_per_node: int, max_nodes: int) -> float:
    best = math.inf
    for p in placements(gpus, gpus_per_node, max_nodes):
        try:
            best = min(best, app.iteration_time(p, config))
        except LiquidError:  # a batch outside what this placement measured: the engine cannot run it either
            continue
    return best


@lru_cache(maxsize=None)
def epoch_rates(app_name: str, batch: int | None, upper: int, gpus_per_node: int, max_nodes: int) -> np.ndarray:
    """rates[n, e]: the best progress per second on n GPUs in epoch e (row 0 is zero; inf-free).

    `batch` None: the job picks its batch (batch scaling), from the artifact's candidates."""
    app = load_app(app_name)
    epochs = app.max_epochs
    rates = np.zeros((upper + 1, epochs))
    for n in range(1, upper + 1):
        if batch is not None:
            config = app.batch_config(batch, n)
            t = _best_time(app, config, n, gpus_per_node, max_nodes)
            if math.isfinite(t):
                rates[n] = [app.gain(config.batch, e) / t for e in range(epochs)]
            continue
        low = max(app.init_bsz, app.min_local_bsz * n)
        configs = [app.batch_config(low, n)]
        if low <= app.max_bsz:
            for total in np.geomspace(low, app.max_bsz, 50):
                atomic, accum = app._split(total, n)
                if app.min_local_bsz <= atomic <= app.max_local_bsz:
                    configs.append(app._capped(n, atomic, accum))
        for config in set(configs):
            t = _best_time(app, config, n, gpus_per_node, max_nodes)
            if math.isfinite(t):
                rates[n] = np.maximum(rates[n], [app.gain(config.batch, e) / t for e in range(epochs)])
    return rates


@dataclass(frozen=True)
class JobBound:
    work: float  # W_j, seconds alone on one GPU
    earliest: float  # e_j: first tick + restart penalty
    arrival: float
    epochs: int
    vertices: tuple[tuple[int, float], ...]  # the concave envelope up to its peak: (GPUs, speed-up)

    @property
    def shortest(self) -> float:  # p_j
        return self.work / self.vertices[-1][1]


def envelope(speedup: Sequence[float]) -> tuple[tuple[int, float], ...]:
    """Upper concave envelope of (0, 0) and (n, speedup[n]) for n >= 1 (0 or less: not runnable),
    cut at its peak."""
    pts = [(0, 0.0)] + [(n, float(s)) for n, s in enumerate(speedup) if n >= 1 and s > 0]
    hull: list[tuple[int, float]] = []
    for p in pts:  # monotone chain, upper hull (x increasing)
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (p[1] - hull[-2][1])
                                  - (hull[-1][1] - hull[-2][1]) * (p[0] - hull[-2][0])) >= 0:
            hull.pop()
        hull.append(p)
    peak = max(range(len(hull)), key=lambda i: (hull[i][1], -i))
    return tuple(hull[1:peak + 1])


def job_bounds(specs: Sequence[JobSpec], config: ClusterConfig) -> list[JobBound]:
    """Each job's work, earliest start and speed-up envelope in `config`'s cluster."""
    sim = Simulator(specs, config)  # the engine's own elastic bound per job
    interval = config.interval
    out = []
    for job in sim.jobs:
        spec, app = job.spec, job.app
        upper = job.max_gpus or spec.num_replicas
        rates = epoch_rates(spec.application, None if config.batch_scaling else spec.batch_size, upper,
                            config.gpus_per_node, config.nodes)
        if not rates[1].all():
            raise LiquidError(f"{spec.name}: no measured speed on one GPU")
        widths = np.diff(app.epoch_progress)
        work = float(np.sum(widths / rates[1]))
        speedup = (rates / rates[1]).max(axis=1)
        first_tick = max(1, math.ceil(spec.time / interval - 1e-9)) * interval
        out.append(JobBound(work, first_tick + config.restart_penalty, spec.time, app.max_epochs, envelope(speedup)))
    return out


def grid(jobs: Sequence[JobBound], step: float) -> np.ndarray:
    """Interval boundaries: `step` wide until the last earliest start + FINE_TAIL, then 5% wider each."""
    last = max(j.earliest for j in jobs)
    horizon = last + sum(j.shortest for j in jobs) + step
    edges = list(np.arange(0.0, min(horizon, last + FINE_TAIL) + step, step))
    width = step
    while edges[-1] < horizon:
        width *= 1.05
        edges.append(edges[-1] + width)
    return np.asarray(edges)


def lp_bound(specs: Sequence[JobSpec], config: ClusterConfig | None = None, step: float = 120.0) -> float:
    """The LP's lower bound on the mean JCT of `specs` in `config` (see the module docstring)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    config = config or ClusterConfig()
    gpus = config.nodes * config.gpus_per_node
    jobs = job_bounds(specs, config)
    edges = grid(jobs, step)
    starts, widths = edges[:-1], np.diff(edges)
    cost, rows, cols, vals, b_ub = [], [], [], [], []
    eq_rows, eq_cols, eq_vals = [], [], []
    n_share = 0  # rows "sum_v lambda <= 1", one per (job, interval)
    cap_rows: list[tuple[int, int, float]] = []  # (interval, column, GPU-seconds)
    col = 0
    for j, job in enumerate(jobs):
        for k in range(len(starts)):
            a = max(starts[k], job.earliest)
            d = starts[k] + widths[k] - a
            if d <= 0:
                continue
            for n, s in job.vertices:
                cost.append(s * d * a / job.work)
                rows.append(n_share), cols.append(col), vals.append(1.0)
                cap_rows.append((k, col, n * d))
                eq_rows.append(j), eq_cols.append(col), eq_vals.append(s * d)
                col += 1
            b_ub.append(1.0)
            n_share += 1
    for k, c, v in cap_rows:
        rows.append(n_share + k), cols.append(c), vals.append(v)
    b_ub += list(gpus * widths)
    a_ub = coo_matrix((vals, (rows, cols)), shape=(n_share + len(starts), col)).tocsr()
    a_eq = coo_matrix((eq_vals, (eq_rows, eq_cols)), shape=(len(jobs), col)).tocsr()
    res = linprog(np.asarray(cost), A_ub=a_ub, b_ub=np.asarray(b_ub), A_eq=a_eq,
                  b_eq=np.asarray([j.work for j in jobs]), bounds=(0, None), method="highs")
    if res.status != 0:
        raise LiquidError(f"lower-bound LP failed: {res.message}")
    const = sum(j.shortest / 2 - j.arrival - j.epochs / 2 for j in jobs)
    return float((res.fun + const) / len(jobs))
