"""Measured application models from the Pollux artifact traces (SIMULATOR.md section 3).

One `AppModel` per application holds its step-time table, its scalability points and
its validation curves, and answers the three questions the simulator asks: how long
an optimizer step takes on a placement, how much statistical progress one step makes
at a batch size, and where the epoch boundaries lie. Lookups are memoized because the
same (placement, batch) pairs recur every scheduling interval.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from slurm_liquid.errors import LiquidError

DATA_DIR = Path(__file__).resolve().parent / "data" / "pollux"
TRACE_DIR = DATA_DIR / "traces"
EPS = 1e-8  # the artifact's tolerance on ceil/floor


def ceil_tol(x: float) -> int:
    return math.ceil(x - EPS)


def floor_tol(x: float) -> int:
    return math.floor(x + EPS)


def canonical(placement: Sequence[int]) -> tuple[int, ...]:
    """Drop zeros and rotate to the lexicographically smallest cyclic rotation."""
    p = tuple(int(x) for x in placement if x)
    if not p:
        return p
    return min(p[i:] + p[:i] for i in range(len(p)))


def _read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], np.array(rows[1:], dtype=float)


@dataclass(frozen=True)
class BatchConfig:
    """A batch split: `atomic` per GPU per micro-batch, `accum` extra accumulation steps."""

    replicas: int
    atomic: int
    accum: int

    @property
    def batch(self) -> int:
        return self.replicas * self.atomic * (self.accum + 1)


class AppModel:
    """One application's measured behaviour (step time, gradient statistics, epochs)."""

    # The artifact hard-codes yolov3's largest local batch to 8 although its traces reach 16.
    MAX_LOCAL_OVERRIDE = {"yolov3": 8}

    def __init__(self, name: str, trace_dir: Path = TRACE_DIR) -> None:
        folder = trace_dir / name
        if not folder.is_dir():
            raise LiquidError(f"no traces for application {name!r} in {trace_dir}")
        self.name = name
        self._load_placements(folder / "placements.csv")
        self._load_scalability(folder / "scalability.csv")
        self._load_validation(folder)
        self._interp = None  # the Delaunay fallback is built on first use (it costs ~50 ms)

    # -- loading ---------------------------------------------------------------------
    def _load_placements(self, path: Path) -> None:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        self._table: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        grouped: dict[tuple[int, ...], list[tuple[float, float, float]]] = {}
        for row in rows:
            key = tuple(int(c) for c in row["placement"])
            grouped.setdefault(key, []).append(
                (float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"])))
        for key, points in grouped.items():
            arr = np.array(sorted(points))
            self._table[key] = (arr[:, 0], arr[:, 1], arr[:, 2])
        local = [float(r["local_bsz"]) for r in rows]
        self.min_local_bsz = int(min(local))
        self.max_local_bsz = self.MAX_LOCAL_OVERRIDE.get(self.name, int(max(local)))
        self._placement_rows = rows

    def _load_scalability(self, path: Path) -> None:
        _, self._scal = _read_csv(path)

    def _load_validation(self, folder: Path) -> None:
        files = sorted(folder.glob("validation-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
        bsz, progress, iteration, gsqr, gvar = [], [], [], [], []
        for f in files:
            header, data = _read_csv(f)
            col = {h: i for i, h in enumerate(header)}
            bsz.append(int(f.stem.split("-")[1]))
            progress.append(data[:, col["progress"]])
            iteration.append(data[:, col["iteration"]])
            gsqr.append(data[:, col["grad_sqr"]])
            gvar.append(data[:, col["grad_var"]])
        self.valid_bsz = np.array(bsz, dtype=float)
        self.init_bsz = bsz[0]
        self.max_bsz = bsz[-1]
        self.max_epochs = len(progress[0])
        # Arrays shaped (epochs, batch sizes), so a row is one epoch across all files.
        self._iteration = np.stack(iteration, axis=1)
        self._grad_sqr = np.stack(gsqr, axis=1)
        self._grad_var = np.stack(gvar, axis=1)
        # P(e): the epoch boundaries, the least progress any file reports at that row.
        self.epoch_progress = np.concatenate([[0.0], np.stack(progress, axis=1).min(axis=1)])
        self.target_progress = float(self.epoch_progress[-1])
        self.epoch_bounds = [float(x) for x in self.epoch_progress]  # plain floats: faster in the hot loop

    # -- batch configuration (section 3.4) -------------------------------------------
    def batch_config(self, target: int, replicas: int, force_accum: bool = False) -> BatchConfig:
        """Split a target total batch over `replicas` GPUs the way the artifact does."""
        return self._capped(replicas, *self._split(target, replicas, force_accum))

    def _split(self, target: float, replicas: int, force_accum: bool = False) -> tuple[int, int]:
        """(local batch per micro-step, accumulation steps) for `target`, before the final cap."""
        local = ceil_tol(target / replicas)
        accum = ceil_tol(local / self.max_local_bsz) - 1
        if force_accum or (replicas == 1 and local > self.init_bsz):
            accum = max(accum, 1)
        return ceil_tol(local / (accum + 1)), accum

    def _capped(self, replicas: int, atomic: int, accum: int) -> BatchConfig:
        return BatchConfig(replicas, min(atomic, floor_tol(self.max_bsz / (replicas * (accum + 1)))), accum)

    def goodput_config(self, placement: Sequence[int], epoch: int) -> BatchConfig:
        """The batch split with the most progress per second on `placement` in `epoch`: what a job
        that scales its own batch (Pollux's agent, AdaptDL) picks, here with exact step times and
        gradient statistics. Candidates and splits are the artifact's (SIMULATOR.md 3.4)."""
        return _goodput_config_cached(self, canonical(placement), int(epoch))

    def _goodput_config(self, placement: tuple[int, ...], epoch: int) -> BatchConfig:
        replicas = sum(placement)
        low = max(self.init_bsz, self.min_local_bsz * replicas)
        best, best_rate = self.batch_config(low, replicas), -1.0
        if low > self.max_bsz:
            return best
        for total in np.geomspace(low, self.max_bsz, 50):
            atomic, accum = self._split(total, replicas)
            if not self.min_local_bsz <= atomic <= self.max_local_bsz:
                continue
            config = self._capped(replicas, atomic, accum)
            rate = self.gain(config.batch, epoch) / self.iteration_time(placement, config)
            if rate > best_rate:
                best, best_rate = config, rate
        return best

    # -- step time (section 3.3) -----------------------------------------------------
    def step_time(self, placement: Sequence[int], atomic: int) -> tuple[float, float]:
        """(step_time, sync_time) in seconds of one micro-batch step on `placement`."""
        return _step_time_cached(self, canonical(placement), int(atomic))

    def iteration_time(self, placement: Sequence[int], config: BatchConfig) -> float:
        """Seconds per optimizer step of `config` on `placement`."""
        st, sy = self.step_time(placement, config.atomic)
        # Accumulation steps repeat only the compute part of a step, not the gradient sync.
        return st + config.accum * (st - sy)

    def _lookup(self, key: tuple[int, ...], atomic: int) -> tuple[float, float]:
        if key in self._table:
            bsz, step, sync = self._table[key]
            if not bsz[0] - EPS <= atomic <= bsz[-1] + EPS:
                raise LiquidError(f"{self.name}: local batch {atomic} outside the measured range "
                                  f"[{bsz[0]:g}, {bsz[-1]:g}] of placement {''.join(map(str, key))}")
            return float(np.interp(atomic, bsz, step)), float(np.interp(atomic, bsz, sync))
        interp = self._fallback()
        st, sy = np.asarray(interp(min(len(key), 16), sum(key), atomic), dtype=float).reshape(-1)
        if math.isnan(st) or math.isnan(sy):
            raise LiquidError(f"{self.name}: no step-time estimate for {len(key)} nodes, "
                              f"{sum(key)} GPUs, local batch {atomic} (outside the measured hull)")
        return float(st), float(sy)

    def _fallback(self):
        if self._interp is None:
            # The point order matters: the grid is degenerate, so Qhull's triangulation (and the
            # interpolated values, by up to 55%) depends on it. This is the artifact's order.
            from scipy.interpolate import LinearNDInterpolator

            groups: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
            for row in self._placement_rows:
                key = (len(row["placement"]), sum(int(c) for c in row["placement"]), float(row["local_bsz"]))
                groups.setdefault(key, []).append((float(row["step_time"]), float(row["sync_time"])))
            pts = [(*k, *np.mean(v, axis=0)) for k, v in sorted(groups.items())]
            table = np.concatenate([np.array(pts), self._scal], axis=0)
            self._interp = LinearNDInterpolator(table[:, :3], table[:, 3:])
        return self._interp

    # -- statistical efficiency (section 3.5) ----------------------------------------
    def gain(self, batch: int, epoch: int) -> float:
        """Progress units (iterations at the initial batch) made by one step at `batch`."""
        return _gain_cached(self, int(batch), int(epoch))

    def _gain(self, batch: int, epoch: int) -> float:
        sqr = float(np.interp(batch, self.valid_bsz, self._grad_sqr[epoch]))
        var = float(np.interp(batch, self.valid_bsz, self._grad_var[epoch]))
        scale = batch / self.init_bsz
        return (var + sqr) / (var / scale + sqr)

    def iterations(self, batch: float, row: int) -> float:
        """Cumulative optimizer steps at `batch` by the end of validation row `row`."""
        return float(np.interp(batch, self.valid_bsz, self._iteration[row]))

    def __repr__(self) -> str:
        return f"AppModel({self.name!r})"


@lru_cache(maxsize=None)
def _step_time_cached(app: AppModel, key: tuple[int, ...], atomic: int) -> tuple[float, float]:
    return app._lookup(key, atomic)


@lru_cache(maxsize=None)
def _goodput_config_cached(app: AppModel, placement: tuple[int, ...], epoch: int) -> BatchConfig:
    return app._goodput_config(placement, epoch)


@lru_cache(maxsize=None)
def _gain_cached(app: AppModel, batch: int, epoch: int) -> float:
    return app._gain(batch, epoch)


APPLICATIONS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


# Applications registered by name (e.g. a drawn curve, sim/curves.py), consulted before the traces.
_REGISTERED: dict[str, AppModel] = {}


def register_app(name: str, model) -> None:
    """Make `load_app(name)` answer `model` (anything with AppModel's interface) in this process."""
    if name in APPLICATIONS:
        raise LiquidError(f"{name!r} is a measured application; register under another name")
    _REGISTERED[name] = model


def load_app(name: str) -> AppModel:
    """A registered application, else the shared model of one bundled one (loaded once per process)."""
    registered = _REGISTERED.get(name)
    return registered if registered is not None else _load_trace_app(name)


@lru_cache(maxsize=None)
def _load_trace_app(name: str) -> AppModel:
    return AppModel(name)
