"""What a DL job says about itself: the one parser for every way a job can say it.

Sources, strongest first:

1. flags of `slurm-liquid estimate` (or a wrapper) -- explicit, override everything below;
2. `#LIQUID key=value ...` lines in the batch script and a `liquid: key=value ...` prefix in the
   Slurm `--comment` -- explicit; two explicit values that disagree are an error naming the field;
3. `#SBATCH --gres=gpu:N` / `--gpus=N` / `--comment=...` lines -- what the job asked Slurm for;
4. the training command line in the script (`python train.py --arch resnet50 --bs 64 --fp16`) --
   inferred, fills only the gaps; a value that does not parse there is skipped with a note.

One vocabulary everywhere: a directive key is the `slurm-liquid estimate` flag without its dashes
(`#LIQUID batch-size=64` == `--batch-size 64`); `_` and `-` are the same in keys.

Public API: `parse_script(text) -> JobSpec`, `parse_comment(text) -> JobSpec`,
`parse_directives(text) -> JobSpec`, `JobSpec.from_args(namespace)`, `JobSpec.merged(...)`,
`add_arguments(parser)` (the job-spec flags), `JobSpec.to_directive()`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from slurm_liquid.errors import UsageError
from slurm_liquid.ledger.limits import MAX_LINE_CHARS, MAX_SCRIPT_BYTES

# --- value parsers: one per kind of value; each raises ValueError with a short reason ---------

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def _count(text: str, lo: float, hi: float) -> int:
    """An integer count; accepts `64`, `1.3e9`, `7B`, `125M`, `350k`, `1_000`."""
    raw = str(text).strip().lower().replace("_", "").replace(",", "")
    mult = 1.0
    if raw and raw[-1] in _SUFFIX:
        mult, raw = _SUFFIX[raw[-1]], raw[:-1]
    try:
        value = float(raw) * mult
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"{text!r} is not a whole number")
    if not lo <= value <= hi:
        raise ValueError(f"{text!r} is outside {lo:g}..{hi:g}")
    return int(value)


def _ranged(lo: float, hi: float) -> Callable[[str], int]:
    return lambda text: _count(text, lo, hi)


def _image_size(text: str) -> int:
    """`224` or `HxW` (the side of the square with the same pixel count)."""
    parts = re.split(r"[x,*]", str(text).strip().lower())
    sides = [_count(p, 8, 16384) for p in parts if p]
    if len(sides) not in (1, 2):
        raise ValueError(f"{text!r} is not a size like 224 or 512x384")
    return int(round(math.sqrt(sides[0] * sides[-1])))


def _compact(text: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", str(text).lower())


def _choice(table: Mapping[str, str]) -> Callable[[str], str]:
    compact = {_compact(k): v for k, v in table.items()}

    def parse(text: str) -> str:
        key = _norm_word(text)
        if _compact(key) in compact:
            return compact[_compact(key)]
        import difflib

        close = difflib.get_close_matches(key, sorted(set(table) | set(table.values())), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"{text!r} is not one of {', '.join(sorted(set(table.values())))}{hint}")
    return parse


def _bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    word = _norm_word(text)
    if word in ("", "1", "true", "yes", "on", "y", "t", "full", "selective"):
        return True
    if word in ("0", "false", "no", "off", "n", "f", "none"):
        return False
    raise ValueError(f"{text!r} is not true/false")


def _text(text: str) -> str:
    value = str(text).strip()
    if not value or len(value) > 200 or any(c.isspace() for c in value):
        raise ValueError(f"{text!r} must be one word of at most 200 characters")
    return value


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")


def _name(text: str) -> str:
    """A free-form name (NVML GPU names have spaces): one line, at most 200 characters."""
    value = " ".join(str(text).split())
    if not value or len(value) > 200:
        raise ValueError(f"{text!r} must be 1..200 characters")
    return value


def _deadline(text: str) -> str:
    """An ISO date/time (`2026-12-03T18:00`) or a duration from submission (`48h`, `2d`)."""
    value = str(text).strip()
    if _DURATION.match(value.lower()):
        return value.lower()
    from datetime import datetime  # only deadlines need it: keep it off the import path

    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text!r} is neither an ISO date/time nor a duration like 48h") from None
    return value


def _gpu_range(text: str) -> str:
    """`MIN:MAX` GPUs of an elastic job (`2:8`); one number means a fixed width."""
    low, sep, high = str(text).strip().partition(":")
    lo = _count(low, 1, 4096)
    hi = _count(high, 1, 4096) if sep else lo
    if lo > hi:
        raise ValueError(f"{text!r}: MIN is more than MAX")
    return f"{lo}:{hi}"


_SIGNAL = re.compile(r"^(B:)?(SIG)?([A-Z0-9]+)(@(\d+))?$")


def _signal(text: str) -> str:
    """`USR1@60`: the signal a job checkpoints on and the seconds it needs (sbatch --signal syntax)."""
    match = _SIGNAL.match(str(text).strip().upper())
    if not match:
        raise ValueError(f"{text!r} is not a signal like USR1@60")
    return f"{match.group(3)}@{match.group(5) or 60}"


def _datasets(text: str) -> str:
    """`/shared/imagenet[,/shared/extra.tar]`: absolute paths of datasets to stage (slurm_liquid/staging).
    Plain characters only: the node agent writes them into the TaskProlog's `export` lines."""
    import posixpath

    paths = [p for p in str(text).strip().split(",") if p]
    if not 1 <= len(paths) <= 4:
        raise ValueError(f"{text!r}: give 1 to 4 comma-separated paths")
    for path in paths:
        if not path.startswith("/") or len(path) > 200 or not re.fullmatch(r"[A-Za-z0-9_./+@%:~-]+", path):
            raise ValueError(f"{path!r} is not an absolute path of plain characters (at most 200)")
    return ",".join(posixpath.normpath(p) for p in paths)


