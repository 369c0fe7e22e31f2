"""Analytic memory prior: the per-GPU peak a training step (or an inference job) needs, broken
down by what holds it.

peak tensors = weights + gradients + optimizer state
               + max(activations + backward temporaries, optimizer-step temporaries)
(the 16-bit weight copies of mixed precision, part of `weights`, live from forward to backward
only: the optimizer-step branch does not stack on them)
per-GPU need = CUDA context + tensors x (1 + allocator slack)

Activations: convolutional/vision models scale a measured per-sample coefficient (catalogue) with
micro-batch and pixel count; transformers use the per-layer formula of Korthikanti et al. (2022,
"Reducing Activation Recomputation in Large Transformer Models"): per layer and sample,
s*h*34 + 5*a*s^2 bytes in 16-bit with dropout; terms are rebuilt here from hidden, ffn, heads,
kv-heads and experts so that fp32/fp8, gated MLPs, the attention kernel, tensor/sequence/pipeline
parallelism and checkpointing change only the terms they change.

Model states follow the layout each framework really has: DDP keeps fp32 weights + autocast's
16-bit copies, fp32 gradients and optimizer state on every GPU; DeepSpeed ZeRO-1/2 keeps 16-bit
weights and gradients whole and shards the fp32 master weights, an fp32 gradient partition and the
optimizer state (4P + 16P/N bytes with Adam); ZeRO-3 shards all of it (20P/N), FSDP too (fp32
sharded parameters and gradients + state: 16P/N, plus two gathered units in the compute precision).
Adapters (LoRA/QLoRA) keep the frozen base in its storage precision (int4: 0.5 byte + block scales)
and train only the adapter matrices. Inference holds weights, the KV cache and one layer's
transient activations.
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
                   "bf16-pure": (2.0, 2.0), "fp8": (6.0, 4.0)}
# optimizer state in fp32 values per parameter
OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "lamb": 2, "sgd": 0, "sgd-momentum": 1, "rmsprop": 1,
                    "adagrad": 1, "lion": 1, "adafactor": 0.02, "adam8bit": 0.5, "adam4bit": 0.25}
# (Adam/AdamW/RMSprop/Adagrad measured on torch 2.13 foreach kernels by
# benchmarks/estimate/optimizer_temporaries.py, independently of any model; the others by analogy)
OPTIMIZER_TEMP = {"adam": 1.15, "adamw": 1.15, "rmsprop": 0.9, "adagrad": 0.9, "lamb": 2, "lion": 1,
                  "adam8bit": 0.5}
CHECKPOINT_CNN = 0.35      # share of activations kept with checkpointing (sqrt(n)-style segments)
# bitsandbytes: NF4 + one fp32 absmax per 64 weights; GPTQ/AWQ: packed 4-bit weights, and per group
# of 128 input channels one fp16 scale and one packed 4-bit zero point per output channel
QUANT_BYTES = {"int8": 1.0, "int4": 0.5 + 4 / 64, "gptq": 0.5 + (2 + 0.5) / 128}
INFERENCE_CNN = 0.15       # eval forward of a CNN: a few live feature maps of the saved-for-backward set
LORA_RANK = 16
LORA_TARGETS = 2           # PEFT's and LitGPT's default targets: the query and value projections
KV_BYTES = {"fp32": 4.0, "fp8": 1.0}
# PyTorch releases that saved different tensors for backward (spec key torch=; default: current).
# Until 1.10 autocast ran GELU in fp32 (pytorch/pytorch#59639 took it off the fp32 list): the MLP
# saved GELU's fp32 input (4 bytes per element) where it now saves the 16-bit one. Since 1.10,
# in-place hardtanh/ReLU6 saves a copy of its input (pytorch/pytorch#62329, #95432): the
# catalogue's coefficients, counted on a current PyTorch, hold that copy (`inplace_copy_bytes`).
GELU_FP32_BEFORE = (1, 10)
INPLACE_COPY_SINCE = (1, 10)
# families whose MLP calls torch's gelu op: torchvision/timm ViT, DeiT, Swin (nn.GELU) and
# BERT-style encoders (hidden_act "gelu"); GPT-2's gelu_new is a tanh formula, T5 uses ReLU
GELU_FAMILIES = ("vit", "encoder")
# MLP activations that transformers writes as a chain of Python tensor ops (each op saves its own
# inputs for backward) rather than one fused kernel: NewGELUActivation (GPT-2's `gelu_new`)
PYTHON_GELUS = ("gelu_new",)
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
    kv_cache: float = 0.0        # part of `activations` (inference: keys and values of the context)

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
    """An uncatalogued model from `params` + `family`, or from shape directives."""
    family = spec.family or "decoder"
    if spec.layers and spec.hidden and family in ("encoder", "decoder", "seq2seq", "vit"):
        from slurm_liquid.estimate.shape import with_shape

        gated = family == "decoder"
        base = ModelEntry(spec.model or f"custom-{family}", family, spec.params or 1, layers=spec.layers,
                          hidden=spec.hidden, heads=spec.heads or max(1, spec.hidden // 64),
                          ffn=spec.intermediate or (8 / 3 if gated else 4) * spec.hidden,
                          vocab=spec.vocab or (0 if family == "vit" else 32000), gated_mlp=gated,
                          lm_head=family in ("decoder", "seq2seq"), tied=family != "decoder",
                          seq_len=2048 if family == "decoder" else 512, patch_size=16 if family == "vit" else 0,
                          attention="eager" if family == "seq2seq" else "sdpa",
                          # ViT recipes (torchvision, timm/DeiT, HF configs) train with dropout 0
                          dropout=False if family == "vit" else None,
                          notes="shape from directives")
        return with_shape(base, spec)
    if not spec.params:
        raise UsageError("model: give a catalogued model name, hf-config=<config.json>, shape directives "
                         "(layers= hidden= ...), or params=<count> with family=<...>")
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


@dataclass(frozen=True)
class Layout:
    """How the job runs, from the spec: precision split into compute and base-weight storage."""

    compute: str               # fp32, fp16/amp/bf16 (autocast), bf16-pure, fp8
    quant: str | None          # int8/int4 frozen base weights
    adapter: str | None        # lora/qlora
    inference: bool
    attention: str             # eager, sdpa, flash
    tp: int
    pp: int
    sp: int
    torch: tuple[int, ...] = ()  # the job's PyTorch (major, minor); () = current

    def torch_before(self, version: tuple[int, int]) -> bool:
        return bool(self.torch) and self.torch[:2] < version

    @property
    def mixed(self) -> bool:
        return self.compute in ("fp16", "amp", "bf16", "fp8")

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica spans (sp=tp is Megatron's sequence parallelism on the same GPUs)."""
        return self.tp * self.pp * (1 if self.sp == self.tp else self.sp)


