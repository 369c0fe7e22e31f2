"""Learned correction: log(measured / prior) from history, reported as an upper quantile.

Training uses scikit-learn (imported only by `fit`); the fitted trees are exported to a plain JSON
file (arrays of split features, thresholds, children and leaf values) with training metadata.
Loading it executes no code and evaluating it needs no numpy: a few hundred comparisons in pure
Python, so the submit path stays fast. Two methods, compared by the benchmark:

- `rf`: random forest of the mean log-ratio;
- `gbr`: gradient boosting with the quantile (pinball) loss at `quantile`.

Either is then calibrated by a conformal margin: the `quantile` (with the finite-sample
correction) of cross-validated residuals, so that about (1 - quantile) of jobs are
under-estimated. When the rows name their model (`groups`), the folds hold out whole models:
rows of one model are alike, so residuals of rows whose model was seen in training (out-of-bag
rows, a random split) are far smaller than a new model's, and a margin learnt from them leaves
most jobs of a model the history lacks under-estimated. Grouped folds make the margin cover
the case that hurts (an out-of-memory job), at the price of a wider margin for known models.

The file may also carry a `sharing` table (model name -> jobs, median GPU utilisation %, median
peak MiB per GPU) measured by the node agents; `decide` gives a busy model a whole GPU instead
of a share. It is optional: files without it load as before, and older readers ignore it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.catalog import FAMILIES, ModelEntry
from slurm_liquid.estimate.decide import ModelUsage
from slurm_liquid.estimate.prior import OPTIMIZER_STATES, Breakdown
from slurm_liquid.jobspec import JobSpec

FORMAT = "slurm-liquid-correction"
VERSION = 1
FEATURES = ("log10_params", "log10_micro_batch", "family", "half_precision", "optimizer_states",
            "checkpointing", "activation_share", "log10_prior_tensors_mib", "log10_input_size")
# a correction outside this band means the model learnt something absurd: clamp, never trust blindly
LOG_RATIO_BOUNDS = (math.log(0.5), math.log(4.0))


def features(entry: ModelEntry, spec: JobSpec, prior: Breakdown) -> list[float]:
    size = (spec.seq_len or entry.seq_len) if entry.is_transformer or entry.family == "rnn" \
        else (spec.image_size or entry.image_size) ** 2
    return [
        math.log10(entry.params),
        math.log10(prior.micro_batch),
        float(FAMILIES.index(entry.family)),
        0.0 if (spec.precision or "fp32") == "fp32" else 1.0,
        float(OPTIMIZER_STATES[spec.optimizer or "adamw"]),
        1.0 if spec.checkpointing else 0.0,
        prior.activations / max(prior.tensors, 1.0),
        math.log10(max(prior.tensors, 1.0) / 2 ** 20),
        math.log10(max(size, 1)),
    ]


@dataclass(frozen=True)
class Tree:
    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]
    value: tuple[float, ...]

    def predict(self, x: Sequence[float]) -> float:
        node = 0
        while self.left[node] != -1:
            node = self.left[node] if x[self.feature[node]] <= self.threshold[node] else self.right[node]
        return self.value[node]


@dataclass(frozen=True)
class Correction:
    """log-ratio = base + scale * sum(tree(x)) + margin, clamped."""

    base: float
    scale: float
    margin: float
    trees: tuple[Tree, ...]
    meta: dict[str, Any]
    sharing: Mapping[str, ModelUsage] = field(default_factory=dict)

    def log_ratio(self, x: Sequence[float]) -> float:
        raw = self.base + self.scale * sum(t.predict(x) for t in self.trees) + self.margin
        return min(max(raw, LOG_RATIO_BOUNDS[0]), LOG_RATIO_BOUNDS[1])

    def factor(self, entry: ModelEntry, spec: JobSpec, prior: Breakdown) -> float:
        return math.exp(self.log_ratio(features(entry, spec, prior)))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "features": list(FEATURES), "base": self.base,
                "scale": self.scale, "margin": self.margin, "meta": self.meta,
                "trees": [{"feature": t.feature, "threshold": t.threshold, "left": t.left,
                           "right": t.right, "value": t.value} for t in self.trees],
                **({"sharing": {name: {"jobs": u.jobs, "util": u.util, "peak_mib": u.peak_mib}
                                for name, u in sorted(self.sharing.items())}} if self.sharing else {})}

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")))
        os.replace(tmp, path)  # readers never see half a file


def load(path: str | Path) -> Correction:
    """Read a fitted correction; anything malformed is a UsageError naming the file and field."""
    from slurm_liquid.files import read_json

    where = f"correction file {path}"
    doc = read_json(path, "correction")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UsageError(f"{where}: format is not {FORMAT!r}")
    features_listed = doc.get("features", [])
    if doc.get("version") != VERSION or not isinstance(features_listed, list) or features_listed != list(FEATURES):
        raise UsageError(f"{where}: version/features differ from this slurm-liquid; retrain it "
                         "with `slurm-liquid estimate train`")
    try:
        sharing = _sharing(doc.get("sharing", {}))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: malformed sharing data: {exc}") from None
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise UsageError(f"{where}: meta must be an object")
    try:
        if not isinstance(doc["trees"], list):
            raise TypeError("trees must be a list")
        trees = tuple(_tree(t, len(FEATURES)) for t in doc["trees"])
        return Correction(base=_finite(doc["base"], "base"), scale=_finite(doc["scale"], "scale"),
                          margin=_finite(doc["margin"], "margin"), trees=trees, meta=dict(meta), sharing=sharing)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise UsageError(f"{where}: malformed tree data: {exc}") from None


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e30 < value < 1e30:  # also NaN
        raise ValueError(f"{what} must be a finite number, not {str(value)[:40]!r}")
    return float(value)


def _number(value: Any, what: str, low: float, high: float = math.inf) -> float:
    # bool is an int in Python; `true` is no count of jobs
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e300 < value < 1e300 \
            or not low <= value <= high:  # the first range also refuses NaN, infinities and 400-digit integers
        raise ValueError(f"{what} must be a number in {low:g}..{high:g}, not {value!r}")
    return float(value)


def _sharing(data: Any) -> dict[str, ModelUsage]:
    if not isinstance(data, dict):
        raise TypeError("sharing must be an object of model name -> {jobs, util, peak_mib}")
    table = {}
    for name, row in data.items():
        if not isinstance(row, dict) or not {"jobs", "util", "peak_mib"} <= row.keys():
            raise ValueError(f"{name}: must be an object with jobs, util and peak_mib")
        jobs = _number(row["jobs"], f"{name}: jobs", 1)
        if jobs != int(jobs):
            raise ValueError(f"{name}: jobs must be a whole number, not {row['jobs']!r}")
        table[str(name)] = ModelUsage(int(jobs), _number(row["util"], f"{name}: util", 0, 100),
                                      _number(row["peak_mib"], f"{name}: peak_mib", 0))
    return table


def _tree(data: Any, n_features: int) -> Tree:
    if not isinstance(data, dict):
        raise TypeError("each tree must be an object")
    arrays = {}
    for key in ("feature", "threshold", "left", "right", "value"):
        if not isinstance(data[key], list):
            raise TypeError(f"{key} must be a list")
        arrays[key] = tuple(data[key])
    for key in ("feature", "left", "right"):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in arrays[key]):
            raise ValueError(f"{key} must hold whole numbers")
    tree = Tree(arrays["feature"], tuple(_finite(v, "threshold") for v in arrays["threshold"]),
                arrays["left"], arrays["right"], tuple(_finite(v, "value") for v in arrays["value"]))
    n = len(tree.value)
    if not n or any(len(getattr(tree, k)) != n for k in ("feature", "threshold", "left", "right")):
        raise ValueError("arrays of unequal length")
    for i in range(n):
        if tree.left[i] != -1:
            # children come after their parent, so a walk always ends
            if not (i < tree.left[i] < n and i < tree.right[i] < n and 0 <= tree.feature[i] < n_features):
                raise ValueError(f"node {i} points outside the tree")
    return tree


def _export(estimator: Any, value_scale: float = 1.0) -> Tree:
    t = estimator.tree_
    return Tree(tuple(int(v) for v in t.feature), tuple(float(v) for v in t.threshold),
                tuple(int(v) for v in t.children_left), tuple(int(v) for v in t.children_right),
                tuple(float(v) * value_scale for v in t.value[:, 0, 0]))


CALIBRATION_FOLDS = 5


def _regressor(method: str, quantile: float, seed: int) -> Any:
    if method == "gbr":
        from sklearn.ensemble import GradientBoostingRegressor

        return GradientBoostingRegressor(loss="quantile", alpha=quantile, n_estimators=150,
                                         max_depth=3, learning_rate=0.05, subsample=0.8,
                                         min_samples_leaf=3, random_state=seed)
    if method == "rf":
        from sklearn.ensemble import RandomForestRegressor

        return RandomForestRegressor(n_estimators=100, min_samples_leaf=2, max_features=0.6,
                                     random_state=seed)
    raise UsageError(f"method: {method!r} is not rf or gbr")


def calibration_residuals(x: Any, y: Any, method: str, quantile: float, seed: int = 0,
                          groups: Sequence[str] | None = None) -> tuple[Any, str]:
    """Residuals y - prediction of each row from a model fitted without its fold, and how the
    folds were drawn: whole groups (models) when there are at least 3, else random rows."""
    import numpy as np
    from sklearn.model_selection import GroupKFold, KFold

    n_groups = len(set(groups)) if groups is not None else 0
    if n_groups >= 3:
        folds = GroupKFold(n_splits=min(CALIBRATION_FOLDS, n_groups)).split(x, y, groups)
        how = f"grouped by model ({min(CALIBRATION_FOLDS, n_groups)} folds of {n_groups} models)"
    else:
        k = min(CALIBRATION_FOLDS, len(y))
        folds = KFold(n_splits=k, shuffle=True, random_state=seed).split(x)
        how = f"random rows ({k} folds)"
    residuals = np.empty(len(y))
    for train, held in folds:
        residuals[held] = y[held] - _regressor(method, quantile, seed).fit(x[train], y[train]).predict(x[held])
    return residuals, how


def conformal_margin(residuals: Any, quantile: float) -> float:
    """The ceil((n + 1) q)-th smallest residual (split-conformal's finite-sample correction);
    the largest when there are too few rows for that rank."""
    ordered = sorted(float(r) for r in residuals)
    rank = min(len(ordered), math.ceil((len(ordered) + 1) * quantile))
    return ordered[rank - 1]


def fit(x: Sequence[Sequence[float]], y: Sequence[float], method: str = "gbr", quantile: float = 0.9,
        seed: int = 0, meta: dict[str, Any] | None = None,
        groups: Sequence[str] | None = None) -> Correction:
    """Fit on feature rows `x` and log-ratios `y`; `groups` (a model name per row) makes the
    calibration hold out whole models."""
    import numpy as np

    if len(y) < 5:
        raise UsageError(f"history: {len(y)} usable rows; need at least 5 to learn a correction")
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    model = _regressor(method, quantile, seed).fit(xa, ya)
    residuals, how = calibration_residuals(xa, ya, method, quantile, seed, groups)
    margin = conformal_margin(residuals, quantile)
    info = {"method": method, "quantile": quantile, "rows": len(ya),
            "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "calibration": how, "margin": round(margin, 4), **(meta or {})}
    if method == "gbr":
        base = float(model.init_.predict(xa[:1])[0]) if hasattr(model.init_, "predict") \
            else float(np.quantile(ya, quantile))
        trees = tuple(_export(e) for e in model.estimators_[:, 0])
        return Correction(base, float(model.learning_rate), margin, trees, info)
    trees = tuple(_export(e) for e in model.estimators_)
    return Correction(0.0, 1.0 / len(trees), margin, trees, info)