def _norm_word(text: str) -> str:
    return str(text).strip().lower().replace("_", "-")


PRECISIONS = {
    "fp32": "fp32", "float32": "fp32", "32": "fp32", "full": "fp32", "no": "fp32", "tf32": "fp32",
    "32-true": "fp32",
    "fp16": "fp16", "float16": "fp16", "16": "fp16", "half": "fp16", "16-mixed": "fp16",
    "amp": "amp", "mixed": "amp", "autocast": "amp",
    "bf16": "bf16", "bfloat16": "bf16", "bf16-mixed": "bf16",
    "bf16-pure": "bf16-pure", "bf16-true": "bf16-pure", "pure-bf16": "bf16-pure",
    # FP8 matmuls (Transformer Engine / torchao): bf16 master path, 8-bit matmul inputs saved
    "fp8": "fp8", "float8": "fp8", "fp8-mixed": "fp8", "te-fp8": "fp8", "e4m3": "fp8",
    # quantized frozen base weights (bitsandbytes / GPTQ / AWQ), 16-bit compute: inference or adapters
    "int8": "int8", "8bit": "int8", "8-bit": "int8", "llm-int8": "int8", "load-in-8bit": "int8",
    "int4": "int4", "4bit": "int4", "4-bit": "int4", "nf4": "int4", "fp4": "int4", "gptq": "int4",
    "awq": "int4", "bnb-4bit": "int4", "load-in-4bit": "int4",
}
OPTIMIZERS = {
    "adam": "adam", "adamw": "adamw", "adamw-torch": "adamw", "adamw-hf": "adamw",
    "adamw-torch-fused": "adamw", "adamw-apex-fused": "adamw", "fusedadam": "adamw",
    "sgd": "sgd", "sgd-momentum": "sgd-momentum", "momentum": "sgd-momentum",
    "nesterov": "sgd-momentum", "adafactor": "adafactor", "adam8bit": "adam8bit",
    "adamw-8bit": "adam8bit", "adamw-bnb-8bit": "adam8bit", "adam-8bit": "adam8bit",
    "lamb": "lamb", "lion": "lion", "rmsprop": "rmsprop", "adagrad": "adagrad",
}
SHARDINGS = {
    "none": "none", "no": "none", "ddp": "none", "zero0": "none", "0": "none",
    "zero1": "zero1", "1": "zero1", "zero2": "zero2", "2": "zero2", "shard-grad-op": "zero2",
    "zero3": "zero3", "3": "zero3", "fsdp": "fsdp", "full-shard": "fsdp", "fsdp2": "fsdp",
    "hybrid-shard": "fsdp",
}
ATTENTIONS = {
    "eager": "eager", "math": "eager", "vanilla": "eager", "manual": "eager",
    "sdpa": "sdpa", "torch-sdpa": "sdpa", "mem-efficient": "sdpa", "efficient": "sdpa", "xformers": "sdpa",
    "flash": "flash", "flash-attention": "flash", "flash-attention-2": "flash", "flash-attn": "flash",
    "flash-attention-3": "flash", "fa2": "flash", "fa3": "flash", "flash2": "flash", "flex": "flash",
}
ADAPTERS = {"none": "none", "no": "none", "full": "none", "lora": "lora", "peft": "lora", "dora": "lora",
            "qlora": "qlora", "q-lora": "qlora"}
