"""Activations of a training step (or an inference forward) per GPU, and the job's layout.

Convolutional/vision models scale a measured per-sample coefficient (catalogue) with micro-batch
and pixel count; transformers use the per-layer formula of Korthikanti et al. (2022, "Reducing
Activation Recomputation in Large Transformer Models"): per layer and sample, s*h*34 + 5*a*s^2
bytes in 16-bit with dropout; terms are rebuilt here from hidden, ffn, heads, kv-heads and experts
so that fp32/fp8, gated MLPs, the attention kernel, tensor/sequence/pipeline parallelism,
checkpointing (full or selective), torch.compile, adapters on chosen modules, activation
offloading and a chunked loss change only the terms they change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.catalog import ModelEntry
from slurm_liquid.jobspec import JobSpec

MIB = 2 ** 20
# bitsandbytes: NF4 + one fp32 absmax per 64 weights; GPTQ/AWQ: packed 4-bit weights, and per group
# of 128 input channels one fp16 scale and one packed 4-bit zero point per output channel
QUANT_BYTES = {"int8": 1.0, "int4": 0.5 + 4 / 64, "gptq": 0.5 + (2 + 0.5) / 128}
CHECKPOINT_CNN = 0.35      # share of activations kept with checkpointing (sqrt(n)-style segments)
INFERENCE_CNN = 0.15       # eval forward of a CNN: a few live feature maps of the saved-for-backward set
KV_BYTES = {"fp32": 4.0, "fp8": 1.0}
DEFAULT_TARGETS = ("q", "v")   # PEFT's and LitGPT's default adapter targets: the query and value projections
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
    targets: tuple[str, ...] = DEFAULT_TARGETS   # modules with adapters
    compiled: bool = False       # torch.compile
    offload_acts: bool = False   # saved activations in host memory
    loss_chunks: int = 1         # cross-entropy computed in chunks

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
    targets = tuple(spec.lora_targets.split(",")) if spec.lora_targets else DEFAULT_TARGETS
    return Layout(compute, quant, adapter, inference, spec.attention or entry.default_attention,
                  spec.tp or 1, spec.pp or 1, spec.sp or 1, torch_version(spec), targets,
                  bool(spec.compile), bool(spec.offload_activations), spec.loss_chunks or 1)


def lora_modules(entry: ModelEntry, targets: tuple[str, ...]) -> list[tuple[float, float, float]]:
    """(input width, output width, modules per layer) of each adapted linear layer: the attention
    projections q, k, v, o and the MLP's gate, up and down (each expert's, in a mixture)."""
    _, q, kv = _attention_dims(entry)
    h = entry.hidden or (entry.params / 12) ** 0.5
    f = entry.ffn or 4 * h
    experts = entry.experts if entry.experts > 1 else 1
    dims = {"q": (h, q, 1), "k": (h, kv, 1), "v": (h, kv, 1), "o": (q, h, 1),
            "gate": (h, f, experts if entry.gated_mlp else 0), "up": (h, f, experts), "down": (f, h, experts)}
    return [dims[t] for t in targets if t in dims and dims[t][2]]


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
                 score_len: float) -> tuple[float, float, float]:
    """(replicated, tensor-parallel, attention core) activation bytes per token of one layer saved
    for backward; the attention core (scores, probabilities, masks or the fused kernel's
    log-sum-exp) is part of the tensor-parallel bytes and is what selective checkpointing drops.

    Mixed precision (autocast) is not simply half of fp32: layer norms and softmax run in fp32,
    so their outputs are saved in fp32 and again as the 16-bit copy the next matmul consumes.
    FP8 saves the inputs of the linear layers in 8 bits."""
    wide = 4.0 if lay.compute == "fp32" else 2.0
    lin = 1.0 if lay.compute == "fp8" else wide    # inputs of linear layers
    dropout = entry.trains_with_dropout and not lay.inference
    f = entry.ffn or 4 * h
    experts_per_token = entry.top_k if entry.experts > 1 else 1
    mlp = (3 * f * wide + f * lin) if entry.gated_mlp else (f * wide + f * lin)
    if entry.activation in PYTHON_GELUS and not entry.gated_mlp and not lay.compiled:
        # (torch.compile fuses the chain; its partitioner recomputes pointwise ops from the input)
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
            core = heads * score_len * _eager_probs_bytes(entry, dropout)
        else:
            core = heads * score_len * (2 * wide + 1 if dropout else wide)
    else:
        core = heads * 4.0                          # the kernel's log-sum-exp per query and head
    parallel += core
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
    if lay.adapter:
        # LoRA dropout's copy of each target's input + its 1-byte mask (what lora_A saves); the
        # inputs of o and down are tensor-parallel, the others (width h) replicated
        for width, _, count in lora_modules(replace(entry, hidden=h, ffn=f), lay.targets):
            if width == h:
                replicated += count * width * (wide + 1)
            else:
                parallel += count * width * (wide + 1)
    return replicated, parallel, core


def _transformer_layer_bytes(entry: ModelEntry, seq: int, lay: Layout, checkpointing: bool | str,
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
            rep, par, core = _layer_bytes(stage, lay, tokens, dim, stage_heads, dim, dim, window)
            layer = tokens * (rep + par - (core if checkpointing == "selective" else 0.0))
            largest = max(largest, layer)
            stored += depth * (tokens * dim * wide if checkpointing is True else layer)
        return (stored + (largest if checkpointing is True else 0.0)) * entry.act_scale
    rep, par, core = _layer_bytes(entry, lay, seq, entry.hidden, heads, q, kv, seq / max(sp if sp != tp else 1, 1))
    per_layer = seq * (rep / rep_split + par / split)
    # selective checkpointing (Megatron): the attention core is recomputed, the rest is kept
    kept = per_layer - seq * core / split if checkpointing == "selective" else per_layer
    if entry.family == "seq2seq":
        per_layer, kept = per_layer * 1.15, kept * 1.15   # decoder layers add cross-attention
    layers = entry.layers / lay.pp
    if lay.pp > 1:                                  # 1F1B: the first stage holds pp micro-batches
        layers *= min(lay.pp, accum) if accum > 1 else lay.pp
    inputs = seq * entry.hidden * wide / rep_split  # one layer's input (what full checkpointing keeps)
    if lay.inference:                               # nothing is saved: one layer's transient tensors
        stored = per_layer
    elif lay.offload_acts:
        # saved tensors go to host memory as forward makes them and come back one layer ahead of
        # backward: the layer in flight and the one being copied stay (torchtune OffloadActivations)
        stored = per_layer + (2 * inputs if checkpointing is True else kept)
    elif checkpointing is True:
        stored = layers * inputs + per_layer        # layer inputs + one layer recomputed
    else:
        stored = layers * kept
    if not entry.lm_head:
        logits = 0.0
    elif lay.inference:
        logits = 8.0 * entry.vocab                  # the last position's logits (16-bit + fp32)
    else:
        # logits (16-bit), their fp32 upcast, fp32 log-softmax saved for backward and the logits'
        # gradient: 12 bytes each (vocab-parallel over tp). Chunked (torchtune
        # CEWithChunkedOutputLoss): the saved fp32 log-probs and the 16-bit gradient (6) stay
        # whole; the upcast and the 16-bit logits (6) exist one chunk at a time.
        logits = (6.0 + 6.0 / lay.loss_chunks) * seq * entry.vocab / tp
    return stored * entry.act_scale + logits


def seq_side(entry: ModelEntry, image_or_seq: int) -> float:
    """Patches per side of a hierarchical ViT at this image size."""
    return image_or_seq / (entry.patch_size or 4)


def activation_bytes(entry: ModelEntry, spec: JobSpec, micro_batch: int, lay: Layout | None = None) -> float:
    lay = lay or layout(entry, spec)
    checkpointing = spec.checkpointing if spec.checkpointing == "selective" else bool(spec.checkpointing)
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
    elif checkpointing is True:                      # (no attention core for selective to drop)
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

