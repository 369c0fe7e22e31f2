"""What would make a job fit, cheapest change first, with the memory each needs.

Asked when the job as written does not fit its GPUs. Each option changes the spec the way the user
would change the script (`#LIQUID` directives), is sized by the same (corrected) estimate, and is
kept only if it fits: more accumulation with a smaller micro-batch (same global batch), activation
checkpointing, a fused attention kernel, mixed precision, ZeRO/FSDP on the same GPUs, CPU offload
of the optimizer, tensor parallelism inside a node, more GPUs with sharding (never more than the
site has), a bigger GPU type of the site. When no single change is enough, all of the cheap ones
together are tried on the widest width the site allows.

Every option keeps the global batch exactly (micro-batch x accumulation x data-parallel GPUs):
a smaller micro-batch only where it divides the samples per GPU and step, more GPUs only where
their data-parallel ranks divide the global batch (the micro-batch or the accumulation rescaled to
match), and the option says the global batch it keeps.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Iterator

from slurm_liquid.estimate.catalog import ModelEntry
from slurm_liquid.estimate.decide import (MAX_WIDTH, VLLM_UTILIZATION, _widths, global_batch, model_parallel,
                                          site_gpus)
from slurm_liquid.estimate.gpus import GpuTable, GpuType
from slurm_liquid.estimate.prior import MIB, Breakdown
from slurm_liquid.jobspec import JobSpec

Need = Callable[[JobSpec, int, str], Breakdown]
TOGETHER = "all of these together"


@dataclass(frozen=True)
class Option:
    change: str            # directives to add or change (`checkpointing=true`)
    why: str               # what it does, in words
    gpus: int
    gpu_type: str
    need_mib: int

    def describe(self) -> str:
        return f"{self.change} ({self.why}): {self.need_mib:,} MiB per GPU on {self.gpus} x {self.gpu_type}"

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _with(spec: JobSpec, **values: object) -> JobSpec:
    return dataclasses.replace(spec, **values)


def advise(entry: ModelEntry, spec: JobSpec, gpu: GpuType, table: GpuTable, gpus: int, micro: int,
           need: Need, limit: int = 6) -> list[Option]:
    """Options that make the job fit, cheapest first (at most `limit`)."""
    out: list[Option] = []
    for option in _options(entry, spec, gpu, table, gpus, micro, need):
        if option.why.startswith(TOGETHER) and out:
            break                      # one change is enough: no need to stack them all
        if option.change not in {o.change for o in out}:
            out.append(option)
        if len(out) >= limit:
            break
    return out


def _fits(need_b: Breakdown, gpu: GpuType, table: GpuTable, spec: JobSpec) -> bool:
    usable = gpu.mem_mib * (1 - table.headroom)
    if spec.runtime == "vllm" and spec.mode == "inference":   # vLLM starts only within its own share
        usable = min(usable, (spec.gpu_memory_utilization or VLLM_UTILIZATION) * gpu.mem_mib)
    return need_b.total <= usable * MIB


def _options(entry: ModelEntry, spec: JobSpec, gpu: GpuType, table: GpuTable, gpus: int, micro: int,
             need: Need) -> Iterator[Option]:
    sharding = spec.sharding or "none"
    training = spec.mode != "inference"
    parallel = model_parallel(spec)
    capacity = site_gpus(table) or MAX_WIDTH

    def sized(change: str, why: str, new: JobSpec, n: int = gpus, shard: str | None = None,
              card: GpuType = gpu) -> Option | None:
        b = need(new, n, shard or new.sharding or "none")
        if not _fits(b, card, table, new):
            return None
        return Option(change, why, n, card.name, int(math.ceil(b.total / MIB)))

    # 1. smaller micro-batch, more accumulation: same global batch, same GPUs
    accum = spec.grad_accum or 1
    batch = global_batch(_with(spec, micro_batch=spec.micro_batch or micro), gpus)
    for m in range(micro - 1, 0, -1) if micro > 1 else ():
        if (micro * accum) % m:
            continue                   # m x steps would not be the same samples per GPU and step
        steps = micro * accum // m
        option = sized(f"micro-batch={m} grad-accum={steps}", f"same global batch {batch} in more steps",
                       _with(spec, micro_batch=m, grad_accum=steps))
        if option:
            yield option
            break
    cheap: dict[str, object] = {}
    if training and not spec.checkpointing:
        cheap["checkpointing"] = True
        option = sized("checkpointing=true", "recompute activations in backward", _with(spec, checkpointing=True))
        if option:
            yield option
    attention = spec.attention or entry.default_attention
    if entry.is_transformer and attention == "eager":
        cheap["attention"] = "flash"
        option = sized("attention=flash", "fused attention saves no score matrix", _with(spec, attention="flash"))
        if option:
            yield option
    if training and (spec.precision or "fp32") == "fp32" and not spec.adapter:
        cheap["precision"] = "bf16"
        option = sized("precision=bf16", "mixed precision", _with(spec, precision="bf16"))
        if option:
            yield option
    if training and not spec.adapter and gpus // parallel > 1:
        for stage in ("zero2", "fsdp"):
            if stage != sharding:
                option = sized(f"sharding={stage}", "shard optimizer state (zero2) or everything (fsdp) "
                               f"over the {gpus} GPUs", _with(spec, sharding=stage), shard=stage)
                if option:
                    yield option
                    break
    if training and (spec.offload or "none") == "none":
        stage = sharding if sharding != "none" else "zero2"
        option = sized(f"offload=optimizer sharding={stage}", "optimizer state and fp32 master weights "
                       "in host memory (DeepSpeed ZeRO-Offload)", _with(spec, offload="optimizer", sharding=stage),
                       shard=stage)
        if option:
            yield option
    if entry.is_transformer and entry.heads:
        for tp in (2, 4, 8):
            if tp <= table.gpus_per_node and entry.heads % tp == 0 and tp > (spec.tp or 1):
                n = gpus // (spec.tp or 1) * tp
                if n <= capacity:
                    option = sized(f"tp={tp}", f"tensor parallelism over {tp} GPUs of a node, same global batch {batch}",
                                   _with(spec, tp=tp), n=n)
                    if option:
                        yield option
                        break
    stage = sharding if sharding in ("zero3", "fsdp") else ("fsdp" if training and not spec.adapter else sharding)
    for n in _widths(table.gpus_per_node, gpus + 1, capacity):
        rescaled = _same_batch(spec, batch, n, parallel, micro)
        if n % parallel or rescaled is None:
            continue
        words, new = rescaled
        option = sized(" ".join([f"gpus={n}", *words] + ([f"sharding={stage}"] if stage != sharding else [])),
                       ("more GPUs, states sharded over them" if stage in ("zero3", "fsdp") else "more GPUs")
                       + f", same global batch {batch}",
                       _with(new, sharding=stage if stage != "none" else spec.sharding), n=n, shard=stage)
        if option:
            yield option
            break
    for card in sorted(table.types.values(), key=lambda t: t.mem_mib):
        if card.mem_mib > gpu.mem_mib:
            option = sized(f"gpu-type={card.name}", "a GPU with more memory", spec, card=card)
            if option:
                yield option
                break
    # nothing single was enough: the cheap changes together, on the widest width allowed that keeps
    # the global batch (micro-batch 1, the accumulation making up the rest)
    wide = min(capacity, max(gpus, table.gpus_per_node))
    wide -= wide % parallel
    while wide > gpus and batch % max(1, wide // parallel):
        wide -= parallel
    wide = max(wide, gpus)
    steps = max(1, batch // max(1, wide // parallel))
    together = _with(spec, micro_batch=1, grad_accum=steps, **cheap)
    if training and not spec.adapter:
        together = _with(together, sharding="fsdp", offload="optimizer")
    names = ["micro-batch=1", f"grad-accum={steps}", *(f"{k}={str(v).lower()}" for k, v in cheap.items())]
    if training and not spec.adapter:
        names += ["sharding=fsdp", "offload=optimizer"]
    option = sized(" ".join(names) + (f" gpus={wide}" if wide != gpus else ""),
                   f"{TOGETHER}, same global batch {batch}",
                   together, n=max(wide, parallel), shard=together.sharding)
    if option:
        yield option


def _same_batch(spec: JobSpec, batch: int, n: int, parallel: int, micro: int) -> tuple[list[str], JobSpec] | None:
    """The directives that run the global batch `batch` on n GPUs exactly, and the spec with them;
    None when no whole micro-batch and accumulation do."""
    ranks = max(1, n // parallel)
    accum = spec.grad_accum or 1
    if batch % ranks:
        return None
    per_rank = batch // ranks                     # samples per rank and step
    if not spec.micro_batch:                      # the launcher splits the global batch: nothing to say
        return ([], spec) if per_rank % accum == 0 else None
    if per_rank % accum == 0:
        return [f"micro-batch={per_rank // accum}"], _with(spec, micro_batch=per_rank // accum)
    if per_rank % micro == 0:
        return [f"grad-accum={per_rank // micro}"], _with(spec, grad_accum=per_rank // micro)
    return None
