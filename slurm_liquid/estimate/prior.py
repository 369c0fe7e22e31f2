"""Analytic memory prior: the per-GPU peak a training step (or an inference job) needs, broken
down by what holds it.

peak tensors = weights + gradients + optimizer state
               + max(activations + backward temporaries, optimizer-step temporaries)
(the 16-bit weight copies of mixed precision, part of `weights`, live from forward to backward
only: the optimizer-step branch does not stack on them)
per-GPU need = CUDA context + tensors x (1 + allocator slack)

Activations: estimate/activations.py; which model a spec names: estimate/resolve.py.

Model states follow the layout each framework really has: DDP keeps fp32 weights + autocast's
16-bit copies, fp32 gradients and optimizer state on every GPU; DeepSpeed ZeRO-1 keeps 16-bit
weights and gradients whole and shards the fp32 master weights and the optimizer state (4P + 12P/N
bytes with Adam), ZeRO-2 also the 16-bit gradients (2P + 14P/N + the reduce bucket), each with the
fp32 gradient partition during the step; ZeRO-3 shards all of it (16P/N + one sub-group's fp32
gradient at the step), FSDP too (fp32 sharded parameters and gradients + state: 16P/N, plus two
gathered units in the compute precision).
Adapters (LoRA/QLoRA) keep the frozen base in its storage precision (int4: 0.5 byte + block scales)
and train only the adapter matrices. Inference holds weights, the KV cache and one layer's
transient activations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slurm_liquid.estimate.activations import (  # noqa: F401 (re-exported: the prior's public names)
    DEFAULT_TARGETS, MIB, QUANT_BYTES, Layout, activation_bytes, kv_cache_bytes, layout, lora_modules,
    torch_version)
from slurm_liquid.estimate.catalog import ModelEntry
from slurm_liquid.estimate.resolve import resolve, resolve_entry, synthetic_entry  # noqa: F401
from slurm_liquid.jobspec import JobSpec

CONTEXT_MIB = 800          # CUDA context + cuBLAS/cuDNN handles with lazy module loading (CUDA >= 11.7)
ALLOCATOR_SLACK = 0.10     # caching-allocator rounding and fragmentation over live tensors
BACKWARD_TEMP = 0.10       # activation gradients in flight, as a share of saved activations

# bytes per parameter: (weights, gradients) by precision; mixed keeps fp32 master weights and
# autocast's 16-bit weight copies, and fp32 gradients on the fp32 parameters.
PRECISION_BYTES = {"fp32": (4.0, 4.0), "fp16": (6.0, 4.0), "amp": (6.0, 4.0), "bf16": (6.0, 4.0),
                   "bf16-pure": (2.0, 2.0), "fp8": (6.0, 4.0)}
# optimizer state in fp32 values per parameter
OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "lamb": 2, "sgd": 0, "sgd-momentum": 1, "rmsprop": 1,
                    "adagrad": 1, "lion": 1, "adafactor": 0.02, "adam8bit": 0.5, "adam4bit": 0.25}
# (Adam/AdamW/RMSprop/Adagrad measured on torch 2.13 foreach kernels by
# benchmarks/estimate/optimizer_temporaries.py, independently of any model; the others by analogy)
OPTIMIZER_TEMP = {"adam": 1.15, "adamw": 1.15, "rmsprop": 0.9, "adagrad": 0.9, "lamb": 2, "lion": 1,
                  "adam8bit": 0.5}
LORA_RANK = 16
# bytes of one optimizer-state value by `optimizer-states=` (8-bit: one fp32 absmax per block of 2048)
STATE_BYTES = {"fp32": 4.0, "bf16": 2.0, "8bit": 1.0 + 4 / 2048}
QUANTIZED_OPTIMIZERS = ("adam8bit", "adam4bit")   # their OPTIMIZER_STATES already count fp32-equivalents
ZERO3_LIVE_PARAMS = 1e9    # DeepSpeed stage3_max_live_parameters default: unsharded parameters at once
ZERO3_SUB_GROUP = 1e9      # DeepSpeed sub_group_size default: parameters stepped at once
ZERO_BUCKET = 5e8 * 2      # DeepSpeed reduce_bucket_size default (5e8 elements), 16-bit


@dataclass(frozen=True)
class Breakdown:
    """Bytes per GPU; `micro_batch` is the per-GPU batch of one forward/backward."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    temporaries: float
    context: float
    slack: float
    micro_batch: int
    gpus: int
    sharding: str
    kv_cache: float = 0.0        # part of `activations` (inference: keys and values of the context)
    host: float = 0.0            # offloaded to host memory (states, master weights, activations): not on the GPU

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def tensors(self) -> float:
        return self.model_states + self.activations + self.temporaries

    @property
    def total(self) -> float:
        return self.tensors + self.slack + self.context

    def for_measure(self, measure: str) -> float:
        """The part comparable with a measurement of kind `measure`."""
        return {"tensor": self.tensors, "allocated": self.tensors,
                "reserved": self.tensors + self.slack, "nvml": self.total}[measure]

    def scaled(self, factor: float) -> "Breakdown":
        """Learned correction or risk margin: scales what the analytic terms may miss (not the fixed
        context), the offloaded states in host memory alike."""
        return replace(self, weights=self.weights * factor, gradients=self.gradients * factor,
                       optimizer=self.optimizer * factor, activations=self.activations * factor,
                       temporaries=self.temporaries * factor, slack=self.slack * factor,
                       kv_cache=self.kv_cache * factor, host=self.host * factor)

    def as_mib(self) -> dict[str, int]:
        keys = ("weights", "gradients", "optimizer", "activations", "temporaries", "slack", "context")
        return {k: int(math.ceil(getattr(self, k) / MIB)) for k in keys}