OFFLOADS = {"none": "none", "no": "none", "false": "none", "optimizer": "optimizer", "cpu": "optimizer",
            "optimizer-states": "optimizer", "params": "params", "parameters": "params", "param": "params",
            "all": "params", "full": "params"}
MODES = {"train": "train", "training": "train", "finetune": "train", "fine-tune": "train",
         "pretrain": "train", "inference": "inference", "infer": "inference", "serve": "inference",
         "serving": "inference", "generate": "inference", "generation": "inference", "eval": "inference"}
FAMILIES = {
    "cnn": "cnn", "vit": "vit", "encoder": "encoder", "bert": "encoder", "decoder": "decoder",
    "gpt": "decoder", "llm": "decoder", "seq2seq": "seq2seq", "encoder-decoder": "seq2seq",
    "rnn": "rnn", "speech": "rnn", "recsys": "recsys", "recommendation": "recsys",
    "detection": "detection",
}


_TORCH = re.compile(r"^(?:torch|pytorch|v)?[-=]?(\d{1,2})(?:\.(\d{1,3}))?(?:\.(\d{1,3}))?"
                    r"(?:\.?(?:dev|a|b|rc|post)\d*)?(?:\+[0-9a-z.]+)?$")


def _torch_version(text: str) -> str:
    """A PyTorch version (`1.7.1`, `2.1.0.dev20230623+cu118`, `torch-1.13`): major.minor[.patch]
    (build and pre-release tags dropped: the estimator needs the release line only)."""
    match = _TORCH.match(str(text).strip().lower())
    if not match:
        raise ValueError(f"{text!r} is not a PyTorch version like 1.13 or 2.1.0")
    major, minor, patch = match.groups()
    return ".".join([major, minor or "0"] + ([patch] if patch else []))


def _path(text: str) -> str:
    """A local file path (read by the estimator, never fetched): one line, at most 4096 characters."""
    value = str(text).strip()
    if not value or len(value) > 4096 or "\n" in value or "\0" in value:
        raise ValueError(f"{text!r} must be a file path on one line (at most 4096 characters)")
    return value


@dataclass(frozen=True)
class Key:
    name: str                       # the flag without dashes
    parse: Callable[[Any], Any]
    help: str
    is_flag: bool = False           # a bare word / bare flag means true


