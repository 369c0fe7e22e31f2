"""Value parsers of the job-spec keys (one per kind of value; each raises ValueError with a short
reason) and the vocabularies of the choice keys (every spelling -> the one meaning)."""

from __future__ import annotations

import math
import re
from typing import Callable, Mapping

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
    "int4": "int4", "4bit": "int4", "4-bit": "int4", "nf4": "int4", "fp4": "int4", "bnb-4bit": "int4", "load-in-4bit": "int4",
    # GPTQ/AWQ checkpoints: packed 4-bit weights with 16-bit group scales, matmuls in fused kernels
    "gptq": "gptq", "awq": "gptq", "gptq-int4": "gptq", "exllama": "gptq", "marlin": "gptq",
    "awq-marlin": "gptq", "gptq-marlin": "gptq", "bitsandbytes": "int4",
}
OPTIMIZERS = {
    "adam": "adam", "adamw": "adamw", "adamw-torch": "adamw", "adamw-hf": "adamw",
    "adamw-torch-fused": "adamw", "adamw-apex-fused": "adamw", "fusedadam": "adamw",
    "sgd": "sgd", "sgd-momentum": "sgd-momentum", "momentum": "sgd-momentum",
    "nesterov": "sgd-momentum", "adafactor": "adafactor", "adam8bit": "adam8bit",
    "adamw-8bit": "adam8bit", "adamw-bnb-8bit": "adam8bit", "adam-8bit": "adam8bit",
    "lamb": "lamb", "lion": "lion", "rmsprop": "rmsprop", "adagrad": "adagrad",
    # bitsandbytes paged optimizers: states in unified memory, resident on the GPU (and counted by
    # NVML) unless the card runs out: sized as their unpaged selves
    "paged-adamw": "adamw", "paged-adamw-32bit": "adamw", "paged-adam-32bit": "adamw",
    "paged-adamw-8bit": "adam8bit", "paged-adam-8bit": "adam8bit", "paged-adam8bit": "adam8bit",
    "adamw-8bit-paged": "adam8bit", "adamw-torch-4bit": "adam4bit", "adam4bit": "adam4bit",
    "adafactor-hf": "adafactor", "adamw-anyprecision": "adamw",
}
STATE_PRECISIONS = {"fp32": "fp32", "float32": "fp32", "32bit": "fp32", "bf16": "bf16", "bfloat16": "bf16",
                    "fp16": "bf16", "16bit": "bf16", "8bit": "8bit", "int8": "8bit", "8-bit": "8bit"}
RUNTIMES = {"hf": "hf", "transformers": "hf", "pytorch": "hf", "torch": "hf", "generate": "hf",
            "vllm": "vllm", "sglang": "vllm"}
# adapter target modules: the seven linear layers of a decoder block (Llama naming)
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
_TARGET_WORDS = {"q": "q", "query": "q", "q-proj": "q", "k": "k", "key": "k", "k-proj": "k",
                 "v": "v", "value": "v", "v-proj": "v", "o": "o", "out-proj": "o", "o-proj": "o",
                 "dense": "o", "proj": "o", "gate": "gate", "gate-proj": "gate", "w1": "gate",
                 "up": "up", "up-proj": "up", "w3": "up", "fc1": "up", "fc-in": "up", "down": "down",
                 "down-proj": "down", "w2": "down", "fc2": "down", "fc-out": "down",
                 "c-attn": "q,k,v", "qkv-proj": "q,k,v", "query-key-value": "q,k,v", "wqkv": "q,k,v",
                 "c-proj": "o", "c-fc": "up"}
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




def _checkpointing(text: str | bool) -> bool | str:
    """Activation checkpointing: true (every layer's inputs kept, the rest recomputed), `selective`
    (Megatron's: only the attention core recomputed), false."""
    if isinstance(text, str) and _norm_word(text) in ("selective", "sel", "attention", "core-attn"):
        return "selective"
    return _bool(text)


def _fraction(text: str) -> float:
    """A share in (0, 1] (`0.9`)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise ValueError(f"{text!r} is outside (0, 1]")
    return value


def _lora_targets(text: str) -> str:
    """`all-linear`, `all`, or module names (`q_proj,v_proj`, `[q_proj, v_proj]`, `qkvo`) ->
    the canonical comma list over LORA_TARGETS."""
    raw = re.sub(r"[\[\]'\"]", " ", str(text)).strip().lower()
    words = [_norm_word(w) for w in re.split(r"[,\s]+", raw) if w]
    if not words:
        raise ValueError(f"{text!r} names no modules")
    found: set[str] = set()
    for word in words:
        if word in ("all-linear", "all", "all-linear-layers"):
            found.update(LORA_TARGETS)
        elif word in ("attn", "attention", "qkvo"):
            found.update(("q", "k", "v", "o"))
        elif word in ("mlp", "ffn"):
            found.update(("gate", "up", "down"))
        elif word in _TARGET_WORDS:
            found.update(_TARGET_WORDS[word].split(","))
        elif word.removeprefix("self-attn.") in _TARGET_WORDS:
            found.update(_TARGET_WORDS[word.removeprefix("self-attn.")].split(","))
        else:
            raise ValueError(f"{word!r} is not a linear layer of a decoder block (q, k, v, o, gate, up, "
                             "down, all-linear)")
    return ",".join(t for t in LORA_TARGETS if t in found)
