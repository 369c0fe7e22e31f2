"""The replica's world: the DL2 paper's 8 job types, the measured speed table, the two settings, the
artifact's trace generator, and the speed steps a job's (PS, workers) can take.

Facts read from the public artifact (no licence: its numbers and rules, not its code); the full
account is in `slurm_liquid.sim.paper` and docs/simulator.md.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from slurm_liquid.errors import UsageError

DATA = Path(__file__).resolve().parent / "data"
SLOT_S = 1200.0  # TS_DURATION
MODELS = ("resnet-50", "vgg-16", "resnext-110", "inception-bn", "seq2seq", "cnn-text-classification", "dssm", "wlm")
EPOCH_SIZE = (115, 115, 390, 120, 780, 193, 349, 165)  # samples per "epoch" (trace.py epoch_sizes)
EPOCH_FRACTION = (0.3, 0.96, 0.05, 0.54, 0.95, 0.46, 0.33, 0.23)  # of max_epochs (trace.py num_epochs)
WORKER_SLOTS = ((2, 4), (2, 4), (2, 4), (2, 4), (2, 4), (2, 0), (2, 0), (2, 4))  # (CPU, GPU) slots
PS_SLOTS = (2, 0)
NODE_SLOTS = 8  # per resource and node
# The artifact's Google_Trace arrival patterns (jobs per slot) for at most 3 and at most 10 per slot.
GOOGLE_ARRIVALS = {
    3: (2, 57, 3, 3, 3, 4, 3, 3, 2, 2, 2, 2, 3, 3, 3, 2, 3, 3, 3, 3, 3, 2, 2, 3, 4, 3, 2, 2, 2, 1, 2, 2, 2, 2, 2,
        2, 3, 3, 1, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 1, 2, 1, 2, 3, 3, 3, 3, 3, 2, 2, 2, 2, 3, 2, 1, 2, 1, 2, 2, 2,
        2, 2, 2, 3, 2),
    10: (6, 134, 8, 7, 8, 10, 9, 7, 6, 5, 6, 5, 7, 8, 9, 6, 8, 8, 8, 8, 7, 5, 5, 7, 9, 7, 5, 5, 5, 3, 5, 6, 4, 6,
         6, 6, 7, 7, 4, 5, 5, 3, 5, 5, 4, 6, 5, 6, 5, 3, 4, 4, 6, 7, 7, 7, 7, 7, 6, 6, 6, 6, 7, 6, 4, 6, 4, 5, 4,
         6, 5, 6, 5, 7, 6),
}


@dataclass(frozen=True)
class PaperSetting:
    name: str
    nodes: int
    jobs: int
    max_arrivals: int
    max_tasks: int  # MAX_NUM_WORKERS: the cap on a job's workers and on its PS
    max_epochs: int
    window: int  # DL2's scheduling window (SCHED_WINDOW_SIZE)


SETTINGS = {
    "dl2-paper-small": PaperSetting("dl2-paper-small", 48, 60, 3, 32, 80_000, 20),
    "dl2-paper-large": PaperSetting("dl2-paper-large", 500, 200, 10, 16, 30_000, 40),
}


@lru_cache(maxsize=None)
def _speed_table(path: Path = DATA / "speed.csv") -> dict[str, object]:
    from scipy.interpolate import Rbf

    points: dict[str, list[tuple[float, float, float]]] = {}
    try:
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                points.setdefault(row["model"], []).append(
                    (float(row["ps"]), float(row["workers"]), float(row["samples_per_s"])))
    except (OSError, KeyError, ValueError) as exc:
        raise UsageError(f"cannot read the DL2 speed table {path}: {exc}") from None
    missing = [m for m in MODELS if m not in points]
    if missing:
        raise UsageError(f"{path}: no speed points for {', '.join(missing)}")
    return {m: Rbf(*np.asarray(pts).T, function="linear") for m, pts in points.items()}


@lru_cache(maxsize=None)
def samples_per_s(model: int, ps: int, workers: int) -> float:
    """Interpolated throughput of `workers` workers and `ps` PS (0 without either; never negative:
    the linear RBF extrapolates beyond the measured 23 tasks and can dip below zero there)."""
    if ps <= 0 or workers <= 0:
        return 0.0
    return max(0.0, float(_speed_table()[MODELS[model]](ps, workers)))


def epochs_per_slot(model: int, ps: int, workers: int) -> float:
    """Epochs a job of type `model` makes in one slot on `ps` PS and `workers` workers."""
    return samples_per_s(model, ps, workers) * SLOT_S / EPOCH_SIZE[model]


@dataclass
class PaperJob:
    """One PS/worker job; `ps`, `workers` are what it holds in the current slot."""

    id: str
    index: int
    model: int
    arrival: int  # slot
    epochs: float
    ps: int = 0
    workers: int = 0
    progress: float = 0.0
    end: float | None = None  # slot time of completion (FINE_GRAIN_JCT)

    def epochs_per_slot(self, ps: int | None = None, workers: int | None = None) -> float:
        ps = self.ps if ps is None else ps
        workers = self.workers if workers is None else workers
        return epochs_per_slot(self.model, ps, workers)

    def remaining(self) -> float:
        return self.epochs - self.progress

    def share(self, nodes: int) -> float:
        """Dominant resource share of what it holds."""
        w, p = WORKER_SLOTS[self.model], PS_SLOTS
        return max((self.workers * w[r] + self.ps * p[r]) / (nodes * NODE_SLOTS) for r in range(2))


def paper_trace(setting: PaperSetting, seed: int = 0) -> list[PaperJob]:
    """The artifact's trace generator (Google_Trace arrivals, types uniform, fixed lengths per type)."""
    if seed < 0:
        raise UsageError(f"--seed must be non-negative, got {seed}")
    rng = np.random.default_rng(seed)
    pattern = GOOGLE_ARRIVALS[setting.max_arrivals]
    offset = int(rng.integers(5))
    jobs: list[PaperJob] = []
    ts = 0
    while len(jobs) < setting.jobs:
        for _ in range(min(setting.max_arrivals, pattern[(ts + offset) % len(pattern)])):
            if len(jobs) == setting.jobs:
                break
            t = int(rng.integers(len(MODELS)))
            jobs.append(PaperJob(f"{MODELS[t]}-{len(jobs)}", len(jobs), t, ts, float(int(EPOCH_FRACTION[t] * setting.max_epochs))))
        ts += 1
    return jobs


