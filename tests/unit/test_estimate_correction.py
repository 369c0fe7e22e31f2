"""Learned correction: fit, export to JSON, load safely, evaluate without numpy."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate import correction as corr


def _data(n=120, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n, len(corr.FEATURES)))
    y = 0.4 * x[:, 0] - 0.2 * x[:, 3] + rng.normal(0, 0.05, n)
    return x, y


@pytest.mark.parametrize("method", ["rf", "gbr"])
def test_fit_save_load_round_trip(tmp_path, method):
    x, y = _data()
    fitted = corr.fit(x.tolist(), y.tolist(), method=method, quantile=0.9)
    path = tmp_path / "c.json"
    fitted.save(path)
    loaded = corr.load(path)
    for row in x[:20]:
        assert loaded.log_ratio(row) == pytest.approx(fitted.log_ratio(row))
    # an upper quantile: about 90% of training targets are at or below it
    covered = np.mean([loaded.log_ratio(r) >= t for r, t in zip(x, y)])
    assert covered >= 0.8
    assert json.loads(path.read_text())["meta"]["method"] == method


def test_rf_export_matches_sklearn_mean():
    from sklearn.ensemble import RandomForestRegressor

    x, y = _data()
    fitted = corr.fit(x, y, method="rf")
    sk = RandomForestRegressor(n_estimators=100, min_samples_leaf=2, max_features=0.6,
                               random_state=0).fit(x, y)
    for row in x[:10]:
        assert fitted.log_ratio(row) - fitted.margin == pytest.approx(
            min(max(sk.predict([row])[0], corr.LOG_RATIO_BOUNDS[0]), corr.LOG_RATIO_BOUNDS[1]))


def test_conformal_margin_uses_the_finite_sample_level():
    residuals = np.arange(1.0, 11.0)           # 10 residuals: ceil(11 * 0.9) / 10 = 1.0 -> the max
    assert corr.conformal_margin(residuals, 0.9) == 10.0
    assert corr.conformal_margin(residuals, 0.5) == 6.0   # ceil(5.5) / 10 = 0.6 -> 6th value


def _grouped(n_groups, rows_per_group, seed):
    """Each model has its own offset that no feature explains, and its rows share a parameter
    count (feature 0): a forest can learn a seen model's offset, not a new one's."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n_groups * rows_per_group, len(corr.FEATURES)))
    x[:, 0] = np.repeat(rng.uniform(6, 10, n_groups), rows_per_group)
    x[:, 2:] = np.round(x[:, 2:])               # flags (precision, checkpointing, ...)
    offsets = np.repeat(rng.normal(0, 0.15, n_groups), rows_per_group)
    y = 0.3 * x[:, 1] + offsets + rng.normal(0, 0.02, len(x))
    return x, y, [f"model{i // rows_per_group}" for i in range(len(x))]


@pytest.mark.parametrize("method", ["rf", "gbr"])
def test_calibration_by_whole_models_covers_models_never_seen(method):
    x, y, groups = _grouped(30, 12, seed=3)
    new_x, new_y, _ = _grouped(60, 12, seed=103)   # other models, other offsets
    by_model = corr.fit(x, y, method, quantile=0.9, groups=groups)
    by_row = corr.fit(x, y, method, quantile=0.9)
    under = {name: np.mean([c.log_ratio(r) < t for r, t in zip(new_x, new_y)])
             for name, c in (("model", by_model), ("row", by_row))}
    # random-row folds see every model in training: a margin too small for a new one
    assert under["model"] <= 0.12 < under["row"] and by_model.margin > by_row.margin
    assert "grouped by model (5 folds of 30 models)" == by_model.meta["calibration"]
    assert by_row.meta["calibration"].startswith("random rows")


def test_output_is_clamped():
    tree = corr.Tree((0,), (0.0,), (-1,), (-1,), (50.0,))
    c = corr.Correction(0.0, 1.0, 0.0, (tree,), {})
    assert c.log_ratio([0.0] * len(corr.FEATURES)) == corr.LOG_RATIO_BOUNDS[1]


