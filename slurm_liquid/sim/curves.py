"""Drawn scaling curves: a job's step time as an explicit table over (GPUs, nodes).

The live replay benchmark (benchmarks/live/) gives every job a scaling curve of its own that is
NOT what the speed priors say (the Pollux traces): some jobs scale well, some stop scaling at 2
GPUs, some are slower across nodes. The same curve drives the stand-in trainer on the cluster
(`standin_trainer.py --curve`) and, through `CurveApp`, the simulator, so that both run the same
jobs. A curve is JSON:

    {"kind": "plateau2", "base_step_s": 0.8, "step_s": {"1x1": 0.8, "2x1": 0.4, "4x1": 0.42, "4x2": 0.44, ...}}

`step_s["GxN"]` is the seconds of one optimizer step on G GPUs spread over N nodes; the table
lists every (G, N) a 4-GPU-per-node cluster can give (N <= G <= 4 N). `kind` and `base_step_s`
only document how the table was drawn (`draw_curve`); the table alone is the truth.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from slurm_liquid.errors import UsageError
from slurm_liquid.sim.apps import BatchConfig

KINDS = ("linear", "plateau2", "internode")
GPUS_PER_NODE = 4
MAX_STEP_S = 3600.0


def shapes(max_gpus: int, gpus_per_node: int = GPUS_PER_NODE) -> list[tuple[int, int]]:
    """Every (GPUs, nodes) with nodes <= GPUs <= gpus_per_node x nodes, up to `max_gpus` GPUs."""
    return [(g, n) for g in range(1, max_gpus + 1) for n in range(1, g + 1) if g <= gpus_per_node * n]


def formula(kind: str, base: float, gpus: int, nodes: int, sync: float = 0.4) -> float:
    """The step time a drawn curve tabulates (the three kinds; `base` is the 1-GPU step).

    linear:    base x (0.97 / G + 0.03) x (1 + 0.05 (N - 1))   near-linear, 3% serial part
    plateau2:  base / min(G, 2) x (1 + 0.05 max(G - 2, 0)) x (1 + 0.05 (N - 1))   flat, then worse, past 2 GPUs
    internode: base / G + sync x base when N > 1   a gradient sync across nodes costs `sync` x base
    """
    if kind == "linear":
        return base * (0.97 / gpus + 0.03) * (1 + 0.05 * (nodes - 1))
    if kind == "plateau2":
        return base / min(gpus, 2) * (1 + 0.05 * max(gpus - 2, 0)) * (1 + 0.05 * (nodes - 1))
    if kind == "internode":
        return base / gpus + (sync * base if nodes > 1 else 0.0)
    raise UsageError(f"unknown curve kind {kind!r} (known: {', '.join(KINDS)})")


@dataclass(frozen=True)
class Curve:
    """A job's step seconds per (GPUs, nodes)."""

    kind: str
    base_step_s: float
    step_s: Mapping[tuple[int, int], float]

    @property
    def max_gpus(self) -> int:
        return max(g for g, _ in self.step_s)

    def step_time(self, gpus: int, nodes: int) -> float:
        """Seconds per step on `gpus` GPUs over `nodes` nodes; a shape the table lacks is refused."""
        try:
            return self.step_s[(int(gpus), int(nodes))]
        except KeyError:
            raise UsageError(f"the {self.kind} curve has no step time for {gpus} GPUs on {nodes} node(s) "
                             f"(it covers up to {self.max_gpus} GPUs)") from None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "base_step_s": self.base_step_s,
                "step_s": {f"{g}x{n}": round(s, 6) for (g, n), s in sorted(self.step_s.items())}}

    @classmethod
    def from_json(cls, obj: Any, where: str = "curve") -> Curve:
        if not isinstance(obj, dict) or not isinstance(obj.get("step_s"), dict) or not obj["step_s"]:
            raise UsageError(f"{where}: a curve is an object with a non-empty \"step_s\" table")
        table: dict[tuple[int, int], float] = {}
        for key, value in obj["step_s"].items():
            try:
                gpus, nodes = (int(x) for x in str(key).split("x"))
                seconds = float(value)
            except (ValueError, TypeError):
                raise UsageError(f"{where}: step_s[{key!r}]={value!r}: keys are \"GPUSxNODES\", values seconds") from None
            if not (1 <= nodes <= gpus) or not (0 < seconds <= MAX_STEP_S) or not math.isfinite(seconds):
                raise UsageError(f"{where}: step_s[{key!r}]={value!r} is out of range (1 <= nodes <= GPUs, "
                                 f"0 < seconds <= {MAX_STEP_S:g})")
            table[(gpus, nodes)] = seconds
        kind = str(obj.get("kind", "table"))
        try:
            base = float(obj.get("base_step_s", table.get((1, 1), 0.0)))
        except (TypeError, ValueError):
            raise UsageError(f"{where}: base_step_s={obj.get('base_step_s')!r} is not a number") from None
        return cls(kind, base, table)

    @classmethod
    def load(cls, text: str) -> Curve:
        """A curve from inline JSON (starts with "{") or from a JSON file's path."""
        where = "--curve"
        if not text.lstrip().startswith("{"):
            try:
                text, where = Path(text).read_text(), text
            except OSError as exc:
                raise UsageError(f"cannot read curve {text}: {exc.strerror or exc}") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not JSON ({exc})") from None
        return cls.from_json(obj, where)


