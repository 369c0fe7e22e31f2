"""Decisions from the memory estimate: GPU count, sharding, GRES string, shards, CPUs, host memory.

- GPU count: the smallest width whose per-GPU peak fits the card (less headroom); one node's
  widths first (1..gpus_per_node), then whole nodes; always a multiple of the model-parallel
  degree (tp x pp x sp). Widening helps only where it cuts per-GPU memory: a global batch split
  over more GPUs (never more data-parallel ranks than samples per step), or sharded states. A
  script that fixes its per-GPU micro-batch runs on the GPUs it asked for. When the model states
  alone do not fit one card the job is sharded (ZeRO-3/FSDP) and the width grows until the
  shards fit. Never wider than the site (nodes x GPUs per node, when the site file says); a job
  that fits nowhere keeps its own width and `fits` is false (the caller then names what would fit).
- Scaling: a step on n GPUs costs compute of the global batch/n (a script that fixes its per-GPU
  micro-batch grows the global batch with the GPUs) + ring all-reduce 2(n-1)/n x gradient bytes / link
  bandwidth (NVLink inside a node, the network across nodes); `max_efficient_gpus` is the widest
  count (up to max-gpus) whose efficiency stays at or above MIN_EFFICIENCY, for elastic jobs.
- Fine-grained sharing: a one-GPU job that needs at most SHARE_LIMIT of a card gets `shard:K`
  GRES out of the site's shards per GPU (gres.conf `Name=shard Count=` over the node's GPUs; 16),
  unless the node agents measured that model busy (median GPU utilisation >= BUSY_UTIL over at
  least MIN_EVIDENCE jobs, from the fitted correction's sharing table): a busy job on a shared card
  slows its neighbours and itself, so it gets a whole GPU.
- CPUs and host memory per GPU by family (input pipelines differ), see CPUS_PER_GPU, capped at a
  GPU's share of a node when the site file gives `cpus_per_node` / `mem_mib_per_node`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from slurm_liquid.estimate.catalog import ModelEntry
from slurm_liquid.estimate.gpus import GpuTable, GpuType
from slurm_liquid.estimate.prior import MIB, Breakdown
from slurm_liquid.jobspec import JobSpec

SHARE_LIMIT = 0.5
MIN_EFFICIENCY = 0.7
MFU = 0.35                     # achieved share of peak 16-bit tensor throughput
PEAK_TFLOPS = 300.0            # order of an A100/H100 class card; only ratios matter here
CPUS_PER_GPU = {"cnn": 8, "vit": 8, "detection": 8, "rnn": 6, "recsys": 4,
                "encoder": 4, "decoder": 4, "seq2seq": 4}
HOST_BASE_MIB = 4096
HOST_PER_CPU_MIB = 1024        # a data-loader worker each
MAX_WIDTH = 4096
BUSY_UTIL = 60.0               # % median GPU utilisation at or above which a job is too busy to share
VLLM_UTILIZATION = 0.9         # vLLM's default gpu_memory_utilization
MIN_EVIDENCE = 3               # jobs measured before their utilisation overrides the memory rule


@dataclass(frozen=True)
class ModelUsage:
    """What the node agents measured for one model over past jobs (median per job)."""

    jobs: int
    util: float                # % GPU utilisation
    peak_mib: float            # peak used MiB per GPU


@dataclass(frozen=True)
class Decision:
    gpus: int
    nodes: int
    gpus_per_node: int
    sharding: str
    auto_sharded: bool
    fits: bool
    per_gpu: Breakdown
    need_mib: int
    card_mib: int
    shards: int                # 0 = whole GPUs
    gres: str
    cpus_per_gpu: int
    host_mem_mib_per_gpu: int
    efficiency: float
    max_efficient_gpus: int
    shards_per_gpu: int = 16
    notes: tuple[str, ...] = ()


def flops_per_sample(entry: ModelEntry, spec: JobSpec) -> float:
    """Training FLOPs per sample: 3x the forward (forward + backward)."""
    if entry.is_transformer:
        return 6.0 * entry.params * (spec.seq_len or entry.seq_len)
    if entry.gflops:
        scale = ((spec.image_size or entry.image_size) / entry.image_size) ** 2 \
            if entry.family in ("cnn", "vit", "detection") else 1.0
        return 3e9 * entry.gflops * scale
    return 6.0 * entry.params


def global_batch(spec: JobSpec, n: int) -> int:
    """Samples per optimizer step on n GPUs: the global batch as said, else what a script that fixes
    its per-GPU micro-batch makes of it (micro-batch x accumulation x data-parallel GPUs)."""
    if spec.batch_size:
        return spec.batch_size
    return (spec.micro_batch or 1) * (spec.grad_accum or 1) * max(1, n // model_parallel(spec))


def keeps_batch(spec: JobSpec, n: int) -> bool:
    """Whether n GPUs can run the stated global batch exactly: its data-parallel ranks x the
    accumulation steps divide it (a script that fixes its micro-batch instead keeps that)."""
    if not spec.batch_size or spec.micro_batch:
        return True
    return spec.batch_size % (max(1, n // model_parallel(spec)) * (spec.grad_accum or 1)) == 0


def efficiency(entry: ModelEntry, spec: JobSpec, n: int, gpu: GpuType, table: GpuTable) -> float:
    if n <= 1:
        return 1.0
    compute = flops_per_sample(entry, spec) * global_batch(spec, n) / n / (PEAK_TFLOPS * 1e12 * MFU)
    link = gpu.link_gbs if n <= table.gpus_per_node else min(gpu.link_gbs, table.inter_node_gbs)
    grad_bytes = entry.params * (2.0 if (spec.precision or "fp32") != "fp32" else 4.0)
    comm = 2 * (n - 1) / n * grad_bytes / (link * 1e9)
    return compute / (compute + comm)


def model_parallel(spec: JobSpec) -> int:
    """GPUs one replica spans: tp x pp x sp (sp=tp is Megatron's sequence parallelism, same GPUs)."""
    tp, pp, sp = spec.tp or 1, spec.pp or 1, spec.sp or 1
    return tp * pp * (1 if sp == tp else sp)


def site_gpus(table: GpuTable) -> int:
    """GPUs of the whole site per the site file (0 = unknown)."""
    return table.nodes * table.gpus_per_node if table.nodes else 0


def _widths(per_node: int, low: int, high: int) -> list[int]:
    one_node = list(range(low, min(per_node, high) + 1))
    nodes = [k * per_node for k in range(2, high // per_node + 1) if k * per_node >= low]
    return one_node + nodes if one_node or nodes else [low]


def too_busy(measured: ModelUsage | None, busy_util: float = BUSY_UTIL,
             min_jobs: int = MIN_EVIDENCE) -> str | None:
    """Why a job should not share a GPU per measured utilisation, or None (too little evidence
    or a quiet model)."""
    if measured is None or measured.jobs < min_jobs or measured.util < busy_util:
        return None
    return (f"measured median GPU utilisation {measured.util:.0f}% over {measured.jobs} jobs: "
            "too busy to share")


def decide(entry: ModelEntry, spec: JobSpec, gpu: GpuType, table: GpuTable,
           need: Callable[[int, str], Breakdown], measured: ModelUsage | None = None,
           busy_util: float = BUSY_UTIL, min_jobs: int = MIN_EVIDENCE) -> Decision:
    """`need(n, sharding)` is the (corrected) per-GPU breakdown on n GPUs; `measured` what past
    jobs of this model used (None: no evidence, memory alone decides sharing)."""
    usable = gpu.mem_mib * (1 - table.headroom) * MIB
    reserve = 0.0
    if spec.runtime == "vllm" and spec.mode == "inference":
        # vLLM takes gpu_memory_utilization of the card up front (weights, activations, the rest
        # KV-cache blocks): it starts only if its own need fits that share, and then holds all of it
        reserve = (spec.gpu_memory_utilization or VLLM_UTILIZATION) * gpu.mem_mib * MIB
        usable = min(usable, reserve)
    sharding = spec.sharding or "none"
    parallel = model_parallel(spec)
    low = max(spec.min_gpus or 1, parallel)
    high = max(low, min(spec.max_gpus or MAX_WIDTH, site_gpus(table) or MAX_WIDTH))
    if not spec.micro_batch:  # more data-parallel ranks than samples per step cannot cut memory
        high = max(low, min(high, parallel * math.ceil((spec.batch_size or 1) / (spec.grad_accum or 1))))
    # a script that fixes its per-GPU batch runs on the GPUs it asked for: judge its states there
    single = need(max(spec.gpus, low) if spec.micro_batch and spec.gpus else low, sharding)
    auto = False
    if (sharding in ("none", "zero1", "zero2") and spec.mode != "inference" and not spec.adapter
            and single.model_states + single.context > usable):
        sharding, auto = "fsdp", True
    widths = [n for n in _widths(table.gpus_per_node, low, high) if n % parallel == 0] or [low]
    widths = [n for n in widths if keeps_batch(spec, n)] or widths
    if spec.micro_batch and spec.gpus and sharding == (spec.sharding or "none"):
        widths = [max(spec.gpus, low)]   # the script's own width: its per-GPU batch is fixed
    chosen, fits = max(spec.gpus or low, low), False
    for n in widths:
        if need(n, sharding).total <= usable:
            chosen, fits = n, True
            break
    if not fits:
        sharding = spec.sharding or "none"  # say what the job as written needs, not a guess
    per_gpu = need(chosen, sharding)
    need_mib = int(math.ceil(max(per_gpu.total, reserve if fits else 0.0) / MIB))
    nodes = max(1, math.ceil(chosen / table.gpus_per_node))
    per_node = math.ceil(chosen / nodes)
    shards = 0
    notes: tuple[str, ...] = ()
    # An elastic job grows by whole GPUs: it never starts on a share of one.
    if chosen == 1 and fits and not spec.elastic and need_mib <= SHARE_LIMIT * gpu.mem_mib:
        busy = too_busy(measured, busy_util, min_jobs)
        if busy:
            notes = (busy,)
        else:
            shards = max(1, math.ceil(need_mib / (gpu.mem_mib / table.shards_per_gpu)))
    gres = f"shard:{shards}" if shards else f"gpu:{gpu.gres_type}:{per_node}"
    cpus = CPUS_PER_GPU.get(entry.family, 4)
    if shards:
        cpus = max(2, math.ceil(cpus * shards / table.shards_per_gpu))
    # a data-loader worker per CPU; staging 1.5x the rank's model states (checkpoint save/load),
    # wherever they live; and what offloading keeps in host memory for the whole run
    host = (HOST_BASE_MIB + cpus * HOST_PER_CPU_MIB + 1.5 * (per_gpu.model_states + per_gpu.host) / MIB
            + per_gpu.host / MIB)
    # A GPU's share of its node is all a job can get per GPU when the node is full.
    if table.cpus_per_node:
        cpus = max(1, min(cpus, table.cpus_per_node // table.gpus_per_node))
    if table.mem_mib_per_node:
        if per_gpu.host and host > table.mem_mib_per_node / table.gpus_per_node:
            notes += (f"offloading keeps {per_gpu.host / MIB:,.0f} MiB per GPU in host memory: more than a "
                      "GPU's share of a node; ask for --mem explicitly",)
        host = min(host, table.mem_mib_per_node / table.gpus_per_node)
    widest = chosen
    for n in _widths(table.gpus_per_node, chosen, spec.max_gpus or chosen):
        if efficiency(entry, spec, n, gpu, table) >= MIN_EFFICIENCY:
            widest = n
    return Decision(gpus=chosen, nodes=nodes, gpus_per_node=per_node, sharding=sharding,
                    auto_sharded=auto, fits=fits, per_gpu=per_gpu, need_mib=need_mib,
                    card_mib=gpu.mem_mib, shards=shards, gres=gres, cpus_per_gpu=cpus,
                    host_mem_mib_per_gpu=int(math.ceil(host)),
                    efficiency=round(efficiency(entry, spec, chosen, gpu, table), 3),
                    max_efficient_gpus=widest, shards_per_gpu=table.shards_per_gpu, notes=notes)
