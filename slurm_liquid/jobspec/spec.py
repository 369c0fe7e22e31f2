"""The job-spec keys and `JobSpec`: one declaration per key.

Each field of `JobSpec` is a key: its type, parser, help text, whether a bare word means true, and
its other spellings are all said once, in the `key(...)` that declares the field. `KEYS` (the
directive vocabulary), the `--KEY` flags and `canonical_key` are read off those declarations.
A directive key is the field name with `-` for `_` (`micro_batch` -> `micro-batch=`).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from slurm_liquid.errors import UsageError
from slurm_liquid.jobspec.values import (
    ADAPTERS, ATTENTIONS, FAMILIES, LORA_TARGETS, MODES, OFFLOADS, OPTIMIZERS, PRECISIONS, RUNTIMES,
    SHARDINGS, STATE_PRECISIONS, _bool, _checkpointing, _choice, _datasets, _deadline, _fraction,
    _gpu_range, _image_size, _lora_targets, _name, _norm_word, _path, _ranged, _signal, _text,
    _torch_version)


@dataclass(frozen=True)
class Key:
    name: str                       # the flag without dashes
    parse: Callable[[Any], Any]
    help: str
    is_flag: bool = False           # a bare word / bare flag means true
    aliases: tuple[str, ...] = ()   # other spellings of the key (one meaning, one field)


def key(parse: Callable[[Any], Any], help: str, *, is_flag: bool = False,
        aliases: tuple[str, ...] = ()) -> Any:
    """Declare a job-spec key as a JobSpec field (None = not said)."""
    return field(default=None, metadata={"key": (parse, help, is_flag, aliases)})


@dataclass(frozen=True)
class JobSpec:
    """Typed, validated job description; None = not said. `sources` says where each value came from."""

    model: str | None = key(_text, "model name from the catalog (resnet50, bert-large, llama-2-7b, ...)")
    params: int | None = key(_ranged(1e3, 1e13), "parameter count when the model is not in the catalog (7B, 125M)")
    family: str | None = key(_choice(FAMILIES), "architecture family for an uncatalogued model: "
                             + ", ".join(sorted(set(FAMILIES.values()))))
    hf_config: str | None = key(_path, "a Hugging Face config.json on this machine: the model's shape "
                                "(read locally)", aliases=("config-json",))
    layers: int | None = key(_ranged(1, 10_000), "shape: transformer layers (encoder + decoder for seq2seq)")
    hidden: int | None = key(_ranged(8, 1_000_000), "shape: hidden size (d_model)")
    heads: int | None = key(_ranged(1, 10_000), "shape: attention heads")
    kv_heads: int | None = key(_ranged(1, 10_000), "shape: key/value heads (grouped-query attention; "
                               "default = heads)", aliases=("num-key-value-heads",))
    head_dim: int | None = key(_ranged(1, 100_000), "shape: size of one attention head (default hidden / heads)")
    intermediate: int | None = key(_ranged(8, 10_000_000), "shape: MLP intermediate size (ffn, d_ff)",
                                   aliases=("intermediate-size", "ffn"))
    vocab: int | None = key(_ranged(1, 100_000_000), "shape: vocabulary size")
    experts: int | None = key(_ranged(1, 100_000), "shape: MLP experts per layer (mixture of experts)",
                              aliases=("num-experts",))
    top_k: int | None = key(_ranged(1, 1_000), "shape: experts each token is routed to",
                            aliases=("experts-per-token",))
    patch_size: int | None = key(_ranged(1, 4096), "shape: ViT patch side in pixels")
    batch_size: int | None = key(_ranged(1, 1_000_000), "global batch size per optimizer step (all GPUs)")
    micro_batch: int | None = key(_ranged(1, 1_000_000), "per-GPU batch of one forward/backward, as the "
                                  "script fixes it; global batch = micro-batch x data-parallel GPUs x "
                                  "grad-accum", aliases=("per-gpu-batch", "micro-batch-size"))
    grad_accum: int | None = key(_ranged(1, 100_000), "gradient accumulation steps (micro-batch = batch/gpus/accum)")
    seq_len: int | None = key(_ranged(1, 10_000_000), "sequence length in tokens (or audio frames)")
    image_size: int | None = key(_image_size, "input image side in pixels (224 or 512x384)")
    precision: str | None = key(_choice(PRECISIONS), "fp32, fp16/amp (mixed), bf16 (mixed), bf16-pure, fp8; "
                                "int8/int4 (bitsandbytes) or gptq: quantized frozen base weights "
                                "(with mode=inference or an adapter)")
    optimizer: str | None = key(_choice(OPTIMIZERS), "adam, adamw, sgd, sgd-momentum, adafactor, adam8bit, "
                                "paged-adam8bit, lamb, lion, ...")
    optimizer_states: str | None = key(_choice(STATE_PRECISIONS), "precision of the optimizer states: "
                                       "fp32 (default; bf16 under bf16-pure), bf16, 8bit")
    sharding: str | None = key(_choice(SHARDINGS), "none, zero1, zero2, zero3, fsdp")
    live_params: int | None = key(_ranged(1, 1e13), "ZeRO-3/FSDP: parameters unsharded at once (DeepSpeed "
                                  "stage3_max_live_parameters; default two layers' worth)")
    checkpointing: bool | str | None = key(_checkpointing, "activation (gradient) checkpointing: true "
                                           "(every layer), selective (attention core only), false",
                                           is_flag=True)
    offload_activations: bool | None = key(_bool, "saved activations moved to host memory (torchtune "
                                           "enable_activation_offloading)", is_flag=True)
    compile: bool | None = key(_bool, "torch.compile: pointwise chains fused and recomputed", is_flag=True)
    loss_chunks: int | None = key(_ranged(1, 4096), "cross-entropy in N chunks (torchtune "
                                  "CEWithChunkedOutputLoss: 8; Liger fused linear CE)")
    optimizer_in_backward: bool | None = key(_bool, "optimizer step fused into backward: each gradient is "
                                             "freed once applied (torchtune optimizer_in_bwd)", is_flag=True)
    attention: str | None = key(_choice(ATTENTIONS), "attention kernel: eager (scores saved), sdpa, flash")
    adapter: str | None = key(_choice(ADAPTERS), "lora or qlora (4-bit base): frozen base weights, trained adapters")
    rank: int | None = key(_ranged(1, 65_536), "adapter rank (LoRA r; default 16)", aliases=("lora-rank", "lora-r"))
    lora_targets: str | None = key(_lora_targets, "modules with adapters: all-linear, or a list of q,k,v,o,"
                                   "gate,up,down (q_proj,v_proj ...; default q,v)", aliases=("target-modules",))
    kbit_prep: bool | None = key(_bool, "PEFT prepare_model_for_kbit_training: 16-bit parameters of a "
                                 "quantized model upcast to fp32", is_flag=True)
    tp: int | None = key(_ranged(1, 4096), "tensor-parallel degree")
    pp: int | None = key(_ranged(1, 4096), "pipeline-parallel degree")
    sp: int | None = key(_ranged(1, 4096), "sequence/context-parallel degree (sp=tp: Megatron sequence "
                         "parallelism on the tensor-parallel GPUs)")
    offload: str | None = key(_choice(OFFLOADS), "none, optimizer (states + fp32 master on the CPU), "
                              "params (weights too)")
    mode: str | None = key(_choice(MODES), "train (default) or inference (weights + KV cache, no gradients)")
    runtime: str | None = key(_choice(RUNTIMES), "inference runtime: hf (cache grows with the context), "
                              "vllm (reserves gpu-memory-utilization of the card up front)")
    gpu_memory_utilization: float | None = key(_fraction, "vllm: share of the card it reserves (0.9)")
    torch: str | None = key(_torch_version, "PyTorch version the job runs (1.7.1, 2.1): versions before 1.10 "
                            "saved GELU's input in fp32 under autocast and no copy for in-place ReLU6 "
                            "(default: current)")
    follows_allocation: bool | None = key(_bool, "the launcher starts one process per allocated GPU and "
                                          "splits the global batch over them: only then may adjust mode "
                                          "change the GPU count", is_flag=True)
    epochs: int | None = key(_ranged(1, 1_000_000), "training epochs")
    steps: int | None = key(_ranged(1, 1e12), "training steps")
    dataset_size: int | None = key(_ranged(1, 1e13), "samples in the training set (1.2M)")
    min_gpus: int | None = key(_ranged(1, 4096), "elastic: fewest GPUs the job can run on")
    max_gpus: int | None = key(_ranged(1, 4096), "elastic: most GPUs the job can use")
    deadline: str | None = key(_deadline, "ISO date/time or duration from submission (48h)")
    elastic: str | None = key(_gpu_range, "MIN:MAX GPUs: opts in to resizing while running (sets "
                              "min-gpus and max-gpus)")
    signal: str | None = key(_signal, "elastic: checkpoint signal and seconds it needs, USR1@60 "
                             "(sbatch --signal syntax)")
    gpus: int | None = key(_ranged(1, 4096), "GPUs the job asked Slurm for")
    gpu_type: str | None = key(_name, "GPU type wanted or present (h100, a100-40gb, NVIDIA A100-SXM4-40GB)")
    # staging (slurm_liquid/staging): the node agents copy these to node-local disk before the job starts
    dataset: str | None = key(_datasets, "dataset(s) to stage on the job's nodes: "
                              "/shared/data[,/shared/more.tar] (LIQUID_DATA)")
    stage: str | None = key(_choice({"copy": "copy", "untar": "untar", "extract": "untar"}),
                            "how to stage a dataset: copy, untar")
    stage_size: int | None = key(_ranged(1, 1e15), "size hint of the datasets in bytes (20G): over the "
                                 "node quota, no walk")
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.elastic:  # the range is the min-gpus/max-gpus pair the estimate already honours
            low, high = (int(x) for x in self.elastic.split(":"))
            if self.min_gpus is None:
                object.__setattr__(self, "min_gpus", low)
            if self.max_gpus is None:
                object.__setattr__(self, "max_gpus", high)

    def get(self, key: str) -> Any:
        return getattr(self, _attr(key))

    def to_dict(self) -> dict[str, Any]:
        """The values that were said, by directive key."""
        return {k: self.get(k) for k in KEYS if self.get(k) is not None}

    def to_directive(self) -> str:
        """`#LIQUID k=v ...`: parse_directives(to_directive()) gives this spec back."""
        parts = []
        for key, value in self.to_dict().items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            parts.append(f"{key}={shlex.quote(text)}")
        return "#LIQUID " + " ".join(parts)

    def merged(self, *weaker: "JobSpec") -> "JobSpec":
        """This spec, with gaps filled from weaker ones in order (no conflict check: self wins)."""
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        notes: list[str] = []
        for spec in reversed((self,) + weaker):
            notes.extend(spec.notes)
            for key, value in spec.to_dict().items():
                values[_attr(key)] = value
                sources[key] = spec.sources.get(key, "")
        return dataclasses.replace(JobSpec(**values), sources=sources,
                                   notes=tuple(dict.fromkeys(notes)))

    @classmethod
    def from_values(cls, values: Mapping[str, Any], source: str = "flag") -> "JobSpec":
        """Validate raw `key -> text` values (keys in directive spelling); bad ones raise UsageError."""
        typed: dict[str, Any] = {}
        for raw_key, raw in values.items():
            key = canonical_key(raw_key, source)
            try:
                typed[_attr(key)] = KEYS[key].parse(raw)
            except ValueError as exc:
                raise UsageError(f"{source}: {key}: {exc}") from None
        spec = cls(**typed, sources={k: source for k in map(canonical_key, values)})
        spec._check(source)
        return spec

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "JobSpec":
        """The job-spec flags that `add_arguments` defined and the user gave."""
        raw = {k: getattr(args, _attr(k)) for k in KEYS if getattr(args, _attr(k), None) is not None}
        return cls.from_values(raw, source="command-line flag")

    def _check(self, source: str) -> None:
        if self.min_gpus and self.max_gpus and self.min_gpus > self.max_gpus:
            raise UsageError(f"{source}: min-gpus={self.min_gpus} is more than max-gpus={self.max_gpus}")
        if self.elastic and self.elastic != f"{self.min_gpus}:{self.max_gpus}":
            raise UsageError(f"{source}: elastic={self.elastic} disagrees with min-gpus={self.min_gpus} "
                             f"max-gpus={self.max_gpus}")


def _attr(key: str) -> str:
    return key.replace("-", "_")


KEYS: dict[str, Key] = {
    f.name.replace("_", "-"): Key(f.name.replace("_", "-"), *f.metadata["key"])
    for f in dataclasses.fields(JobSpec) if "key" in f.metadata}
# other spellings of a key, read off the declarations
KEY_ALIASES: dict[str, str] = {alias: k.name for k in KEYS.values() for alias in k.aliases}


def canonical_key(raw: str, source: str = "directive") -> str:
    key = _norm_word(raw).lstrip("-")
    key = KEY_ALIASES.get(key, key)
    if key not in KEYS:
        import difflib

        close = difflib.get_close_matches(key, list(KEYS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known keys: {', '.join(KEYS)}"
        raise UsageError(f"{source}: unknown key {raw!r}{hint}")
    return key


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job-spec flags, `--KEY VALUE` for every directive key (values parsed by JobSpec).
    (`slurm-liquid estimate` also takes `--KEY_NAME`: its prepare_argv spells it `--KEY-NAME`.)"""
    group = parser.add_argument_group("job spec (same keys as #LIQUID directives)")
    for k in KEYS.values():
        if k.is_flag:
            group.add_argument(f"--{k.name}", dest=_attr(k.name), nargs="?", const="true",
                               default=None, metavar="BOOL", help=k.help)
        else:
            group.add_argument(f"--{k.name}", dest=_attr(k.name), default=None,
                               metavar=k.name.split("-")[-1].upper(), help=k.help)
