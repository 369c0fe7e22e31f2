"""Pollux's throughput model: seconds per optimizer step as a function of GPUs, nodes and batch.

The model is AdaptDL/Pollux's `PerfParams` (Qiao et al., OSDI 2021, section 3.2; adaptdl/goodput.py):

    T_compute = alpha_c + beta_c * local_batch            (forward and backward of one replica)
    T_network = alpha_r + beta_r * max(gpus - 2, 0)       (all-reduce within one node)
              = alpha_n + beta_n * max(gpus - 2, 0)       (all-reduce across nodes)
              = 0                                         (one GPU: nothing to synchronise)
    T_step    = (T_compute ** gamma + T_network ** gamma) ** (1 / gamma)

gamma in [1, 10] is how much the gradient sync overlaps the backward pass (1: not at all, the times
add up; 10: nearly fully, the step takes the longer of the two). Gradient accumulation is not
modelled: a job's own measurements at its own batch absorb it.

Fitting works in a vector space where every parameter is a logarithm (so bounds keep them positive
and a factor of two is the same distance everywhere), and the network terms are ratios: the
retrogression to the constant (both grow with the gradient's size and shrink with the bandwidth),
across nodes to within a node. A job whose sync the measurements show to be cheaper or dearer than
the prior's thus moves all its network terms together, in the prior's proportions. `to_vector`/`from_vector` convert; `predict_log` and `jacobian` are
the vectorised forms the fit uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GAMMA_MIN, GAMMA_MAX = 1.0, 10.0
# Bounds of the log time parameters (seconds; per sample for beta_c) and of the log inter/intra ratios.
LOG_TIME_BOUNDS = (math.log(1e-9), math.log(1e5))
LOG_RATIO_BOUNDS = (0.0, math.log(1e4))   # across nodes is never cheaper than within one (Pollux's prior)
LOG_RETRO_BOUNDS = (math.log(1e-9), math.log(1e3))   # retrogression per replica / constant
N_PARAMS = 7


@dataclass(frozen=True, slots=True)
class ThroughputParams:
    """One job's (or one application's) throughput model; every time in seconds."""

    alpha_c: float   # compute: constant per step
    beta_c: float    # compute: per local sample
    alpha_r: float   # all-reduce within one node: constant
    beta_r: float    # ... and per replica past two (retrogression)
    alpha_n: float   # all-reduce across nodes: constant
    beta_n: float    # ... and per replica past two
    gamma: float     # overlap of compute and sync, in [1, 10]

    def step_time(self, gpus: int, nodes: int, batch: int) -> float:
        """Seconds per optimizer step at global batch `batch` on `gpus` GPUs over `nodes` nodes."""
        gpus, nodes = max(int(gpus), 1), max(int(nodes), 1)
        local = max(float(batch) / gpus, 1.0)   # a GPU cannot work on less than one sample
        compute = self.alpha_c + self.beta_c * local
        if gpus == 1:
            return compute
        extra = max(gpus - 2, 0)
        network = (self.alpha_n + self.beta_n * extra) if nodes > 1 else (self.alpha_r + self.beta_r * extra)
        g = self.gamma
        big = max(compute, network)   # factor out the larger term: no overflow at gamma 10
        return big * ((compute / big) ** g + (network / big) ** g) ** (1.0 / g)

    def scaled(self, factor: float) -> "ThroughputParams":
        """The same shape, every time multiplied by `factor` (step times scale exactly by it)."""
        f = float(factor)
        return ThroughputParams(self.alpha_c * f, self.beta_c * f, self.alpha_r * f, self.beta_r * f,
                                self.alpha_n * f, self.beta_n * f, self.gamma)

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: dict) -> "ThroughputParams":
        values = [float(data[name]) for name in cls.__slots__]
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError(f"throughput parameters must be finite and positive: {data!r}")
        return cls(*values)

    def to_vector(self) -> np.ndarray:
        """[log alpha_c, log beta_c, log alpha_r, log beta_r/alpha_r, log alpha_n/alpha_r, log beta_n/beta_r,
        gamma], clipped to the fit's bounds."""
        values = [math.log(self.alpha_c), math.log(self.beta_c), math.log(self.alpha_r),
                  math.log(self.beta_r / self.alpha_r), math.log(self.alpha_n / self.alpha_r),
                  math.log(self.beta_n / self.beta_r), self.gamma]
        lo, hi = bounds()
        return np.clip(np.array(values), lo, hi)

    @classmethod
    def from_vector(cls, x: np.ndarray) -> "ThroughputParams":
        a_c, b_c, a_r = (math.exp(float(v)) for v in x[:3])
        b_r = a_r * math.exp(float(x[3]))
        return cls(a_c, b_c, a_r, b_r, a_r * math.exp(float(x[4])), b_r * math.exp(float(x[5])), float(x[6]))


