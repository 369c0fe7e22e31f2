"""Where a job's speed comes from before it reports: the shipped prior table (priors.json).

In order: the Pollux trace of the job's model (by trace name or catalog name: resnet50 is the
imagenet trace), the reference trace of the model's catalog family scaled by parameter count
(gradient sync and compute both grow with it), else "linear": a step of one second on one GPU at
the job's batch, near-free gradient sync. The traces were measured on the artifact's hardware, so
only their shape is trusted once a job reports: the fit rescales the prior to the job's own times.
"""

from __future__ import annotations

from functools import lru_cache

import json
import math
import os
from typing import Any, Mapping

import numpy as np

from slurm_liquid.errors import LiquidError
from slurm_liquid.estimate.catalog import name_key
from slurm_liquid.speed.params import ThroughputParams

PRIORS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "priors.json")


class Prior:
    """The prior table; answers are cached per (model, batch)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        try:
            self._traces = {app: ThroughputParams.from_dict(t["params"]) for app, t in data["traces"].items()}
            self._meta = {app: dict(t) for app, t in data["traces"].items()}
            self._aliases = {name_key(k): v for k, v in data.get("aliases", {}).items()}
            self._aliases.update({name_key(app): app for app in self._traces})
            self._families = dict(data.get("families", {}))
            self._family_of = dict(data.get("family_of", {}))
            self._linear = ThroughputParams.from_dict(data["linear"])
            self._default_steps = float(data.get("default_steps", 1000.0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LiquidError(f"speed prior table: malformed ({type(exc).__name__}: {exc})") from None
        unknown = {a for a in (*self._aliases.values(), *self._families.values()) if a not in self._traces}
        if unknown:
            raise LiquidError(f"speed prior table: names traces it does not hold: {', '.join(sorted(unknown))}")
        self._cache: dict[tuple[str | None, int | None], tuple[ThroughputParams, str]] = {}
        self._apps: dict[str | None, str | None] = {}

    @classmethod
    def default(cls) -> "Prior":
        """The shipped table (slurm_liquid/speed/priors.json)."""
        return cls.load(PRIORS_FILE)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Prior":
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise LiquidError(f"speed prior table {os.fspath(path)}: cannot read it ({exc})") from None
        if not isinstance(data, Mapping):
            raise LiquidError(f"speed prior table {os.fspath(path)}: must be a JSON object")
        return cls(data)

    def trace_of(self, model: str | None) -> str | None:
        """The trace application measured for `model` (by either name), None if none was."""
        if model not in self._apps:
            if len(self._apps) > 4096:   # model names come from users: bound the cache
                self._apps.clear()
            app = self._aliases.get(name_key(model)) if model else None
            if app is None and model:
                entry = _find(model)
                app = self._aliases.get(name_key(entry.name)) if entry is not None else None
            self._apps[model] = app
        return self._apps[model]

    def params(self, model: str | None, batch: int | None) -> tuple[ThroughputParams, str]:
        """(params, label): label is "trace:<app>", "family:<family>" or "linear"."""
        key = (model, batch)
        if key not in self._cache:
            if len(self._cache) > 4096:   # model names come from users: bound the cache
                self._cache.clear()
            self._cache[key] = self._params(model, batch)
        return self._cache[key]

    def _params(self, model: str | None, batch: int | None) -> tuple[ThroughputParams, str]:
        app = self.trace_of(model)
        if app is not None:
            return self._traces[app], f"trace:{app}"
        entry = _find(model) if model else None
        family = self._family_of.get(entry.family) if entry is not None else None
        if family in self._families:
            ref = self._families[family]
            ref_params = self._meta[ref].get("model_params")
            scale = entry.params / ref_params if ref_params else 1.0
            return self._traces[ref].scaled(min(max(scale, 1e-3), 1e4)), f"family:{family}"
        b = float(batch) if batch and batch > 0 else 1.0
        return self._linear.scaled(1.0 / self._linear.step_time(1, 1, b)), "linear"

    def remaining(self, model: str | None, batch: int | None, epoch: int = 0) -> float:
        """A guess at the optimizer steps a job has left: the trace's steps to its last epoch at the
        job's batch (log-log interpolation), the part after `epoch`; else the table's default."""
        app = self.trace_of(model)
        if app is None or not batch or batch <= 0:
            return self._default_steps
        meta = self._meta[app]
        steps = float(np.exp(np.interp(math.log(batch), np.log(meta["batch"]), np.log(meta["steps"]))))
        epochs = max(int(meta.get("epochs", 1)), 1)
        left = max(1.0 - max(int(epoch), 0) / epochs, 1.0 / epochs)
        return max(steps * left, 1.0)


def _find(model: str):
    """The catalog entry for `model`, None when the catalog does not know it."""
    from slurm_liquid.estimate.catalog import load_catalog

    try:
        return load_catalog().find(model)
    except (LiquidError, OSError, ValueError):
        return None


@lru_cache(maxsize=1)
def shipped() -> Prior:
    """The shipped table, read once per process."""
    return Prior.default()


def trace_app(model: str | None) -> str | None:
    """The trace application measured for a model (by catalog or trace name), None if none was: the
    name policies' per-application features use (DL2's one-hot, Optimus's fixed-GPU rule)."""
    return shipped().trace_of(model) if model else None