def torch_version(spec: JobSpec) -> tuple[int, ...]:
    """The job's PyTorch as (major, minor[, patch]); () when not said (current)."""
    return tuple(int(part) for part in spec.torch.split(".")) if spec.torch else ()


def layout(entry: ModelEntry, spec: JobSpec) -> Layout:
    precision = spec.precision or "fp32"
    adapter = spec.adapter if spec.adapter not in (None, "none") else None
    inference = spec.mode == "inference"
    quant = precision if precision in QUANT_BYTES else ("int4" if adapter == "qlora" else None)
    if quant and not (adapter or inference):
        raise UsageError(f"precision: {precision} stores frozen base weights quantized; full training "
                         "needs floating-point weights: add adapter=lora|qlora, or mode=inference")
    compute = "bf16-pure" if precision in QUANT_BYTES else precision
    if spec.offload == "params" and (spec.sharding or "none") not in ("zero3", "fsdp"):
        raise UsageError("offload: params are offloaded by ZeRO-3 or FSDP only: add sharding=zero3 or fsdp "
                         "(or offload=optimizer)")
    return Layout(compute, quant, adapter, inference, spec.attention or entry.default_attention,
                  spec.tp or 1, spec.pp or 1, spec.sp or 1, torch_version(spec))


def _attention_dims(entry: ModelEntry) -> tuple[float, float, float]:
    heads = entry.heads or max(1, entry.hidden // 64)
    head_dim = entry.head_dim or entry.hidden / heads
    return heads, heads * head_dim, (entry.kv_heads or heads) * head_dim


def _python_gelu_extra(lay: Layout, wide: float) -> float:
    """Bytes per MLP-intermediate element that transformers' NewGELUActivation (`gelu_new`, GPT-2:
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))) saves beyond a fused gelu, which
    saves only its input (`f * wide`; the down projection's input, `f * lin`, is common to both).

    The chain saves pow's input, tanh's output, (1 + tanh) and 0.5 * x for the final product. Under
    autocast pow is on the fp32 list, so its input is an fp32 copy of x (and x itself is saved by
    nobody) and everything after it up to the product is promoted to fp32; only 0.5 * x stays 16-bit:
    4 + 4 + 4 + wide - wide = 12 bytes more. In fp32 or pure 16-bit every tensor has the compute
    width and pow saves x itself: three tensors more, 3 * wide."""
    if lay.mixed and lay.compute != "fp8":
        return 3 * 4.0
    return 3 * wide


def _eager_probs_bytes(entry: ModelEntry, dropout: bool) -> float:
    """Bytes per attention-score element saved by eager attention under autocast (mixed precision).

    softmax is on autocast's fp32 list and saves its fp32 output (4) for its backward. Without
    dropout the probabilities-times-values matmul saves the 16-bit copy it casts to (2): 6 bytes.
    With dropout, models that cast the probabilities to the compute dtype first (`downcasts_probs`)
    keep the 1-byte mask and the 16-bit dropout output the matmul consumes: 4 + 1 + 2 = 7 (the cast
    before the dropout is saved by nobody); models that drop out the fp32 probabilities (BERT, T5)
    keep the fp32 dropout output as well before the matmul's 16-bit copy: 4 + 1 + 4 + 2 = 11."""
    if not dropout:
        return 4.0 + 2.0
    return 4.0 + 1.0 + 2.0 if entry.downcasts_probs else 4.0 + 1.0 + 4.0 + 2.0


def _layer_bytes(entry: ModelEntry, lay: Layout, s: float, h: float, heads: float, q: float, kv: float,
                 score_len: float) -> tuple[float, float]:
    """(replicated, tensor-parallel) activation bytes per token of one layer saved for backward.

    Mixed precision (autocast) is not simply half of fp32: layer norms and softmax run in fp32,
    so their outputs are saved in fp32 and again as the 16-bit copy the next matmul consumes.
    FP8 saves the inputs of the linear layers in 8 bits."""
    wide = 4.0 if lay.compute == "fp32" else 2.0
    lin = 1.0 if lay.compute == "fp8" else wide    # inputs of linear layers
    dropout = entry.trains_with_dropout and not lay.inference
    f = entry.ffn or 4 * h
    experts_per_token = entry.top_k if entry.experts > 1 else 1
    mlp = (3 * f * wide + f * lin) if entry.gated_mlp else (f * wide + f * lin)
    if entry.activation in PYTHON_GELUS and not entry.gated_mlp:
        mlp += f * _python_gelu_extra(lay, wide)
    if (lay.mixed and lay.compute != "fp8" and not entry.gated_mlp and entry.family in GELU_FAMILIES
            and lay.torch_before(GELU_FP32_BEFORE)):
        mlp += f * (4.0 - wide)                     # GELU's input saved in fp32 (old autocast)
    mlp = mlp * experts_per_token + (4 * entry.shared_ffn * wide if entry.shared_ffn else 0)
    if entry.experts > 1:
        mlp += entry.experts * 4.0                  # router logits (fp32)
    parallel = (q + 2 * kv) * wide + q * lin + mlp  # Q, K, V; out-projection input; MLP
    if lay.attention == "eager":
        if lay.mixed:
            parallel += heads * score_len * _eager_probs_bytes(entry, dropout)
        else:
            parallel += heads * score_len * (2 * wide + 1 if dropout else wide)
    else:
        parallel += heads * 4.0                     # the kernel's log-sum-exp per query and head
    blocks = 1 if entry.shared_norm else 2          # Phi: attention and MLP read one norm's output
    if lay.mixed and lay.compute != "fp8":
        norm_in = wide + 4.0
    elif lay.compute == "bf16-pure" and entry.gated_mlp:
        # RMSNorm of the gated-MLP families (Llama, Mistral, Qwen, Gemma, T5 v1.1) upcasts in HF and
        # LitGPT: the fp32 copy of its input is what is saved (nn.LayerNorm saves its 16-bit input)
        norm_in = 4.0
    else:
        norm_in = wide
    replicated = blocks * h * lin + blocks * h * norm_in
    if lay.adapter and not lay.quant and not lay.inference:
        # a frozen 16-bit linear saves nothing for its own (absent) weight gradient: the norm outputs
        # and the out-/down-projection inputs are not kept (bitsandbytes' 4- and 8-bit matmuls of a
        # quantized base, QLoRA, save their input regardless, so those keep them)
        replicated -= blocks * h * lin
        parallel -= q * lin + (entry.ffn or 4 * h) * lin * experts_per_token
    if dropout:
        replicated += 2 * h                         # 1-byte dropout masks
    if lay.adapter:                                 # LoRA dropout's copy of each target's input + mask
        replicated += LORA_TARGETS * h * (wide + 1)
    return replicated, parallel


def _transformer_layer_bytes(entry: ModelEntry, seq: int, lay: Layout, checkpointing: bool,
                             accum: int) -> float:
    """Activation bytes per sample on one GPU for its layers (+ LM head logits)."""
    tp, sp = lay.tp, lay.sp
    split = tp if sp == tp else tp * sp             # what the tensor-parallel terms are divided by
    rep_split = tp if sp == tp and tp > 1 else sp   # replicated terms: only sequence parallelism splits them
    heads, q, kv = _attention_dims(entry)
    wide = 4.0 if lay.compute == "fp32" else 2.0
    if entry.stages:                                # Swin: stages of windowed attention
        window = (entry.window or 7) ** 2
        # each stage's MLP is mlp_ratio x its own width (the entry's ffn is the last stage's)
        mlp_ratio = entry.ffn / entry.hidden if entry.ffn and entry.hidden else 4.0
        stored, largest = 0.0, 0.0
        for i, (depth, dim, stage_heads) in enumerate(entry.stages):
            tokens = ((seq_side(entry, seq)) / 2 ** i) ** 2
            stage = replace(entry, hidden=dim, ffn=mlp_ratio * dim)
            rep, par = _layer_bytes(stage, lay, tokens, dim, stage_heads, dim, dim, window)
            layer = tokens * (rep + par)
            largest = max(largest, layer)
            stored += depth * (tokens * dim * wide if checkpointing else layer)
        return (stored + (largest if checkpointing else 0.0)) * entry.act_scale
    rep, par = _layer_bytes(entry, lay, seq, entry.hidden, heads, q, kv, seq / max(sp if sp != tp else 1, 1))
    per_layer = seq * (rep / rep_split + par / split)
    if entry.family == "seq2seq":
        per_layer *= 1.15                           # decoder layers add cross-attention
    layers = entry.layers / lay.pp
    if lay.pp > 1:                                  # 1F1B: the first stage holds pp micro-batches
        layers *= min(lay.pp, accum) if accum > 1 else lay.pp
    if lay.inference:                               # nothing is saved: one layer's transient tensors
        stored = per_layer
    elif checkpointing:
        stored = layers * seq * entry.hidden * wide / rep_split + per_layer  # layer inputs + one layer
    else:
        stored = layers * per_layer
    if not entry.lm_head:
        logits = 0.0
    elif lay.inference:
        logits = 8.0 * entry.vocab                  # the last position's logits (16-bit + fp32)
    else:
        logits = 12.0 * seq * entry.vocab / tp      # logits, fp32 log-softmax, its grad (vocab-parallel)
    return stored * entry.act_scale + logits


def seq_side(entry: ModelEntry, image_or_seq: int) -> float:
    """Patches per side of a hierarchical ViT at this image size."""
    return image_or_seq / (entry.patch_size or 4)


def activation_bytes(entry: ModelEntry, spec: JobSpec, micro_batch: int, lay: Layout | None = None) -> float:
    lay = lay or layout(entry, spec)
    checkpointing = bool(spec.checkpointing)
    if entry.is_transformer:
        if entry.family == "vit":
            side = spec.image_size or entry.image_size
            seq = side if entry.stages else int((side // (entry.patch_size or 16)) ** 2 + 1)
        else:
            seq = spec.seq_len or entry.seq_len
        return micro_batch * _transformer_layer_bytes(entry, seq, lay, checkpointing, spec.grad_accum or 1)
    per_sample = entry.act_bytes or DEFAULT_ACT_BYTES.get(entry.family, 60 * MIB)
    if entry.act_bytes and lay.torch_before(INPLACE_COPY_SINCE):
        per_sample -= entry.inplace_copy_bytes      # older PyTorch: in-place ReLU6 copied nothing
    if entry.family in ("cnn", "vit", "detection"):
        side = spec.image_size or entry.image_size
        per_sample *= (side / entry.image_size) ** 2
    elif entry.family == "rnn":
        per_sample *= (spec.seq_len or entry.seq_len) / entry.seq_len
    if lay.compute == "bf16-pure":
        per_sample *= 0.5                            # the whole model in 16 bits: every saved tensor halves
    elif lay.compute != "fp32":
        per_sample *= 0.55                           # 16-bit activations; a few stay fp32 under autocast
    if lay.inference:
        per_sample *= INFERENCE_CNN
    elif checkpointing:
        per_sample *= CHECKPOINT_CNN
    return micro_batch * per_sample


def kv_cache_bytes(entry: ModelEntry, spec: JobSpec, micro_batch: int, lay: Layout) -> float:
    """Keys and values of every layer for the stated context (inference of decoders)."""
    if not (lay.inference and entry.is_transformer and entry.family != "encoder" and entry.family != "vit"):
        return 0.0
    _, _, kv = _attention_dims(entry)
    seq = spec.seq_len or entry.seq_len
    per_token = 2 * entry.layers / lay.pp * kv / lay.tp * KV_BYTES.get(lay.compute, 2.0)
    return micro_batch * seq * per_token / (lay.sp if lay.sp != lay.tp else 1)


def micro_batch(spec: JobSpec, gpus: int, model_parallel: int = 1) -> int:
    """The per-GPU batch: as the script fixes it (micro-batch), else the global batch split over
    the data-parallel GPUs and accumulation steps."""
    if spec.micro_batch:
        return spec.micro_batch
    batch = spec.batch_size or 1
    data_parallel = max(1, gpus // max(1, model_parallel))
    return max(1, math.ceil(batch / (data_parallel * (spec.grad_accum or 1))))


def adapter_params(entry: ModelEntry, rank: int) -> float:
    """LoRA matrices on the default targets (query and value projections of every layer)."""
    _, q, kv = _attention_dims(entry)
    hidden = entry.hidden or (entry.params / 12) ** 0.5
    return (entry.layers or 12) * rank * ((hidden + q) + (hidden + kv))


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
    state_bytes = 2.0 if compute == "bf16-pure" else 4.0
    states_per_param = OPTIMIZER_STATES[optimizer] * state_bytes
    temp_per_param = OPTIMIZER_TEMP.get(optimizer, 0) * state_bytes
    layers = max(entry.layers or 0, 8)
    compute_bytes = 4.0 if compute == "fp32" else 2.0
    gathered = 2 * params / layers * compute_bytes  # ZeRO-3/FSDP: the unit in use + the prefetched one
    offload = spec.offload or "none"
    copies = 0.0
    if lay.inference or lay.adapter:
        # frozen base in its storage precision; int8/int4 keep embeddings and the head in 16 bits
        if lay.quant:
            emb = min(_embedding_params(entry) / (lay.tp * lay.pp), params)
            weights = (params - emb) * QUANT_BYTES[lay.quant] + emb * 2.0
        else:
            weights = params * ({"fp32": 4.0, "fp8": 1.0 if lay.inference else 2.0}.get(compute, 2.0))
        if sharding in ("zero3", "fsdp"):
            weights = weights / dp + gathered
        if offload == "params":
            weights = gathered
        grads = states = step_temp = 0.0
        if lay.adapter and not lay.inference:
            trained = adapter_params(entry, spec.rank or LORA_RANK) / (lay.tp * lay.pp)
            weights += 4.0 * trained                # adapters train in fp32
            grads = 4.0 * trained
            states = trained * OPTIMIZER_STATES[optimizer] * 4.0
            step_temp = trained * OPTIMIZER_TEMP.get(optimizer, 0) * 4.0
            if offload != "none":
                states = step_temp = 0.0
    else:
        w_bytes, g_bytes = PRECISION_BYTES.get(compute, (6.0, 4.0))
        weights, grads = params * w_bytes, params * g_bytes
        states, step_temp = params * states_per_param, params * temp_per_param
        if sharding in ("zero1", "zero2"):
            if lay.mixed:                           # DeepSpeed: 16-bit weights + grads whole; fp32 master,
                weights = 2 * params + 4 * params / dp      # fp32 gradient partition and state sharded
                grads = 2 * params + 4 * params / dp
            states, step_temp = states / dp, step_temp / dp
        elif sharding == "zero3":
            if lay.mixed:                           # 16-bit + fp32 copies of parameters and gradients
                weights, grads = 6 * params / dp + gathered, 6 * params / dp
            else:
                weights, grads = w_bytes * params / dp + gathered, g_bytes * params / dp
            states, step_temp = states / dp, step_temp / dp
        elif sharding == "fsdp":                    # sharded fp32 (or bf16-pure) parameters and gradients
            master = 2.0 if compute == "bf16-pure" else 4.0
            weights, grads = master * params / dp + gathered, master * params / dp
            states, step_temp = states / dp, step_temp / dp
        elif lay.mixed:
            copies = params * (w_bytes - 4.0)       # autocast's 16-bit copies, freed by backward
        if offload != "none":                       # optimizer state, fp32 master and its gradients on the CPU
            states = step_temp = 0.0
            if sharding in ("zero3", "fsdp"):
                weights = (2.0 if lay.mixed else 4.0) * params / dp + gathered
                grads = (2.0 if lay.mixed else 4.0) * params / dp
            elif lay.mixed:
                weights, grads = 2 * params, 2 * params
            if offload == "params":
                weights, grads = gathered, gathered
    mb = micro_batch(spec, n, lay.model_parallel)
    acts = activation_bytes(entry, spec, mb, lay)
    kv_cache = kv_cache_bytes(entry, spec, mb, lay)
    # peak = master states + max(copies + activations + backward temporaries, step temporaries)
    temporaries = max(BACKWARD_TEMP * acts, step_temp - acts - copies)
    if lay.quant and entry.is_transformer:
        # bitsandbytes dequantizes a quantized weight to 16 bits for each matmul over many tokens:
        # the largest one (LM head or MLP matrix) exists once more, transiently
        largest = max((entry.vocab or 0) * entry.hidden, (entry.ffn or 4 * entry.hidden) * entry.hidden)
        temporaries += 2.0 * largest / lay.tp
    tensors = weights + grads + states + acts + kv_cache + temporaries
    return Breakdown(weights=weights, gradients=grads, optimizer=states, activations=acts + kv_cache,
                     temporaries=temporaries, context=context_mib * MIB, slack=ALLOCATOR_SLACK * tensors,
                     micro_batch=mb, gpus=n, sharding=sharding, kv_cache=kv_cache)


def resolve(spec: JobSpec, catalog: Catalog) -> tuple[ModelEntry, list[str]]:
    """The model of `spec` and notes on how it was found: a catalogue entry (a generic family name
    resolves to its base member), a Hugging Face config.json, or shape directives; shape directives
    and params override the entry. An unknown name without a shape is a UsageError with close matches."""
    from slurm_liquid.estimate.shape import fields_from_hf_config, read_hf_config, with_shape

    notes: list[str] = []
    entry = catalog.find(spec.model) if spec.model else None
    if entry is not None and spec.model:
        base = catalog.generic_base(spec.model)
        if base:
            notes.append(f"model {spec.model!r} is a family: sized as its base member {base}; "
                         "name the member (or give its config.json) for a closer estimate")
    if spec.hf_config:
        fields = fields_from_hf_config(read_hf_config(spec.hf_config), spec.hf_config)
        name = spec.model or fields.get("name") or "hf-config"
        entry = ModelEntry(name=str(name), source=spec.hf_config, notes="shape from config.json",
                           **{k: v for k, v in fields.items() if k != "name"})
        notes.append(f"shape from {spec.hf_config}: {entry.layers:g} layers, hidden {entry.hidden:g}, "
                     f"{entry.params / 1e9:.2f}B parameters")
    if entry is None:
        if spec.model and not spec.params and not (spec.layers and spec.hidden):
            try:
                catalog.lookup(spec.model)  # raises with close matches
            except UsageError as exc:
                where = spec.sources.get("model")
                raise UsageError(f"{exc} (model from {where})" if where else str(exc)) from None
        return synthetic_entry(spec), notes
    entry = with_shape(entry, spec)
    if spec.torch and torch_version(spec)[:2] < min(GELU_FP32_BEFORE, INPLACE_COPY_SINCE):
        notes.append(f"torch={spec.torch}: sized for PyTorch before 1.10 (autocast ran GELU in fp32; "
                     "in-place ReLU6 saved no copy of its input)")
    if spec.params and spec.params != entry.params:
        entry = replace(entry, params=spec.params)
    if spec.family and spec.family != entry.family:
        raise UsageError(f"family: {spec.family} conflicts with the "
                         f"{'config' if spec.hf_config else 'catalogue'}'s {entry.family} for {entry.name}")
    return entry, notes


def resolve_entry(spec: JobSpec, catalog: Catalog) -> ModelEntry:
    return resolve(spec, catalog)[0]