KEYS: dict[str, Key] = {k.name: k for k in (
    Key("model", _text, "model name from the catalog (resnet50, bert-large, llama-2-7b, ...)"),
    Key("params", _ranged(1e3, 1e13), "parameter count when the model is not in the catalog (7B, 125M)"),
    Key("family", _choice(FAMILIES), "architecture family for an uncatalogued model: "
        + ", ".join(sorted(set(FAMILIES.values())))),
    Key("hf-config", _path, "a Hugging Face config.json on this machine: the model's shape (read locally)"),
    Key("layers", _ranged(1, 10_000), "shape: transformer layers (encoder + decoder for seq2seq)"),
    Key("hidden", _ranged(8, 1_000_000), "shape: hidden size (d_model)"),
    Key("heads", _ranged(1, 10_000), "shape: attention heads"),
    Key("kv-heads", _ranged(1, 10_000), "shape: key/value heads (grouped-query attention; default = heads)"),
    Key("head-dim", _ranged(1, 100_000), "shape: size of one attention head (default hidden / heads)"),
    Key("intermediate", _ranged(8, 10_000_000), "shape: MLP intermediate size (ffn, d_ff)"),
    Key("vocab", _ranged(1, 100_000_000), "shape: vocabulary size"),
    Key("experts", _ranged(1, 100_000), "shape: MLP experts per layer (mixture of experts)"),
    Key("top-k", _ranged(1, 1_000), "shape: experts each token is routed to"),
    Key("patch-size", _ranged(1, 4096), "shape: ViT patch side in pixels"),
    Key("batch-size", _ranged(1, 1_000_000), "global batch size per optimizer step (all GPUs)"),
    Key("micro-batch", _ranged(1, 1_000_000), "per-GPU batch of one forward/backward, as the script "
        "fixes it (alias per-gpu-batch); global batch = micro-batch x data-parallel GPUs x grad-accum"),
    Key("grad-accum", _ranged(1, 100_000), "gradient accumulation steps (micro-batch = batch/gpus/accum)"),
    Key("seq-len", _ranged(1, 10_000_000), "sequence length in tokens (or audio frames)"),
    Key("image-size", _image_size, "input image side in pixels (224 or 512x384)"),
    Key("precision", _choice(PRECISIONS), "fp32, fp16/amp (mixed), bf16 (mixed), bf16-pure, fp8; "
        "int8/int4: quantized frozen base weights (with mode=inference or an adapter)"),
    Key("optimizer", _choice(OPTIMIZERS), "adam, adamw, sgd, sgd-momentum, adafactor, adam8bit, lamb, lion, ..."),
    Key("sharding", _choice(SHARDINGS), "none, zero1, zero2, zero3, fsdp"),
    Key("checkpointing", _bool, "activation (gradient) checkpointing", is_flag=True),
    Key("attention", _choice(ATTENTIONS), "attention kernel: eager (scores saved), sdpa, flash"),
    Key("adapter", _choice(ADAPTERS), "lora or qlora (4-bit base): frozen base weights, trained adapters"),
    Key("rank", _ranged(1, 65_536), "adapter rank (LoRA r; default 16)"),
    Key("tp", _ranged(1, 4096), "tensor-parallel degree"),
    Key("pp", _ranged(1, 4096), "pipeline-parallel degree"),
    Key("sp", _ranged(1, 4096), "sequence/context-parallel degree (sp=tp: Megatron sequence parallelism "
        "on the tensor-parallel GPUs)"),
    Key("offload", _choice(OFFLOADS), "none, optimizer (states + fp32 master on the CPU), params (weights too)"),
    Key("mode", _choice(MODES), "train (default) or inference (weights + KV cache, no gradients)"),
    Key("torch", _torch_version, "PyTorch version the job runs (1.7.1, 2.1): versions before 1.10 saved "
        "GELU's input in fp32 under autocast and no copy for in-place ReLU6 (default: current)"),
    Key("follows-allocation", _bool, "the launcher starts one process per allocated GPU and splits the "
        "global batch over them: only then may adjust mode change the GPU count", is_flag=True),
    Key("epochs", _ranged(1, 1_000_000), "training epochs"),
    Key("steps", _ranged(1, 1e12), "training steps"),
    Key("dataset-size", _ranged(1, 1e13), "samples in the training set (1.2M)"),
    Key("min-gpus", _ranged(1, 4096), "elastic: fewest GPUs the job can run on"),
    Key("max-gpus", _ranged(1, 4096), "elastic: most GPUs the job can use"),
    Key("deadline", _deadline, "ISO date/time or duration from submission (48h)"),
    Key("elastic", _gpu_range, "MIN:MAX GPUs: opts in to resizing while running (sets min-gpus and max-gpus)"),
    Key("signal", _signal, "elastic: checkpoint signal and seconds it needs, USR1@60 (sbatch --signal syntax)"),
    Key("gpus", _ranged(1, 4096), "GPUs the job asked Slurm for"),
    # staging (slurm_liquid/staging): the node agents copy these to node-local disk before the job starts
    Key("dataset", _datasets, "dataset(s) to stage on the job's nodes: /shared/data[,/shared/more.tar] (LIQUID_DATA)"),
    Key("stage", _choice({"copy": "copy", "untar": "untar", "extract": "untar"}), "how to stage a dataset: copy, untar"),
    Key("stage-size", _ranged(1, 1e15), "size hint of the datasets in bytes (20G): over the node quota, no walk"),
    Key("gpu-type", _name, "GPU type wanted or present (h100, a100-40gb, NVIDIA A100-SXM4-40GB)"),
)}