def draw_curve(kind: str, rng: np.random.Generator, max_gpus: int = 16) -> Curve:
    """A curve of `kind` with a base step drawn in [0.3, 1.0] s (and, for internode, a sync cost
    drawn in [0.3, 0.6] x base)."""
    base = round(float(rng.uniform(0.3, 1.0)), 3)
    sync = float(rng.uniform(0.3, 0.6))
    return Curve(kind, base, {(g, n): formula(kind, base, g, n, sync) for g, n in shapes(max_gpus)})


class CurveApp:
    """A simulator application (the `AppModel` interface the engine and the oracle use) that trains
    by a drawn curve: one progress unit per optimizer step, `steps` steps in `epochs` equal epochs.

    The batch never changes the step time (the curve is per job, at its own batch); a job's
    largest width is `batch_size // min_local_bsz` in the engine, so `min_local_bsz` is set
    to make that the curve's `max_gpus` at the job's batch."""

    def __init__(self, name: str, curve: Curve, steps: int, batch_size: int, max_gpus: int | None = None,
                 epochs: int = 10) -> None:
        if steps <= 0 or batch_size <= 0 or epochs <= 0:
            raise UsageError(f"{name}: steps, batch size and epochs must be positive")
        self.name = name
        self.curve = curve
        self.init_bsz = self.max_bsz = batch_size
        widest = min(max_gpus or curve.max_gpus, curve.max_gpus, batch_size)
        self.min_local_bsz = max(1, batch_size // widest)
        self.max_local_bsz = batch_size
        self.max_epochs = epochs
        self.epoch_bounds = [steps * e / epochs for e in range(epochs + 1)]
        self.epoch_progress = np.array(self.epoch_bounds)
        self.target_progress = float(steps)

    def batch_config(self, target: int, replicas: int, force_accum: bool = False) -> BatchConfig:
        return BatchConfig(replicas, max(1, math.ceil(target / replicas)), 0)

    def goodput_config(self, placement: Sequence[int], epoch: int) -> BatchConfig:
        return self.batch_config(self.init_bsz, sum(placement))

    def step_time(self, placement: Sequence[int], atomic: int = 0) -> tuple[float, float]:
        """(step, sync) seconds on `placement` (GPUs per node); sync is 0: accumulation never applies."""
        counts = [int(c) for c in placement if c]
        return self.curve.step_time(sum(counts), len(counts)), 0.0

    def iteration_time(self, placement: Sequence[int], config: BatchConfig) -> float:
        return self.step_time(placement)[0]

    def gain(self, batch: int, epoch: int) -> float:
        return 1.0

    def iterations(self, batch: float, row: int) -> float:
        return self.epoch_bounds[min(row + 1, self.max_epochs)]

    def __repr__(self) -> str:
        return f"CurveApp({self.name!r}, {self.curve.kind})"
