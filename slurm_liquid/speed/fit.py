"""Fitting `ThroughputParams` to measured step times, as Pollux's agents do, with a prior.

A job's measurements are a handful of widths (GPUs, nodes, batch), each an average of its reports.
Pollux fits its seven parameters by least squares on log step times; with one or two widths that is
under-determined, and Pollux pins the parameters it has no data for. Here the prior does that job:

- the prior is first rescaled to the job's own step time at its narrowest measured width (the prior
  knows the shape of the scaling curve, the job knows its own hardware): one report, or several at
  one width, give the prior's curve through the job's own time;
- every parameter is then pulled weakly toward the rescaled prior's (`PARAM_WEIGHT` per squared
  log unit, against a weight of 0.5 to 1 per measured width): the data moves what it determines
  (gradient sync once a multi-GPU width is measured, retrogression once a third width is), the
  prior keeps what it does not; network terms move together (params.py: they are ratios);
- across nodes, a job measured on one node only keeps the prior's ratio of cross-node to in-node
  sync (3.7 to 6.1 in the traces) applied to its own in-node sync; with `across_nodes` (Pollux
  assumes 1.1) a job measured at two GPU counts or more (so its sync shows) is taken to sync across
  nodes at that ratio instead: optimistic, so that a policy tries one node more (no further:
  `MeasuredSpeedModel.reach`) and learns from the job's reports there.

The model's structure does the rest: the network term never shrinks with more GPUs, so a job
measured flat past two GPUs is predicted flat or worse beyond.

The solver is a bounded Levenberg-Marquardt over all jobs at once (numpy, one 7x7 system per job
and iteration), because scipy's least_squares costs ~15 ms per job in Python overhead and a slot
may refit hundreds; tests check that it reaches scipy's optimum. Each job is fitted from two
starting points (the prior, and one where sync is half the narrowest multi-GPU step: from a prior
whose sync is small next to compute, the gradient toward a saturating curve is ~(sync/step)^gamma,
too flat to follow) and keeps the better fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from slurm_liquid.speed.params import N_PARAMS, ThroughputParams, Widths, bounds, jacobian, predict_log

PARAM_WEIGHT = 1e-3
# A prior's network terms are raised to at least these fractions of its one-GPU compute time before a
# fit starts from it: a parameter at 1e-9 has no gradient in log space, and a job measured to
# saturate must be able to grow it.
MIN_NETWORK = 1e-3
MIN_RETRO = 1e-4
MAX_ITERATIONS = 60


@dataclass(frozen=True)
class Points:
    """Measured widths: arrays of GPUs, nodes, global batch, mean log step time and weight."""

    gpus: np.ndarray
    nodes: np.ndarray
    batch: np.ndarray
    log_t: np.ndarray
    weight: np.ndarray


def floored(prior: ThroughputParams, batch: float) -> ThroughputParams:
    """`prior` with network terms of at least MIN_NETWORK/MIN_RETRO of its one-GPU step at `batch`."""
    base = prior.step_time(1, 1, batch)
    a_r = max(prior.alpha_r, MIN_NETWORK * base)
    b_r = max(prior.beta_r, MIN_RETRO * base)
    return ThroughputParams(prior.alpha_c, prior.beta_c, a_r, b_r, a_r * max(prior.alpha_n / prior.alpha_r, 1.0),
                            b_r * max(prior.beta_n / prior.beta_r, 1.0), prior.gamma)


def rescale(prior: ThroughputParams, points: Points) -> ThroughputParams:
    """`prior` scaled to the job's mean step time at its narrowest measured GPU count."""
    w = Widths.of(points.gpus, points.nodes, points.batch)
    gap = points.log_t - predict_log(prior.to_vector(), w)
    narrow = points.gpus == points.gpus.min()
    shift = float(np.average(gap[narrow], weights=points.weight[narrow]))
    return prior.scaled(math.exp(shift))


def anchor_vector(points: Points, prior: ThroughputParams, across_nodes: float | None = None) -> np.ndarray:
    """The vector the fit is pulled toward (see the module docstring)."""
    x = rescale(floored(prior, float(points.batch[-1])), points).to_vector()
    if across_nodes is not None and not (points.nodes > 1).any() and len(np.unique(points.gpus)) > 1:
        x[4:6] = math.log(max(float(across_nodes), 1.0))
    return x


def network_heavy(points: Points, x_prior: np.ndarray) -> np.ndarray | None:
    """The second starting point: sync half of the narrowest multi-GPU step; None without one."""
    multi = points.gpus > 1
    if not multi.any():
        return None
    i = int(np.argmin(np.where(multi, points.gpus, np.inf)))
    x = x_prior.copy()
    x[2] = points.log_t[i] + math.log(0.5) - (x[4] if points.nodes[i] > 1 else 0.0)
    x[3] = -math.log(8.0)
    x[6] = 1.5
    return x


def fit(points: Points, prior: ThroughputParams, start: np.ndarray | None = None,
        across_nodes: float | None = None) -> ThroughputParams:
    """The parameters that best explain `points`, regularised toward `prior`."""
    return fit_many([(points, prior, start)], across_nodes)[0]