# other spellings of a key (one meaning, one field)
KEY_ALIASES = {"per-gpu-batch": "micro-batch", "micro-batch-size": "micro-batch", "lora-rank": "rank",
               "lora-r": "rank", "num-key-value-heads": "kv-heads",
               "intermediate-size": "intermediate", "ffn": "intermediate", "num-experts": "experts",
               "experts-per-token": "top-k", "config-json": "hf-config"}


def _attr(key: str) -> str:
    return key.replace("-", "_")


@dataclass(frozen=True)
class JobSpec:
    """Typed, validated job description; None = not said. `sources` says where each value came from."""

    model: str | None = None
    params: int | None = None
    family: str | None = None
    hf_config: str | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    intermediate: int | None = None
    vocab: int | None = None
    experts: int | None = None
    top_k: int | None = None
    patch_size: int | None = None
    batch_size: int | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    precision: str | None = None
    optimizer: str | None = None
    sharding: str | None = None
    checkpointing: bool | None = None
    attention: str | None = None
    adapter: str | None = None
    rank: int | None = None
    tp: int | None = None
    pp: int | None = None
    sp: int | None = None
    offload: str | None = None
    mode: str | None = None
    torch: str | None = None
    follows_allocation: bool | None = None
    epochs: int | None = None
    steps: int | None = None
    dataset_size: int | None = None
    min_gpus: int | None = None
    max_gpus: int | None = None
    deadline: str | None = None
    elastic: str | None = None
    signal: str | None = None
    gpus: int | None = None
    gpu_type: str | None = None
    dataset: str | None = None
    stage: str | None = None
    stage_size: int | None = None
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


