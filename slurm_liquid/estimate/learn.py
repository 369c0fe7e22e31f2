"""Closing the loop: retrain the correction from what finished jobs really used.

Each finished GPU job carries its spec in the Comment record (written at submission) and its
measured usage in the AdminComment (written by the node agents; users cannot forge it). Joined,
they are history rows like the profiling harness's (`measure=nvml`, peak MiB per GPU). `retrain`
fits a new correction on part of them, scores it against the prior and the installed model on
the held-out rest, and refits on everything for installation; `install` swaps the file atomically
and keeps the previous one beside it.

Scores are of what the estimator really answers: the prior with the correction applied to the
terms it scales (`Breakdown.scaled`: everything but the fixed CUDA context), so the training
target is the ratio of those parts too (`target`), not of the totals.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import statistics
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from slurm_liquid.errors import LiquidError, UsageError
from slurm_liquid.estimate import correction as corr
from slurm_liquid.estimate.catalog import Catalog
from slurm_liquid.estimate.decide import ModelUsage
from slurm_liquid.estimate.history import Record
from slurm_liquid.estimate.prior import CONTEXT_MIB, MIB, breakdown, resolve_entry
from slurm_liquid.ledger import Record as JobRecord, Tag, Usage
from slurm_liquid.ledger.tag import spec_digest

TRUSTED_SOURCES = ("nvml", "nvml-acct")
UNDER_LIMIT = 0.10           # a new model may under-estimate at most this share (or the current's)
MIN_TRAIN = 5                # correction.fit's floor


# --- joining sacct jobs into history rows -----------------------------------------------------

def _row(job: Any, catalog: Catalog, allow_standin: bool, context_mib: float) -> Record | str:
    """The history row of one job, or why it has none."""
    if not job.is_finished:
        return "not finished"
    if not (job.gpus or job.shards):
        return "no GPU"
    record = JobRecord.parse(job.comment)
    if record is None:
        return "no record"
    if not record.spec:
        return "no spec"
    if record.spec.endswith("..."):
        return "spec cut"        # the cut may have dropped batch-size or precision: not trusted
    tag = Tag.parse(job.admin_comment)
    if tag and tag.trusted and tag.trusted.digest and tag.trusted.digest != spec_digest(record.spec):
        return "spec edited"     # the Comment's spec is not the one the daemon saw at placement
    usage = Usage.parse(job.admin_comment)
    if usage is None:
        return "no usage"
    if usage.by == "none":
        return "no GPU readings"
    if usage.by == "standin" and not allow_standin:
        return "stand-in readings"
    if usage.by not in TRUSTED_SOURCES + ("standin",):
        return "unknown source"
    if usage.peak_mib <= 0:
        return "peak 0"
    try:
        spec = record.job_spec()
    except LiquidError:
        return "spec invalid"
    if not spec.batch_size:
        return "spec invalid"    # the prior of batch 1 says nothing about the job that ran
    try:
        entry = resolve_entry(spec, catalog)
    except LiquidError:
        return "unknown model"
    gpus = max(1, usage.gpus)
    extra = {"job_id": str(job.job_id), "by": usage.by, "util": "" if usage.util is None else f"{usage.util:g}",
             "shared": str(int(usage.shared)), "gpu_name": job.gpu_type or "", "source": "sacct"}
    return Record(entry, spec, gpus, "nvml", float(usage.peak_mib),
                  breakdown(entry, spec, gpus, context_mib=context_mib), extra)


def history_from_jobs(jobs: Iterable[Any], catalog: Catalog, allow_standin: bool = False,
                      context_mib: float = CONTEXT_MIB) -> tuple[list[Record], dict[str, int]]:
    """History rows of the finished GPU jobs that carry a spec and trusted measurements, and the
    count of the others by reason (a bad spec skips its job, never aborts the run)."""
    from slurm_liquid.slurm.parse import latest_runs  # one row per job id, its last run

    records, skipped = [], Counter()
    for job in latest_runs(list(jobs)):
        row = _row(job, catalog, allow_standin, context_mib)
        if isinstance(row, str):
            skipped[row] += 1
        else:
            records.append(row)
    return records, dict(skipped)


def sharing_table(records: Iterable[Record]) -> dict[str, ModelUsage]:
    """Per model: jobs with a utilisation reading, median utilisation, median peak per GPU."""
    util: dict[str, list[float]] = {}
    peak: dict[str, list[float]] = {}
    for r in records:
        try:
            value = float(r.extra.get("util", ""))
        except ValueError:
            continue             # history files without utilisation say nothing about sharing
        util.setdefault(r.entry.name, []).append(value)
        peak.setdefault(r.entry.name, []).append(r.measured_mib)
    return {name: ModelUsage(len(values), float(statistics.median(values)),
                             float(statistics.median(peak[name]))) for name, values in util.items()}


# --- what the estimator answers, and how far off it is ----------------------------------------

def _fixed(r: Record) -> float:
    """Bytes of the measurement the correction does not scale (the CUDA context in NVML)."""
    return r.prior.context if r.measure == "nvml" else 0.0


def target(r: Record) -> float:
    """log(measured / prior) over the part the correction scales, clamped to its bounds."""
    fixed = _fixed(r)
    scaled = r.prior.for_measure(r.measure) - fixed
    rest = max(r.measured_mib * MIB - fixed, 1.0)  # a job below the assumed context
    low, high = corr.LOG_RATIO_BOUNDS
    return min(max(math.log(rest / scaled), low), high)


def estimated_mib(r: Record, model: corr.Correction | None) -> float:
    """What the estimator says for this row: the prior, corrected as `api.estimate` does."""
    if model is None:
        return r.prior_mib
    factor = model.factor(r.entry, r.spec, r.prior)
    return r.prior.scaled(factor).for_measure(r.measure) / MIB


@dataclass(frozen=True)
class Score:
    rows: int
    mre: float                   # mean |estimate - measured| / measured
    under: float                 # share of rows with estimate < measured

    def to_json(self) -> dict[str, float]:
        return {"rows": self.rows, "mre": round(self.mre, 4), "under": round(self.under, 4)}


def score(records: Sequence[Record], model: corr.Correction | None) -> Score:
    est = [estimated_mib(r, model) for r in records]
    meas = [r.measured_mib for r in records]
    return Score(len(records), statistics.fmean(abs(e - m) / m for e, m in zip(est, meas)),
                 sum(e < m for e, m in zip(est, meas)) / len(records))


def fit_records(records: Sequence[Record], method: str = "gbr", quantile: float = 0.9, seed: int = 0,
                meta: dict[str, Any] | None = None) -> corr.Correction:
    x = [corr.features(r.entry, r.spec, r.prior) for r in records]
    return corr.fit(x, [target(r) for r in records], method, quantile, seed, meta,
                    groups=[r.entry.name for r in records])


# --- retraining and installing ------------------------------------------------------------------

@dataclass(frozen=True)
class Report:
    rows: int
    train_rows: int
    prior: Score                 # all scores on the held-out rows
    current: Score | None
    new: Score
    better: bool
    verdict: str                 # why it is (not) better
    trial: corr.Correction       # fitted on the train part (the one scored)
    model: corr.Correction       # refitted on every row, with the sharing table: the one to install

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "train_rows": self.train_rows, "heldout_rows": self.new.rows,
                "prior": self.prior.to_json(), "current": self.current.to_json() if self.current else None,
                "new": self.new.to_json(), "better": self.better, "verdict": self.verdict,
                "method": self.model.meta.get("method"), "quantile": self.model.meta.get("quantile"),
                "sharing": {name: {"jobs": u.jobs, "util": u.util, "peak_mib": u.peak_mib}
                            for name, u in sorted(self.model.sharing.items())}}


def judge(prior: Score, current: Score | None, new: Score) -> tuple[bool, str]:
    """Better than what answers today (the current model, else the prior): under-estimates at most
    max(today's share, 10%) and a lower mean error."""
    name, base = ("the current model", current) if current else ("the prior alone", prior)
    limit = max(base.under, UNDER_LIMIT)
    if new.under > limit:
        return False, (f"the new model under-estimates {new.under:.0%} of held-out jobs "
                       f"(limit {limit:.0%})")
    if new.mre >= base.mre:
        return False, f"the new model's mean error {new.mre:.1%} is not below {name}'s {base.mre:.1%}"
    return True, (f"mean error {new.mre:.1%} < {base.mre:.1%} ({name}), "
                  f"under-estimates {new.under:.0%} <= {limit:.0%}")


def retrain(records: Sequence[Record], current: corr.Correction | None, holdout: float = 0.25,
            seed: int = 0, method: str = "gbr", quantile: float = 0.9,
            meta: dict[str, Any] | None = None) -> Report:
    """Fit on a seeded random (1 - holdout) of the jobs, score on the rest, refit on all."""
    if not 0 < holdout < 1:
        raise UsageError(f"holdout: {holdout} must be between 0 and 1 (the held-out share)")
    if not 0.5 <= quantile < 1.0:
        raise UsageError(f"quantile: {quantile} is outside 0.5..0.99")
    held_n = max(1, round(len(records) * holdout))
    if len(records) - held_n < MIN_TRAIN:
        raise UsageError(f"{len(records)} usable jobs; need at least {MIN_TRAIN} to train and "
                         f"{held_n} more to hold out")
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    held = [records[i] for i in sorted(order[:held_n])]
    train = [records[i] for i in sorted(order[held_n:])]
    trial = fit_records(train, method, quantile, seed)
    scores = score(held, None), score(held, current) if current else None, score(held, trial)
    better, verdict = judge(*scores)
    info = {**(meta or {}), "heldout": {"rows": held_n, "seed": seed, "prior": scores[0].to_json(),
                                        "current": scores[1].to_json() if scores[1] else None,
                                        "new": scores[2].to_json()}}
    model = replace(fit_records(records, method, quantile, seed, info), sharing=sharing_table(records))
    return Report(len(records), len(train), *scores, better, verdict, trial, model)


def install(model: corr.Correction, path: str | Path) -> Path | None:
    """Write `model` to `path` atomically; an existing file is kept as `<path>.prev`, returned."""
    path = Path(path)
    backup = path.with_name(path.name + ".prev") if path.exists() else None
    try:
        if backup is not None:
            # copy, not move: `path` must stay readable until the new file replaces it
            tmp = backup.with_name(backup.name + ".tmp")
            shutil.copy2(path, tmp)
            os.replace(tmp, backup)
        model.save(path)
    except OSError as exc:
        raise LiquidError(f"cannot install the correction at {path}: {exc.strerror or exc}") from None
    return backup
