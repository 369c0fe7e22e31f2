"""The estimate's stated risk: an upper bound on a job's per-GPU peak that it exceeds with
probability at most `risk` (default 1 in 20), by split conformal prediction.

A row's score is log(measured / point) over the part of the estimate that can be wrong
(everything but the fixed CUDA context, as `Breakdown.scaled`), on rows the point estimator was not
fitted on: the published peaks of others' runs shipped in data/risk.json and, at a site, the node
agents' measured peaks (`slurm-liquid estimate calibrate`). Rows of one model are alike (the
estimate errs the same way on every batch size of a model), so they are not exchangeable with a
new model's job; models are. A calibration score is therefore a model's: its worst row. For a risk
a the bound is the point estimate scaled by exp(q), q the ceil((n + 1)(1 - a))-th smallest of the
n model scores: if a new job's model is exchangeable with the calibration models, P(peak > bound)
<= a (Vovk et al.; Angelopoulos & Bates, "A Gentle Introduction to Conformal Prediction", 2021).
When n is too small for the risk asked (rank > n: fewer than 19 models for 1 in 20) the largest
score is used and the answer says the risk is not guaranteed. A q below 0 (the point estimate already over-provisions at that risk) leaves the point
estimate as the bound: the bound is never below it.

The file holds the sorted scores, not a fitted model: loading it executes nothing, and any risk can
be asked at query time.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from slurm_liquid.errors import UsageError

FORMAT = "slurm-liquid-risk"
VERSION = 1
DEFAULT_RISK = 0.05          # 1 job in 20 may exceed its bound
RISK_ENV = "SLURM_LIQUID_RISK_FILE"
SHIPPED = Path(__file__).resolve().parent / "data" / "risk.json"
MAX_SCORES = 100_000


@dataclass(frozen=True)
class Margin:
    risk: float              # the stated risk of exceeding the bound
    factor: float            # bound = point scaled by this (never below 1)
    rows: int                # calibration models (scores) behind it
    guaranteed: bool         # False: too few rows for this risk (the largest score was used)
    source: str

    def describe(self) -> str:
        odds = f"1 in {round(1 / self.risk):d}" if self.risk > 0 else "0"
        text = f"risk {odds} of exceeding it (x{self.factor:.3f} over the point estimate, {self.rows} calibration models"
        return text + ("" if self.guaranteed else "; too few rows for this risk: not guaranteed") + ")"


@dataclass(frozen=True)
class RiskModel:
    scores: tuple[float, ...]   # sorted model scores: each calibration model's worst log(measured / point)
    source: str

    def margin(self, risk: float = DEFAULT_RISK) -> Margin:
        if not 0 < risk < 1:
            raise UsageError(f"risk: {risk} is outside (0, 1)")
        n = len(self.scores)
        if n == 0:
            return Margin(risk, 1.0, 0, False, self.source)
        rank = math.ceil((n + 1) * (1 - risk))
        q = self.scores[min(rank, n) - 1]
        return Margin(risk, math.exp(max(q, 0.0)), n, rank <= n, self.source)

    def to_json(self, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "source": self.source,
                "scores": [round(s, 6) for s in self.scores], **({"meta": meta} if meta else {})}


def scores_from(rows: Sequence[tuple[str, float, float]]) -> tuple[float, ...]:
    """Sorted model scores of (model, measured, point) rows over the scaled part (bytes or MiB, both
    alike): each model's largest log(measured / point)."""
    worst: dict[str, float] = {}
    for model, measured, point in rows:
        score = math.log(max(measured, 1e-9) / max(point, 1e-9))
        worst[model] = max(score, worst.get(model, -math.inf))
    return tuple(sorted(worst.values()))


def load(path: str | Path) -> RiskModel:
    """A risk file; anything malformed is a UsageError naming the file."""
    from slurm_liquid.files import read_json

    doc = read_json(path, "risk")
    where = f"risk file {path}"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise UsageError(f"{where}: not a {FORMAT} file of version {VERSION}")
    scores = doc.get("scores")
    if not isinstance(scores, list) or len(scores) > MAX_SCORES or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and -50 < s < 50 for s in scores):
        raise UsageError(f"{where}: scores must be a list of at most {MAX_SCORES} numbers in -50..50")
    return RiskModel(tuple(sorted(float(s) for s in scores)), str(doc.get("source", path))[:200])


@lru_cache(maxsize=4)
def _cached(path: str, mtime_ns: int) -> RiskModel:
    return load(path)


def risk_model(path: str | None = None) -> RiskModel:
    """--risk-file, else $SLURM_LIQUID_RISK_FILE, else the shipped calibration (published peaks)."""
    chosen = path or os.environ.get(RISK_ENV) or str(SHIPPED)
    try:
        mtime = os.stat(chosen).st_mtime_ns
    except OSError:
        mtime = 0
    return _cached(chosen, mtime)


def save(model: RiskModel, path: str | Path, meta: dict[str, Any] | None = None) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(model.to_json(meta), indent=1) + "\n")
    os.replace(tmp, path)