def fit_many(problems: Sequence[tuple[Points, ThroughputParams, np.ndarray | None]],
             across_nodes: float | None = None) -> list[ThroughputParams]:
    """`fit` for many jobs at once: [(points, prior, start vector or None)] -> fitted params.

    `start` (a previous fit's vector) makes a refit after a few new reports converge in few steps."""
    if not problems:
        return []
    anchors, starts, owner = [], [], []
    for i, (points, prior, start) in enumerate(problems):
        x_prior = anchor_vector(points, prior, across_nodes)
        anchors.append(x_prior)
        for x0 in (x_prior if start is None else start, network_heavy(points, x_prior)):
            if x0 is not None:
                starts.append(np.asarray(x0, dtype=float))
                owner.append(i)
    owner_a = np.array(owner)
    width = max(len(p[0].gpus) for p in problems)

    def padded(field: str, fill: float) -> np.ndarray:
        out = np.full((len(owner), width), fill)
        for row, i in enumerate(owner):
            values = getattr(problems[i][0], field)
            out[row, :len(values)] = values
        return out

    widths = Widths.of(padded("gpus", 1.0), padded("nodes", 1.0), padded("batch", 1.0))
    target = padded("log_t", 0.0)
    sw = np.sqrt(padded("weight", 0.0))
    x, cost = solve(np.array(starts), np.array(anchors)[owner_a], widths, target, sw)
    out = []
    for i in range(len(problems)):
        rows = np.flatnonzero(owner_a == i)
        best = rows[np.argmin(cost[rows])]
        xi = x[best]
        out.append(ThroughputParams.from_vector(xi) if np.all(np.isfinite(xi))
                   else ThroughputParams.from_vector(anchors[i]))
    return out


def solve(x0: np.ndarray, x_prior: np.ndarray, widths: Widths, target: np.ndarray, sw: np.ndarray,
          reg: float = math.sqrt(PARAM_WEIGHT)) -> tuple[np.ndarray, np.ndarray]:
    """Bounded Levenberg-Marquardt for a batch of problems (rows): minimise
    |sw * (predict_log(x) - target)|^2 + |reg * (x - x_prior)|^2 within `bounds()`. (x, cost)."""
    lo, hi = bounds()
    x = np.clip(x0, lo, hi)
    eye = np.eye(N_PARAMS)

    def residuals(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        sub = Widths(widths.gpus[idx], widths.nodes[idx], widths.local[idx])
        with np.errstate(over="ignore", invalid="ignore"):
            r = sw[idx] * (predict_log(x, sub) - target[idx])
        return np.concatenate([np.where(sw[idx] > 0, r, 0.0), reg * (x - x_prior[idx])], axis=1)

    def cost_of(r: np.ndarray) -> np.ndarray:
        c = 0.5 * np.einsum("bi,bi->b", r, r)
        return np.where(np.isfinite(c), c, np.inf)

    r = residuals(x, np.arange(len(x)))
    cost = cost_of(r)
    mu = np.full(len(x), 1e-2)
    active = np.ones(len(x), dtype=bool)
    for _ in range(MAX_ITERATIONS):
        idx = np.flatnonzero(active)
        if not len(idx):
            break
        sub = Widths(widths.gpus[idx], widths.nodes[idx], widths.local[idx])
        with np.errstate(over="ignore", invalid="ignore"):
            jac = sw[idx, :, None] * jacobian(x[idx], sub)
        jac = np.where(np.isfinite(jac), jac, 0.0)
        a = np.einsum("bmi,bmj->bij", jac, jac) + reg ** 2 * eye
        g = np.einsum("bmi,bm->bi", jac, r[idx, :-N_PARAMS]) + reg * r[idx, -N_PARAMS:]
        # Parameters at a bound that the gradient pushes further out stay there (an active set):
        # clipping their steps instead would stall the others.
        xi = x[idx]
        pinned = ((xi <= lo) & (g > 0)) | ((xi >= hi) & (g < 0))
        free = (~pinned).astype(float)
        a = a * free[:, :, None] * free[:, None, :] + (1.0 - free)[:, :, None] * eye
        g = g * free
        diag = np.einsum("bii->bi", a)
        damped = a + (mu[idx, None] * diag)[:, :, None] * eye
        step = -np.linalg.solve(damped, g[:, :, None])[:, :, 0]
        trial = np.clip(x[idx] + step, lo, hi)
        r_trial = residuals(trial, idx)
        c_trial = cost_of(r_trial)
        better = c_trial < cost[idx]
        gain = cost[idx] - c_trial
        moved = np.abs(trial - x[idx]).max(axis=1)
        take = idx[better]
        x[take], r[take], cost[take] = trial[better], r_trial[better], c_trial[better]
        mu[idx] = np.where(better, mu[idx] * 0.3, mu[idx] * 4.0)
        # done: an accepted step that changed little, or a damping so large no step is left
        done = (better & ((gain <= 1e-10 * np.maximum(cost[idx], 1e-12)) | (moved < 1e-7))) | (mu[idx] > 1e8)
        active[idx[done]] = False
    return x, cost

