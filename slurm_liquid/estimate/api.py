"""One call for the submit path: job spec in, memory estimate and resource decision out."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from slurm_liquid.estimate.catalog import ModelEntry, load_catalog
from slurm_liquid.estimate.decide import BUSY_UTIL, Decision, decide
from slurm_liquid.estimate.gpus import GpuType, load_gpu_table
from slurm_liquid.estimate.prior import MIB, Breakdown, breakdown, resolve
from slurm_liquid.estimate.risk import DEFAULT_RISK, Margin, risk_model
from slurm_liquid.errors import UsageError
from slurm_liquid.jobspec import JobSpec

SITE_ENV = "SLURM_LIQUID_SITE"


@dataclass(frozen=True)
class Estimate:
    spec: JobSpec
    entry: ModelEntry
    gpu: GpuType
    prior: Breakdown             # analytic, on the chosen width
    factor: float                # learned correction (1.0 without a fitted model)
    decision: Decision
    correction_meta: dict[str, Any]
    table_nodes: int = 0         # GPU nodes of the cluster per the site file (0 = unknown)
    advice: tuple = ()           # advise.Option: what would make a job that does not fit fit
    notes: tuple[str, ...] = ()  # how the model was found (generic name, config.json)
    margin: Margin | None = None  # the stated risk: decisions use point x margin.factor (the bound)

    @property
    def point_mib(self) -> int:
        """The point estimate on the chosen width (prior x learned correction), before the margin."""
        return int(math.ceil(self.prior.scaled(self.factor).total / MIB))

    @property
    def gpu_mem_mib(self) -> int:
        return self.decision.need_mib

    def explanation(self) -> str:
        d = self.decision
        why = (f"{self.entry.name} needs up to {d.need_mib} MiB per GPU at micro-batch "
               f"{d.per_gpu.micro_batch}")
        if self.margin is not None:
            why += f" (point estimate {self.point_mib} MiB; bound at {self.margin.describe()})"
        if self.factor != 1.0:
            why += f" (analytic {int(self.prior.total / MIB)} MiB x learned {self.factor:.2f})"
        if not d.fits:
            fixes = "; ".join(o.describe() for o in self.advice[:4])
            return why + (f"; does not fit {d.gpus} x {self.gpu.name} ({d.card_mib} MiB) as written; "
                          + (f"fits with: {fixes}" if fixes else "nothing this site has fits it"))
        if d.shards:
            return why + f"; fits {d.shards}/{d.shards_per_gpu} of one {self.gpu.name} ({d.card_mib} MiB): shared GPU"
        shard = f", sharded with {d.sharding}" if d.sharding != "none" else ""
        auto = " (model states alone exceed one card)" if d.auto_sharded else ""
        whole = "".join(f"; whole GPU: {note}" for note in d.notes)
        return why + f"; smallest fit: {d.gpus} x {self.gpu.name} ({d.card_mib} MiB){shard}{auto}{whole}"

    def summary(self) -> str:
        """One word for records: `2xh100-80gb:66G` or, for a GPU share, `3/16shard:h100-80gb:15G`."""
        d = self.decision
        what = f"{d.shards}/{d.shards_per_gpu}shard:{self.gpu.name}" if d.shards else f"{d.gpus}x{self.gpu.name}"
        return f"{what}:{d.need_mib / 1024:.0f}G"

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return {
            "model": self.entry.name, "family": self.entry.family, "params": self.entry.params,
            "gpu_mem_mib": d.need_mib, "gpus": d.gpus, "nodes": d.nodes, "gres": d.gres,
            "shards": d.shards, "gpu_type": self.gpu.name, "gpu_mem_total_mib": d.card_mib,
            "fits": d.fits, "sharding": d.sharding, "micro_batch": d.per_gpu.micro_batch,
            "cpus_per_gpu": d.cpus_per_gpu, "host_mem_mib_per_gpu": d.host_mem_mib_per_gpu,
            "scaling_efficiency": d.efficiency, "max_efficient_gpus": d.max_efficient_gpus,
            "breakdown_mib": d.per_gpu.as_mib(), "prior_mib": int(self.prior.total / MIB),
            "correction_factor": round(self.factor, 3),
            "correction": self.correction_meta.get("method", "none"),
            "asked_gpus": self.spec.gpus, "explanation": self.explanation(),
            "mode": self.spec.mode or "train", "kv_cache_mib": int(math.ceil(d.per_gpu.kv_cache / MIB)),
            "advice": [o.to_json() for o in self.advice],
            "notes": [*self.spec.notes, *self.notes, *self.decision.notes],
            "inputs": self.inputs(),
            "point_mib": self.point_mib, "bound_mib": d.need_mib,
            "risk": self.margin.risk if self.margin else None,
            "risk_factor": round(self.margin.factor, 4) if self.margin else 1.0,
            "risk_models": self.margin.rows if self.margin else 0,
            "risk_guaranteed": self.margin.guaranteed if self.margin else False,
        }

    def inputs(self) -> dict[str, dict[str, Any]]:
        """Every value the estimate used, with where it came from: a flag, a directive, #SBATCH, the
        script's training command, a config file it names, or the estimator's default."""
        from slurm_liquid.jobspec import source_kind

        out: dict[str, dict[str, Any]] = {}
        for key, value in self.spec.to_dict().items():
            where = self.spec.sources.get(key, "")
            out[key] = {"value": value, "source": source_kind(where), "where": where or "default"}
        entry, d = self.entry, self.decision
        defaults: dict[str, Any] = {
            "precision": "fp32", "optimizer": "adamw" if self.spec.mode != "inference" else None,
            "sharding": d.sharding, "checkpointing": False, "grad-accum": 1, "mode": "train",
            "attention": entry.default_attention if entry.is_transformer else None,
            "seq-len": entry.seq_len if entry.is_transformer or entry.family == "rnn" else None,
            "image-size": entry.image_size if entry.family in ("cnn", "vit", "detection") else None,
            "micro-batch": d.per_gpu.micro_batch, "gpu-type": self.gpu.name,
            "rank": 16 if self.spec.adapter not in (None, "none") else None,
            "lora-targets": "q,v" if self.spec.adapter not in (None, "none") else None}
        for key, value in defaults.items():
            if key not in out and value is not None:
                derived = (key == "micro-batch" and bool(self.spec.batch_size)) or (key == "sharding" and d.auto_sharded)
                out[key] = {"value": value, "source": "derived" if derived else "default",
                            "where": "the estimate's choice" if derived else "default"}
        return out


CORRECTION_ENV = "SLURM_LIQUID_CORRECTION"


def _load_correction(path: str) -> Any:
    # Keyed on the file's identity too: a long-running caller (the daemon) picks up a model that
    # `estimate train --install` replaced under it.
    try:
        stat = os.stat(path)
        return _load_cached(path, stat.st_mtime_ns, stat.st_size, stat.st_ino)
    except OSError:
        return _load_cached(path, 0, 0, 0)  # load() says why it cannot read it


@lru_cache(maxsize=4)
def _load_cached(path: str, mtime_ns: int, size: int, inode: int) -> Any:
    from slurm_liquid.estimate import correction  # only when a fitted model is configured

    return correction.load(path)


def correction_path(explicit: str | None) -> str | None:
    """--correction FILE, else $SLURM_LIQUID_CORRECTION; "none" turns it off."""
    path = explicit or os.environ.get(CORRECTION_ENV) or None
    return None if path in (None, "", "none") else path


def estimate(spec: JobSpec, gpu_type: str | None = None, site: str | None = None,
             correction: str | None = None, busy_util: float = BUSY_UTIL, risk: float | None = DEFAULT_RISK,
             risk_file: str | None = None) -> Estimate:
    """Estimate what `spec` needs. Raises UsageError for bad input (never anything else on
    well-formed files). A one-GPU job small enough to share a card gets a whole one when the
    fitted model's sharing table measured its model at >= `busy_util`% GPU utilisation.
    Requests, fits and advice use the upper bound at `risk` (estimate/risk.py; None: the point
    estimate alone)."""
    site = site or os.environ.get(SITE_ENV) or None
    catalog = load_catalog(site)
    table = load_gpu_table(site)
    if not spec.batch_size and not spec.micro_batch and spec.runtime == "vllm" and spec.mode == "inference":
        # vLLM batches whatever fits its share of the card: one sequence is what must fit
        spec = dataclasses.replace(spec, micro_batch=1, notes=spec.notes + (
            "vllm: no batch said; sized for one sequence of seq-len (it reserves its share of the card anyway)",))
    if not spec.batch_size and not spec.micro_batch:
        raise UsageError("batch-size: needed (global batch per optimizer step), or micro-batch "
                         "(per-GPU batch, as the script fixes it)")
    entry, notes = resolve(spec, catalog)
    gpu = table.lookup(gpu_type or spec.gpu_type or table.default)
    path = correction_path(correction)
    fitted = _load_correction(path) if path else None
    context = table.context_mib

    margin = risk_model(risk_file).margin(risk) if risk is not None else None
    bound = margin.factor if margin else 1.0

    def need_for(job: JobSpec, n: int, sharding: str) -> Breakdown:
        prior = breakdown(entry, job, n, sharding, context)
        point = prior.scaled(fitted.factor(entry, job, prior)) if fitted else prior
        return point.scaled(bound) if bound != 1.0 else point

    measured = fitted.sharing.get(entry.name) if fitted else None
    decision = decide(entry, spec, gpu, table, lambda n, sharding: need_for(spec, n, sharding), measured,
                      busy_util)
    prior = breakdown(entry, spec, decision.gpus, decision.sharding, context)
    factor = fitted.factor(entry, spec, prior) if fitted else 1.0
    advice: tuple = ()
    if not decision.fits:
        from slurm_liquid.estimate.advise import advise

        advice = tuple(advise(entry, spec, gpu, table, decision.gpus, decision.per_gpu.micro_batch, need_for))
    return Estimate(spec, entry, gpu, prior, factor, decision, fitted.meta if fitted else {}, table.nodes,
                    advice, tuple(notes), margin)