def micro_batch(spec: JobSpec, gpus: int, model_parallel: int = 1) -> int:
    """The per-GPU batch: as the script fixes it (micro-batch), else the global batch split over
    the data-parallel GPUs and accumulation steps."""
    if spec.micro_batch:
        return spec.micro_batch
    batch = spec.batch_size or 1
    data_parallel = max(1, gpus // max(1, model_parallel))
    return max(1, math.ceil(batch / (data_parallel * (spec.grad_accum or 1))))


def adapter_params(entry: ModelEntry, rank: int, targets: tuple[str, ...] = DEFAULT_TARGETS) -> float:
    """LoRA matrices A (rank x in) and B (out x rank) on the target modules of every layer
    (default: the query and value projections)."""
    return (entry.layers or 12) * rank * sum(count * (width + out) for width, out, count in
                                             lora_modules(entry, targets))


def state_bytes(spec: JobSpec, optimizer: str, compute: str) -> float:
    """Bytes of one optimizer-state value: as said, else the parameters' own precision (torch
    optimizers keep states in the parameter dtype: 16-bit under bf16-pure, fp32 masters otherwise)."""
    if optimizer in QUANTIZED_OPTIMIZERS:
        return 4.0
    if spec.optimizer_states:
        return STATE_BYTES[spec.optimizer_states]
    return 2.0 if compute == "bf16-pure" else 4.0


def _largest_param(entry: ModelEntry) -> float:
    """Parameters of the largest single tensor: the embedding / LM head or an MLP matrix."""
    h = entry.hidden or (entry.params / 12) ** 0.5
    return max((entry.vocab or 0) * h, (entry.ffn or 4 * h) * h, 1.0)


def _embedding_params(entry: ModelEntry) -> float:
    """Embedding and LM head: kept in 16 bits when the base is quantized."""
    return (entry.vocab or 0) * (entry.hidden or 0) * (1 if entry.tied else 2)


def breakdown(entry: ModelEntry, spec: JobSpec, gpus: int = 1, sharding: str | None = None,
              context_mib: float = CONTEXT_MIB) -> Breakdown:
    """The prior for one GPU of a job on `gpus` GPUs (data parallel x tp x pp x sp)."""
    lay = layout(entry, spec)
    compute = lay.compute
    optimizer = spec.optimizer or "adamw"
    sharding = sharding or spec.sharding or "none"
    n = max(1, gpus)
    dp = max(1, n // lay.model_parallel)            # ZeRO/FSDP shard over the data-parallel group
    params = float(entry.params) / (lay.tp * lay.pp)
    value_bytes = state_bytes(spec, optimizer, compute)
    states_per_param = OPTIMIZER_STATES[optimizer] * value_bytes
    temp_per_param = OPTIMIZER_TEMP.get(optimizer, 0) * value_bytes
    layers = max(entry.layers or 0, 8)
    compute_bytes = 4.0 if compute == "fp32" else 2.0
    # ZeRO-3/FSDP: the unit in use + the prefetched one, at most the live parameters DeepSpeed allows
    unsharded = 2 * params / layers
    live = spec.live_params or (ZERO3_LIVE_PARAMS if sharding == "zero3" else None)
    gathered = min(unsharded, live / (lay.tp * lay.pp) if live else unsharded) * compute_bytes
    offload = spec.offload or "none"
    copies = host = 0.0
    if lay.inference or lay.adapter:
        # frozen base in its storage precision; int8/int4 keep embeddings and the head in 16 bits
        if lay.quant:
            emb = min(_embedding_params(entry) / (lay.tp * lay.pp), params)
            # PEFT's prepare_model_for_kbit_training casts every 16-bit parameter (embeddings, head,
            # norms) of a quantized model to fp32
            weights = (params - emb) * QUANT_BYTES[lay.quant] + emb * (4.0 if spec.kbit_prep else 2.0)
        else:
            weights = params * ({"fp32": 4.0, "fp8": 1.0 if lay.inference else 2.0}.get(compute, 2.0))
        if sharding in ("zero3", "fsdp"):
            weights = weights / dp + gathered
        if offload == "params":
            weights = gathered
        grads = states = step_temp = 0.0
        if lay.adapter and not lay.inference:
            trained = adapter_params(entry, spec.rank or LORA_RANK, lay.targets) / (lay.tp * lay.pp)
            adapter_bytes = state_bytes(spec, optimizer, "fp32")   # adapters train in fp32
            weights += 4.0 * trained
            grads = 4.0 * trained
            states = trained * OPTIMIZER_STATES[optimizer] * adapter_bytes
            step_temp = trained * OPTIMIZER_TEMP.get(optimizer, 0) * adapter_bytes
            if offload != "none":
                host += states
                states = step_temp = 0.0
    else:
        w_bytes, g_bytes = PRECISION_BYTES.get(compute, (6.0, 4.0))
        weights, grads = params * w_bytes, params * g_bytes
        states, step_temp = params * states_per_param, params * temp_per_param
        if sharding in ("zero1", "zero2"):
            states, step_temp = states / dp, step_temp / dp
            if lay.mixed:
                # DeepSpeed: 16-bit weights whole, fp32 master and optimizer state sharded; the 16-bit
                # gradients whole (ZeRO-1) or only this rank's partition + the reduce bucket (ZeRO-2);
                # the fp32 copy of the gradient partition exists during the step only
                weights = 2 * params + 4 * params / dp
                grads = 2 * params if sharding == "zero1" else 2 * params / dp + min(2 * params, ZERO_BUCKET)
                step_temp += 4 * params / dp
        elif sharding == "zero3":
            states, step_temp = states / dp, step_temp / dp
            if lay.mixed:
                # 16-bit + fp32 master partitions, the 16-bit gradient partition (16P/N with Adam, as the
                # ZeRO paper counts); the step runs one optimizer sub-group at a time: that group's fp32
                # gradient and the optimizer's temporaries exist for it only
                weights, grads = 6 * params / dp + gathered, 2 * params / dp
                step_temp = (temp_per_param + 4) * min(ZERO3_SUB_GROUP, params / dp)
            else:
                weights, grads = w_bytes * params / dp + gathered, g_bytes * params / dp
        elif sharding == "fsdp":                    # sharded fp32 (or bf16-pure) parameters and gradients
            master = 2.0 if compute == "bf16-pure" else 4.0
            weights, grads = master * params / dp + gathered, master * params / dp
            states, step_temp = states / dp, step_temp / dp
        elif lay.mixed:
            copies = params * (w_bytes - 4.0)       # autocast's 16-bit copies, freed by backward
        if spec.optimizer_in_backward:
            # each parameter is stepped as soon as its gradient is ready and the gradient freed:
            # at most the largest tensor's gradient (and its step temporaries) exists at once
            share = min(1.0, _largest_param(entry) / (lay.tp * lay.pp) / params)
            grads, step_temp = grads * share, step_temp * share
        if offload != "none":                       # optimizer state, fp32 master and its gradients on the CPU
            shard = params / dp if sharding != "none" else params
            host += states + (4.0 + 4.0) * shard + (2.0 * shard if offload == "params" else 0.0)
            states = step_temp = 0.0
            if sharding in ("zero3", "fsdp"):
                weights = (2.0 if lay.mixed else 4.0) * params / dp + gathered
                grads = (2.0 if lay.mixed else 4.0) * params / dp
            elif lay.mixed:                         # ZeRO-Offload: reduced gradients go to the CPU
                weights = 2 * params
                grads = min(2 * params, ZERO_BUCKET) if sharding == "zero2" else 2 * params
            if offload == "params":
                weights, grads = gathered, gathered
    mb = micro_batch(spec, n, lay.model_parallel)
    acts = activation_bytes(entry, spec, mb, lay)
    if lay.offload_acts:
        host += activation_bytes(entry, spec, mb, replace(lay, offload_acts=False)) - acts
    kv_cache = kv_cache_bytes(entry, spec, mb, lay)
    # peak = master states + max(copies + activations + backward temporaries, step temporaries)
    temporaries = max(BACKWARD_TEMP * acts, step_temp - acts - copies)
    if lay.quant in ("int4", "int8") and entry.is_transformer:
        # (GPTQ/AWQ kernels dequantize tile by tile inside the matmul: no whole 16-bit copy)
        # bitsandbytes dequantizes a quantized weight to 16 bits for each matmul over many tokens:
        # the largest one (LM head or MLP matrix) exists once more, transiently
        largest = max((entry.vocab or 0) * entry.hidden, (entry.ffn or 4 * entry.hidden) * entry.hidden)
        temporaries += 2.0 * largest / lay.tp
    tensors = weights + grads + states + acts + kv_cache + temporaries
    return Breakdown(weights=weights, gradients=grads, optimizer=states, activations=acts + kv_cache,
                     temporaries=temporaries, context=context_mib * MIB, slack=ALLOCATOR_SLACK * tensors,
                     micro_batch=mb, gpus=n, sharding=sharding, kv_cache=kv_cache, host=host)