def bounds() -> tuple[np.ndarray, np.ndarray]:
    lo = [LOG_TIME_BOUNDS[0]] * 3 + [LOG_RETRO_BOUNDS[0]] + [LOG_RATIO_BOUNDS[0]] * 2 + [GAMMA_MIN]
    hi = [LOG_TIME_BOUNDS[1]] * 3 + [LOG_RETRO_BOUNDS[1]] + [LOG_RATIO_BOUNDS[1]] * 2 + [GAMMA_MAX]
    return np.array(lo), np.array(hi)


@dataclass(frozen=True)
class Widths:
    """Points (gpus, nodes, local batch) at which the model is evaluated, as arrays."""

    gpus: np.ndarray
    nodes: np.ndarray
    local: np.ndarray

    @classmethod
    def of(cls, gpus, nodes, batch) -> "Widths":
        g = np.maximum(np.asarray(gpus, dtype=float), 1.0)
        return cls(g, np.maximum(np.asarray(nodes, dtype=float), 1.0),
                   np.maximum(np.asarray(batch, dtype=float) / g, 1.0))

    def __len__(self) -> int:
        return len(self.gpus)


def _col(x: np.ndarray, k: int):
    """Parameter k of `x`: a scalar for one vector (7,), a column (B, 1) for a batch (B, 7)."""
    return x[..., k:k + 1] if x.ndim == 2 else x[k]


def _terms(x: np.ndarray, w: Widths):
    a_c, b_c, a_r = (np.exp(_col(x, k)) for k in range(3))
    b_r = a_r * np.exp(_col(x, 3))
    extra = np.maximum(w.gpus - 2.0, 0.0)
    multi = w.nodes > 1
    alpha = np.where(multi, a_r * np.exp(_col(x, 4)), a_r)
    beta = np.where(multi, b_r * np.exp(_col(x, 5)), b_r)
    single = w.gpus <= 1
    compute = a_c + b_c * w.local
    network = np.where(single, 0.0, alpha + beta * extra)
    return a_c, b_c, compute, network, alpha, beta * extra, multi, single


def predict_log(x: np.ndarray, w: Widths) -> np.ndarray:
    """log step time at each point of `w` for parameters `x`: one vector (7,) and points (M,), or a
    batch of vectors (B, 7) and points (B, M)."""
    _, _, compute, network, *_ = _terms(x, w)
    g = _col(x, 6)
    lc = np.log(compute)
    with np.errstate(divide="ignore"):
        ln = np.log(network)   # -inf on one GPU: logaddexp then gives log(compute) exactly
    return np.logaddexp(g * lc, g * ln) / g


def jacobian(x: np.ndarray, w: Widths) -> np.ndarray:
    """d log T / d x at each point of `w`: shape (M, 7), or (B, M, 7) for a batch."""
    a_c, b_c, compute, network, alpha, retro, multi, single = _terms(x, w)
    g = _col(x, 6)
    lc = np.log(compute)
    ln = np.log(np.where(single, 1.0, network))   # unused where single (its share is 0)
    log_s = np.logaddexp(g * lc, np.where(single, -np.inf, g * ln))
    # dlogT/dlogTc = Tc^g / S: the compute's share of the step; likewise for the network.
    share_c = np.exp(g * lc - log_s)
    share_n = np.where(single, 0.0, np.exp(g * ln - log_s))
    net = np.where(single, 1.0, network)
    d_br = share_n * retro / net
    d_ar = share_n    # alpha_r scales the whole network term (every other network term is a ratio to it)
    # d/dg [(1/g) log S] = -log S / g^2 + (share_c log Tc + share_n log Tn) / g
    d_g = -log_s / g ** 2 + (share_c * lc + share_n * ln) / g
    return np.stack([share_c * a_c / compute, share_c * b_c * w.local / compute, d_ar, d_br,
                     np.where(multi, share_n * alpha / net, 0.0), np.where(multi, d_br, 0.0), d_g], axis=-1)