@pytest.mark.parametrize("content, match", [
    ("not json", "not valid JSON"), ("[]", "format"),
    (json.dumps({"format": corr.FORMAT, "version": 99, "features": list(corr.FEATURES)}), "retrain"),
    (json.dumps({"format": corr.FORMAT, "version": 1, "features": list(corr.FEATURES), "base": 0,
                 "scale": 1, "margin": 0, "trees": [{"feature": [0, 0, 0], "threshold": [0, 0, 0],
                                                     "left": [0, -1, -1], "right": [2, -1, -1],
                                                     "value": [0, 1, 2]}]}), "outside"),
    (json.dumps({"format": corr.FORMAT, "version": 1, "features": list(corr.FEATURES), "base": 0,
                 "scale": 1, "margin": 0, "trees": [{"feature": [0]}]}), "malformed"),
])
def test_bad_files_are_usage_errors(tmp_path, content, match):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=match):
        corr.load(path)


def test_missing_file():
    with pytest.raises(UsageError, match="cannot read"):
        corr.load("/nonexistent/correction.json")


def test_too_little_history():
    with pytest.raises(UsageError, match="at least 5"):
        corr.fit([[0.0] * len(corr.FEATURES)] * 3, [0.1, 0.2, 0.3])
    assert math.isfinite(corr.LOG_RATIO_BOUNDS[0])


# --- the optional sharing table (measured utilisation per model) ------------------------------

def _flat(sharing=None):
    tree = corr.Tree((0,), (0.0,), (-1,), (-1,), (0.1,))
    return corr.Correction(0.0, 1.0, 0.0, (tree,), {"method": "rf"}, sharing or {})


def test_sharing_round_trips_and_is_optional(tmp_path):
    from slurm_liquid.estimate.decide import ModelUsage

    path = tmp_path / "c.json"
    table = {"resnet18": ModelUsage(5, 85.0, 1700.0), "gpt2": ModelUsage(3, 40.5, 9000.0)}
    _flat(table).save(path)
    loaded = corr.load(path)
    assert dict(loaded.sharing) == table and loaded.trees == _flat().trees
    assert json.loads(path.read_text())["version"] == 1
    # a file from before the sharing table (no key) still loads, with no evidence
    _flat().save(path)
    assert "sharing" not in json.loads(path.read_text()) and corr.load(path).sharing == {}


@pytest.mark.parametrize("sharing, match", [
    ([], "sharing must be an object"),
    ({"resnet18": [5, 85, 1700]}, "resnet18: must be an object"),
    ({"resnet18": {"jobs": 5, "util": 85}}, "resnet18: must be an object with jobs, util and peak_mib"),
    ({"resnet18": {"jobs": 0, "util": 85, "peak_mib": 1700}}, "resnet18: jobs"),
    ({"resnet18": {"jobs": 2.5, "util": 85, "peak_mib": 1700}}, "resnet18: jobs must be a whole number"),
    ({"resnet18": {"jobs": True, "util": 85, "peak_mib": 1700}}, "resnet18: jobs"),
    ({"resnet18": {"jobs": 5, "util": 185, "peak_mib": 1700}}, "resnet18: util"),
    ({"resnet18": {"jobs": 5, "util": "85", "peak_mib": 1700}}, "resnet18: util"),
    ({"resnet18": {"jobs": 5, "util": 85, "peak_mib": -1}}, "resnet18: peak_mib"),
    ({"resnet18": {"jobs": 5, "util": float("nan"), "peak_mib": 1700}}, "resnet18: util"),
])
def test_malformed_sharing_is_a_usage_error_naming_the_file(tmp_path, sharing, match):
    path = tmp_path / "c.json"
    doc = _flat().to_json()
    doc["sharing"] = sharing
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=f"correction file {re.escape(str(path))}: malformed sharing data: {match}"):
        corr.load(path)
