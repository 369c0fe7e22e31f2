"""Analytic memory prior: the per-GPU peak a training step needs, broken down by what holds it.

peak tensors = weights + gradients + optimizer state
               + max(activations + backward temporaries, optimizer-step temporaries)
(the 16-bit weight copies of mixed precision, part of `weights`, live from forward to backward
only: the optimizer-step branch does not stack on them)
per-GPU need = CUDA context + tensors x (1 + allocator slack)

Activations: convolutional/vision models scale a measured per-sample coefficient (catalogue) with
micro-batch and pixel count; transformers use the per-layer formula of Korthikanti et al. (2022,
"Reducing Activation Recomputation in Large Transformer Models"): per layer and sample,
s*h*34 + 5*a*s^2 bytes in 16-bit with dropout; terms are rebuilt here from hidden, ffn, heads so
that fp32, gated MLPs, fused attention and checkpointing change only the terms they change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.catalog import Catalog, ModelEntry
from slurm_liquid.jobspec import JobSpec

MIB = 2 ** 20
CONTEXT_MIB = 800          # CUDA context + cuBLAS/cuDNN handles with lazy module loading (CUDA >= 11.7)
ALLOCATOR_SLACK = 0.10     # caching-allocator rounding and fragmentation over live tensors
BACKWARD_TEMP = 0.10       # activation gradients in flight, as a share of saved activations

# bytes per parameter: (weights, gradients) by precision; mixed keeps fp32 master weights and
# autocast's 16-bit weight copies, and fp32 gradients on the fp32 parameters.
PRECISION_BYTES = {"fp32": (4.0, 4.0), "fp16": (6.0, 4.0), "amp": (6.0, 4.0), "bf16": (6.0, 4.0),
                   "bf16-pure": (2.0, 2.0)}
# optimizer state in fp32 values per parameter
OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "lamb": 2, "sgd": 0, "sgd-momentum": 1, "rmsprop": 1,
                    "adagrad": 1, "lion": 1, "adafactor": 0.02, "adam8bit": 0.5}
# (Adam/AdamW/RMSprop/Adagrad measured on torch 2.13 foreach kernels by
# benchmarks/estimate/optimizer_temporaries.py, independently of any model; the others by analogy)
OPTIMIZER_TEMP = {"adam": 1.15, "adamw": 1.15, "rmsprop": 0.9, "adagrad": 0.9, "lamb": 2, "lion": 1,
                  "adam8bit": 0.5}
CHECKPOINT_CNN = 0.35      # share of activations kept with checkpointing (sqrt(n)-style segments)
DEFAULT_ACT_BYTES = {"cnn": 60 * MIB, "vit": 70 * MIB, "detection": 300 * MIB, "rnn": 150 * MIB,
                     "recsys": 8e3}


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
        """Learned correction: scales what the analytic terms miss (not the fixed context)."""
        return replace(self, weights=self.weights * factor, gradients=self.gradients * factor,
                       optimizer=self.optimizer * factor, activations=self.activations * factor,
                       temporaries=self.temporaries * factor, slack=self.slack * factor)

    def as_mib(self) -> dict[str, int]:
        keys = ("weights", "gradients", "optimizer", "activations", "temporaries", "slack", "context")
        return {k: int(math.ceil(getattr(self, k) / MIB)) for k in keys}


def synthetic_entry(spec: JobSpec) -> ModelEntry:
    """An uncatalogued model from `params` + `family`: typical shape for that size."""
    if not spec.params:
        raise UsageError("model: give a catalogued model name, or params=<count> with family=<...>")
    family = spec.family or "decoder"
    name = spec.model or f"custom-{family}-{spec.params}"
    if family in ("encoder", "decoder", "seq2seq"):
        # P ~= 12 L h^2 with the common aspect ratio h ~= 100 L
        # continuous shape (no rounding) so that memory grows smoothly with the parameter count
        hidden = (spec.params * 100 / 12) ** (1 / 3)
        layers = spec.params / (12 * hidden * hidden)
        return ModelEntry(name, family, spec.params, layers=layers, hidden=hidden, heads=hidden / 64,
                          ffn=4 * hidden, vocab=50257, seq_len=2048 if family == "decoder" else 512,
                          lm_head=family != "encoder", flash=family == "decoder",
                          notes="shape guessed from the parameter count; decoders (LLMs) "
                                "assumed to use fused attention")
    return ModelEntry(name, family, spec.params, act_bytes=DEFAULT_ACT_BYTES[family],
                      image_size=224, seq_len=1000 if family == "rnn" else 1,
                      act_source="family default (model not in the catalogue)")


def _transformer_layer_bytes(entry: ModelEntry, seq: int, precision: str, checkpointing: bool) -> float:
    """Activation bytes per sample for all layers (+ LM head logits).

    Mixed precision (autocast) is not simply half of fp32: layer norms and softmax run in fp32,
    so their outputs are saved in fp32 and again as the 16-bit copy the next matmul consumes.
    """
    h, f, a, s = entry.hidden, entry.ffn or 4 * entry.hidden, entry.heads or max(1, entry.hidden // 64), seq
    mixed = precision in ("fp16", "bf16", "amp")
    wide = 4.0 if precision == "fp32" else 2.0       # bytes of one matmul activation
    dropout = not entry.gated_mlp                    # llama-style models train without dropout
    attention = 5 * h * wide                         # QKV input, Q, K, V, projection input
    mlp = h * wide + (4 * f if entry.gated_mlp else 2 * f) * wide
    norms = 2 * h * (wide + 4.0 if mixed else wide)
    masks = 2 * h if dropout else 0                  # 1-byte dropout masks
    if entry.flash:
        scores = 0.0
    elif mixed:                                      # fp32 softmax (+ fp32 dropout) + 16-bit copy
        scores = a * s * ((9.0 if dropout else 4.0) + 2.0)
    else:
        scores = a * s * (2 * wide + (1 if dropout else 0) if dropout else wide)
    per_layer = s * (attention + mlp + norms + masks + scores)
    if entry.family == "seq2seq":
        per_layer *= 1.15                            # decoder layers add cross-attention
    if checkpointing:
        stored = entry.layers * s * h * wide + per_layer  # each layer's input + one layer recomputed
    else:
        stored = entry.layers * per_layer
    logits = 12.0 * s * entry.vocab if entry.lm_head else 0.0  # logits, fp32 log-softmax, its grad
    return stored * entry.act_scale + logits


def activation_bytes(entry: ModelEntry, spec: JobSpec, micro_batch: int) -> float:
    precision = spec.precision or "fp32"
    half = precision != "fp32"
    checkpointing = bool(spec.checkpointing)
    if entry.is_transformer:
        seq = spec.seq_len or entry.seq_len
        return micro_batch * _transformer_layer_bytes(entry, seq, precision, checkpointing)
    per_sample = entry.act_bytes or DEFAULT_ACT_BYTES.get(entry.family, 60 * MIB)
    if entry.family in ("cnn", "vit", "detection"):
        side = spec.image_size or entry.image_size
        per_sample *= (side / entry.image_size) ** 2
    elif entry.family == "rnn":
        per_sample *= (spec.seq_len or entry.seq_len) / entry.seq_len
    if half:
        per_sample *= 0.55                           # 16-bit activations; a few stay fp32 under autocast
    if checkpointing:
        per_sample *= CHECKPOINT_CNN
    return micro_batch * per_sample


def micro_batch(spec: JobSpec, gpus: int) -> int:
    batch = spec.batch_size or 1
    return max(1, math.ceil(batch / (gpus * (spec.grad_accum or 1))))


def breakdown(entry: ModelEntry, spec: JobSpec, gpus: int = 1, sharding: str | None = None,
              context_mib: float = CONTEXT_MIB) -> Breakdown:
    """The prior for one GPU of a data-parallel job on `gpus` GPUs."""
    precision = spec.precision or "fp32"
    optimizer = spec.optimizer or "adamw"
    sharding = sharding or spec.sharding or "none"
    w_bytes, g_bytes = PRECISION_BYTES[precision]
    state_bytes = 2.0 if precision == "bf16-pure" else 4.0
    params = float(entry.params)
    weights, grads = params * w_bytes, params * g_bytes
    states = params * OPTIMIZER_STATES[optimizer] * state_bytes
    step_temp = params * OPTIMIZER_TEMP.get(optimizer, 0) * state_bytes
    n = max(1, gpus)
    if sharding in ("zero1", "zero2", "zero3", "fsdp"):
        states /= n
        step_temp /= n
    if sharding in ("zero2", "zero3", "fsdp"):
        grads /= n
    if sharding in ("zero3", "fsdp"):
        # own shard of the master weights + two layers gathered in the compute precision
        layers = max(entry.layers or 0, 8)
        compute_bytes = 4.0 if precision == "fp32" else 2.0
        weights = params * min(w_bytes, 4.0) / n + 2 * params / layers * compute_bytes
    # autocast's 16-bit weight copies are saved for backward and freed by it: gone at the step
    mixed = precision in ("fp16", "amp", "bf16") and sharding not in ("zero3", "fsdp")
    copies = params * (w_bytes - 4.0) if mixed else 0.0
    mb = micro_batch(spec, n)
    acts = activation_bytes(entry, spec, mb)
    # peak = master states + max(copies + activations + backward temporaries, step temporaries)
    temporaries = max(BACKWARD_TEMP * acts, step_temp - acts - copies)
    tensors = weights + grads + states + acts + temporaries
    return Breakdown(weights=weights, gradients=grads, optimizer=states, activations=acts,
                     temporaries=temporaries, context=context_mib * MIB, slack=ALLOCATOR_SLACK * tensors,
                     micro_batch=mb, gpus=n, sharding=sharding)


def resolve_entry(spec: JobSpec, catalog: Catalog) -> ModelEntry:
    """The catalogue entry of spec.model (params/family from the spec override it), or a synthetic
    entry from params + family; an unknown name without params is a UsageError with close matches."""
    entry = catalog.find(spec.model) if spec.model else None
    if entry is None:
        if spec.model and not spec.params:
            try:
                catalog.lookup(spec.model)  # raises with close matches
            except UsageError as exc:
                where = spec.sources.get("model")
                raise UsageError(f"{exc} (model from {where})" if where else str(exc)) from None
        return synthetic_entry(spec)
    if spec.params and spec.params != entry.params:
        entry = replace(entry, params=spec.params)
    if spec.family and spec.family != entry.family:
        raise UsageError(f"family: {spec.family} conflicts with the catalogue's {entry.family} "
                         f"for {entry.name}")
    return entry
