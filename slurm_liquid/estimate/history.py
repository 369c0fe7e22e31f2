"""History records: what jobs said about themselves and the peak GPU memory they really used.

CSV (or JSON lines) with one row per job/GPU: any job-spec keys as columns (`model`, `batch-size`,
`precision`, ...), `gpus` (data-parallel width, default 1), `measured_mib` (peak per GPU) and
`measure`: `nvml` (NVML used memory: what the card loses; the default), `reserved`/`allocated`
(PyTorch caching-allocator peaks) or `tensor` (tensor-level peak, e.g. CPU profiling), and
optionally `context_mib`: the CUDA context measured on the platform the row comes from (a
published run on older CUDA), else the site's. Other columns (gpu_name, source, ...) are kept for
the record and ignored by training.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.catalog import Catalog, ModelEntry
from slurm_liquid.estimate.prior import CONTEXT_MIB, Breakdown, breakdown, resolve_entry
from slurm_liquid.jobspec import KEYS, JobSpec

MEASURES = ("nvml", "reserved", "allocated", "tensor")


@dataclass(frozen=True)
class Record:
    entry: ModelEntry
    spec: JobSpec
    gpus: int
    measure: str
    measured_mib: float
    prior: Breakdown
    extra: dict[str, str]

    @property
    def prior_mib(self) -> float:
        return self.prior.for_measure(self.measure) / 2 ** 20


def _rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"history {path}: cannot read it: {exc.strerror}") from None
    if path.suffix in (".jsonl", ".json"):
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise UsageError(f"history {path} line {number}: not JSON: {exc}") from None
                yield number, {str(k): "" if v is None else str(v) for k, v in row.items()}
        return
    for number, row in enumerate(csv.DictReader(text.splitlines()), 2):
        yield number, {k.strip(): (v or "").strip() for k, v in row.items() if k}


def read_history(path: str | Path, catalog: Catalog, context_mib: float = CONTEXT_MIB) -> list[Record]:
    """Measured rows; priors use the site's CUDA context (`context_mib`) as the estimator does."""
    path = Path(path)
    records = []
    for number, row in _rows(path):
        where = f"history {path} row {number}"
        values = {k: v for k, v in row.items() if k in KEYS and v != "" and k != "gpus"}
        spec = JobSpec.from_values(values, source=where)
        try:
            measured = float(row.get("measured_mib", ""))
            gpus = int(row.get("gpus") or 1)
            context = float(row.get("context_mib") or context_mib)
        except ValueError:
            raise UsageError(f"{where}: measured_mib and context_mib must be numbers and gpus a "
                             "whole number") from None
        measure = row.get("measure") or "nvml"
        if measure not in MEASURES:
            raise UsageError(f"{where}: measure {measure!r} is not one of {', '.join(MEASURES)}")
        if not measured > 0 or gpus < 1 or not 0 <= context <= 16384:
            raise UsageError(f"{where}: measured_mib must be > 0, gpus >= 1 and context_mib in 0..16384")
        entry = resolve_entry(spec, catalog)
        prior = breakdown(entry, spec, gpus, context_mib=context)
        extra = {k: v for k, v in row.items() if k not in KEYS}
        records.append(Record(entry, spec, gpus, measure, measured, prior, extra))
    if not records:
        raise UsageError(f"history {path}: no rows")
    return records