CPU_TASKS_PER_NODE = NODE_SLOTS // 2  # a worker or a PS holds 2 CPU slots
GPU_WORKERS_PER_NODE = NODE_SLOTS // 4  # a GPU worker holds 4 GPU slots


def uses_gpu(job: PaperJob) -> bool:
    """Whether the job's workers hold GPU slots (cnn-text-classification and dssm workers do not)."""
    return WORKER_SLOTS[job.model][1] > 0


def capacity(setting: PaperSetting) -> tuple[int, int]:
    """(tasks, GPU workers) the whole cluster holds."""
    return setting.nodes * CPU_TASKS_PER_NODE, setting.nodes * GPU_WORKERS_PER_NODE


@lru_cache(maxsize=None)
def next_step(model: int, cap: int, ps: int, workers: int) -> tuple[int, int, float] | None:
    """From (ps, workers), the (PS, workers) with at least as many of each (at most `cap`) whose speed
    gains the most epochs per slot per added task, and that speed; None if no addition is faster.
    Several tasks at once where a split only pays off together (resnet-50: 1 -> 3 PS). Steps from
    (1, 1) trace the upper concave hull of the speed over the monotone additions."""
    now = epochs_per_slot(model, ps, workers)
    best: tuple[float, int, int, float] | None = None
    for p in range(max(ps, 1), cap + 1):
        for w in range(max(workers, 1), cap + 1):
            added = p + w - ps - workers
            speed = epochs_per_slot(model, p, w)
            if added > 0 and speed > now and (best is None or (speed - now) / added > best[0]):
                best = ((speed - now) / added, p, w, speed)
    return None if best is None else best[1:]


def peak_speed(model: int, cap: int) -> float:
    """Epochs per slot of the fastest (PS, workers) with at most `cap` of each."""
    return max(epochs_per_slot(model, p, w) for p in range(1, cap + 1) for w in range(1, cap + 1))