def canonical_key(raw: str, source: str = "directive") -> str:
    key = _norm_word(raw).lstrip("-")
    key = KEY_ALIASES.get(key, key)
    if key not in KEYS:
        import difflib

        close = difflib.get_close_matches(key, list(KEYS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known keys: {', '.join(KEYS)}"
        raise UsageError(f"{source}: unknown key {raw!r}{hint}")
    return key


# --- explicit directives --------------------------------------------------------------------

def _split(text: str, where: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError as exc:
        raise UsageError(f"{where}: cannot split {text.strip()!r}: {exc}") from None


def _pairs(tokens: Iterable[str], where: str) -> list[tuple[str, str | bool]]:
    pairs: list[tuple[str, str | bool]] = []
    for token in tokens:
        key, sep, value = token.partition("=")
        name = canonical_key(key, where)
        if not sep:
            if not KEYS[name].is_flag:
                raise UsageError(f"{where}: {name} needs a value ({name}=...)")
            pairs.append((name, True))
        else:
            pairs.append((name, value))
    return pairs


class _Layer:
    """Raw values of one strength; two explicit values for one key must agree."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.values: dict[str, Any] = {}
        self.where: dict[str, str] = {}
        self.notes: list[str] = []

    def add(self, key: str, raw: Any, where: str) -> None:
        try:
            value = KEYS[key].parse(raw)
        except ValueError as exc:
            if self.strict:
                raise UsageError(f"{where}: {key}: {exc}") from None
            self.notes.append(f"ignored {key} from {where}: {exc}")
            return
        old = self.values.get(key)
        if old is not None and old != value:
            if self.strict:
                raise UsageError(f"conflicting directives for {key}: {old!r} ({self.where[key]}) "
                                 f"and {value!r} ({where})")
            self.notes.append(f"{where} says {key}={value!r}; kept {old!r} from {self.where[key]}")
            return
        self.values.setdefault(key, value)
        self.where.setdefault(key, where)

    def spec(self) -> JobSpec:
        spec = JobSpec(**{_attr(k): v for k, v in self.values.items()},
                       sources=dict(self.where), notes=tuple(self.notes))
        spec._check(", ".join(sorted(set(self.where.values()))) or "directives")
        return spec


def parse_comment(text: str) -> JobSpec:
    """A Slurm `--comment`; only a comment that starts with `liquid:` says anything."""
    layer = _Layer(strict=True)
    _comment_into(layer, text, "--comment")
    return layer.spec()


def _comment_into(layer: _Layer, text: str, where: str) -> None:
    from slurm_liquid.ledger.optin import comment_spec

    body = comment_spec(text)
    if body is None:
        return
    for key, value in _pairs(_split(body, where), where):
        layer.add(key, value, where)


def parse_directives(text: str) -> JobSpec:
    """`#LIQUID ...` lines (or bare `key=value` text) -- strict, as in a batch script."""
    layer = _Layer(strict=True)
    for number, line in _bounded_lines(text, layer.notes):
        body = line.strip()
        if body.upper().startswith("#LIQUID"):
            body = body[len("#LIQUID"):]
        where = f"line {number}"
        for key, value in _pairs(_split(body, where), where):
            layer.add(key, value, where)
    return layer.spec()


# --- the training command line and #SBATCH ---------------------------------------------------

# normalised training flag -> directive key. Values go through the same parsers.
TRAINING_FLAGS: dict[str, str] = {
    **dict.fromkeys(["model", "arch", "a", "model-name", "model-type", "network", "net",
                     "model-name-or-path", "pretrained-model-name-or-path", "backbone"], "model"),
    # the per-process batch: HF per_device_train_batch_size, Megatron/DeepSpeed micro-batch, and the
    # --batch-size/-b of torchvision's references, timm, nanoGPT and Lightning scripts (per GPU)
    **dict.fromkeys(["batch-size", "bs", "b", "batch", "per-device-train-batch-size",
                     "per-gpu-train-batch-size", "micro-batch-size", "micro-batch",
                     "train-micro-batch-size-per-gpu", "batch-size-per-gpu", "per-gpu-batch-size",
                     "batch-size-per-device"], "micro-batch"),
    # the global batch per optimizer step (Megatron --global-batch-size, DeepSpeed train_batch_size)
    **dict.fromkeys(["global-batch-size", "train-batch-size", "total-batch-size",
                     "effective-batch-size"], "batch-size"),
    **dict.fromkeys(["tensor-model-parallel-size", "tensor-parallel-size", "tp-size", "tp"], "tp"),
    **dict.fromkeys(["pipeline-model-parallel-size", "pipeline-parallel-size", "pp-size", "pp"], "pp"),
    **dict.fromkeys(["context-parallel-size", "sequence-parallel-size", "ulysses-degree",
                     "sp-size"], "sp"),
    **dict.fromkeys(["attn-implementation", "attn-impl", "attention-implementation",
                     "attention-backend"], "attention"),
    **dict.fromkeys(["lora-r", "lora-rank", "lora-dim"], "rank"),
    **dict.fromkeys(["peft", "adapter", "finetuning-type", "peft-type"], "adapter"),
    **dict.fromkeys(["seq-len", "seq-length", "max-seq-length", "max-seq-len", "block-size",
                     "sequence-length", "max-length", "context-length", "max-source-length"], "seq-len"),
    **dict.fromkeys(["image-size", "img-size", "input-size", "resolution", "crop-size",
                     "train-crop-size", "imgsz", "img"], "image-size"),
    **dict.fromkeys(["precision", "mixed-precision", "dtype"], "precision"),
    **dict.fromkeys(["optimizer", "optim", "opt"], "optimizer"),
    **dict.fromkeys(["epochs", "num-train-epochs", "max-epochs", "n-epochs", "num-epochs"], "epochs"),
    **dict.fromkeys(["max-steps", "steps", "train-steps", "train-iters", "max-iters",
                     "num-steps", "total-steps"], "steps"),
    **dict.fromkeys(["gradient-accumulation-steps", "grad-accum", "accum-iter",
                     "accumulate-grad-batches", "gradient-accumulation"], "grad-accum"),
    **dict.fromkeys(["gradient-checkpointing", "activation-checkpointing", "checkpoint-activations",
                     "grad-checkpoint", "recompute-activations", "checkpointing"], "checkpointing"),
    **dict.fromkeys(["zero-stage", "sharding", "fsdp"], "sharding"),
}
# bare boolean training flags that set a value
_BARE_FLAGS = {"fp16": ("precision", "fp16"), "bf16": ("precision", "bf16"),
               "amp": ("precision", "amp"), "half": ("precision", "fp16"),
               "fsdp": ("sharding", "fsdp"), "fp8": ("precision", "fp8"),
               "use-peft": ("adapter", "lora"), "use-lora": ("adapter", "lora"), "lora": ("adapter", "lora"),
               "qlora": ("adapter", "qlora"), "use-qlora": ("adapter", "qlora"),
               "load-in-4bit": ("precision", "int4"), "load-in-8bit": ("precision", "int8"),
               "use-flash-attn": ("attention", "flash"), "flash-attn": ("attention", "flash"),
               "use-flash-attention-2": ("attention", "flash"), "flash-attention": ("attention", "flash"),
               "use-flash-attention": ("attention", "flash"), "sdpa": ("attention", "sdpa"),
               "offload-optimizer": ("offload", "optimizer"), "cpu-offload": ("offload", "params")}
# Lines worth splitting for training flags: a cheap look first (shlex is slow), and only so many.
_LAUNCHER_WORD = re.compile(r"python|torchrun|deepspeed|accelerate|horovodrun|mpirun|srun|lightning|composer|\.py\b")
MAX_COMMAND_LINES = 64
MAX_DIRECTIVE_LINES = 256
_LAUNCHERS = re.compile(r"(^|/)(python[0-9.]*|torchrun|deepspeed|accelerate|horovodrun|"
                        r"mpirun|srun|lightning|composer)$")


def _command_flags(tokens: list[str]) -> Iterable[tuple[str, str | bool]]:
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-") or token in ("-", "--"):
            continue
        name, sep, value = token.lstrip("-").partition("=")
        name = _norm_word(name)
        if not sep:
            nxt = tokens[i] if i < len(tokens) else None
            if name in _BARE_FLAGS and (nxt is None or nxt.startswith("-")):
                yield _BARE_FLAGS[name]
                continue
            if nxt is not None and not nxt.startswith("-"):
                value, i = nxt, i + 1
            else:
                value = True  # a bare switch
        if name == "momentum":
            yield ("momentum", value)
        elif name in TRAINING_FLAGS:
            yield (TRAINING_FLAGS[name], value)


def _training_value(key: str, value: str | bool) -> str | bool:
    if isinstance(value, str) and key == "model":
        return value.rstrip("/").rsplit("/", 1)[-1]  # a hub path or a local directory
    if isinstance(value, str) and key == "sharding" and value.isdigit():
        return f"zero{value}"
    return value


def _gres_gpus(text: str) -> int | None:
    """GPU count of `gpu:4`, `gpu:a100:4`, `gres/gpu:2`, `4` (for --gpus)."""
    for part in text.split(","):
        fields = part.strip().replace("gres/", "").split(":")
        if fields[0] in ("gpu",) or fields[0].isdigit():
            last = fields[-1].split("(")[0]
            if last.isdigit():
                return int(last)
            if len(fields) <= 2:
                return 1
    return None


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, line with its backslash continuations joined), in time linear in `text`."""
    parts: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not parts:
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            parts.append(stripped[:-1] + " ")
            continue
        parts.append(line)
        yield start, "".join(parts)
        parts = []
    if parts:
        yield start, "".join(parts)


def _bounded_lines(text: str, notes: list[str]) -> Iterable[tuple[int, str]]:
    """The logical lines worth reading: the first MAX_SCRIPT_BYTES of a script, lines of at most
    MAX_LINE_CHARS (shlex is quadratic in one line's length; no real option line is that long)."""
    if len(text) > MAX_SCRIPT_BYTES:
        notes.append(f"read only the first {MAX_SCRIPT_BYTES} characters of the script")
        text = text[:MAX_SCRIPT_BYTES]
    for number, line in _logical_lines(text):
        if len(line) > MAX_LINE_CHARS:
            if line.lstrip().upper().startswith("#LIQUID"):
                raise UsageError(f"line {number}: a #LIQUID line of {len(line)} characters "
                                 f"(at most {MAX_LINE_CHARS})")
            notes.append(f"skipped line {number}: longer than {MAX_LINE_CHARS} characters")
            continue
        yield number, line


def parse_script(text: str) -> JobSpec:
    """A batch script: `#LIQUID` lines and a `liquid:` comment (explicit), then `#SBATCH` GPU
    requests and the training command's flags (inferred, gaps only)."""
    explicit, sbatch, inferred = _Layer(strict=True), _Layer(strict=False), _Layer(strict=False)
    in_header = True
    directives = commands = 0
    for number, line in _bounded_lines(text, inferred.notes):
        body = line.strip()
        where = f"line {number}"
        if body.upper().startswith("#LIQUID"):
            directives += 1
            if directives > MAX_DIRECTIVE_LINES:
                raise UsageError(f"{where}: more than {MAX_DIRECTIVE_LINES} #LIQUID lines")
            for key, value in _pairs(_split(body[len("#LIQUID"):], where), where):
                explicit.add(key, value, where)
        elif body.startswith("#SBATCH") and in_header:
            _sbatch_into(explicit, sbatch, body[len("#SBATCH"):], where)
        elif body and not body.startswith("#"):
            in_header = False  # sbatch stops reading #SBATCH at the first command
            if _LAUNCHER_WORD.search(body):
                commands += 1
                if commands == MAX_COMMAND_LINES + 1:
                    inferred.notes.append(f"read the training command of the first {MAX_COMMAND_LINES} "
                                          "launcher lines only")
                if commands <= MAX_COMMAND_LINES:
                    _command_into(inferred, body, where)
    return explicit.spec().merged(sbatch.spec(), inferred.spec())


def _sbatch_into(explicit: _Layer, sbatch: _Layer, options: str, where: str) -> None:
    try:
        tokens = shlex.split(options, comments=True)
    except ValueError:
        return
    for flag, value in _command_options(tokens):
        if flag == "comment":
            _comment_into(explicit, value, f"{where} (#SBATCH --comment)")
        elif flag in ("gres", "gpus", "gpus-per-node", "G"):
            fields = value.split(":")
            if flag == "gres":
                count = _gres_gpus(value)
                gpu_type = fields[1] if len(fields) == 3 else None
            else:  # --gpus=[type:]count
                count = int(fields[-1]) if fields[-1].isdigit() else None
                gpu_type = fields[0] if len(fields) == 2 else None
            if count:
                sbatch.add("gpus", count, f"{where} (#SBATCH --{flag})")
            if gpu_type:
                sbatch.add("gpu-type", gpu_type, f"{where} (#SBATCH --{flag})")


def _command_options(tokens: list[str]) -> Iterable[tuple[str, str]]:
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("--") and "=" in token:
            name, _, value = token[2:].partition("=")
            yield name, value
        elif token.startswith("-") and i < len(tokens):
            yield token.lstrip("-"), tokens[i]
            i += 1


def _command_into(layer: _Layer, line: str, where: str) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:
        tokens = line.split()
    if not any(_LAUNCHERS.search(t) or t.endswith(".py") for t in tokens):
        return
    momentum = None
    for key, value in _command_flags(tokens):
        if isinstance(value, str) and "$" in value:
            layer.notes.append(f"ignored {key}={value} from {where}: a shell variable")
            continue
        if key == "momentum":
            momentum = value
            continue
        layer.add(key, _training_value(key, value), f"{where} (training command)")
    if layer.values.get("optimizer") == "sgd" and momentum not in (None, True):
        try:
            if float(momentum) > 0:
                layer.values["optimizer"] = "sgd-momentum"
        except ValueError:
            pass


# --- flags ----------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job-spec flags, `--KEY VALUE` for every directive key (values parsed by JobSpec)."""
    group = parser.add_argument_group("job spec (same keys as #LIQUID directives)")
    for key in KEYS.values():
        if key.is_flag:
            group.add_argument(f"--{key.name}", dest=_attr(key.name), nargs="?", const="true",
                               default=None, metavar="BOOL", help=key.help)
        else:
            group.add_argument(f"--{key.name}", dest=_attr(key.name), default=None,
                               metavar=key.name.split("-")[-1].upper(), help=key.help)
