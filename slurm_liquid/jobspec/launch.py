"""Launch config files a job's command names: DeepSpeed JSON, accelerate YAML, and training-argument
files (HF Trainer JSON/YAML, LLaMA-Factory, axolotl, Lightning/torchtune configs).

Only a process running as the user reads them (`slurm-liquid estimate`, the sbatch wrapper): the
caller hands `parse_script` a `Reader`; root code (the daemon) passes none, so nothing here is
ever read with root's rights. A file is read at most MAX_CONFIG_BYTES, at most MAX_CONFIGS files
per script (a config may name another: accelerate's `deepspeed_config_file`, a YAML's
`deepspeed:`), and what does not parse is skipped with a note.

DeepSpeed's `"auto"` values are what HF Trainer / accelerate fill from the command line: the
command's flags are the stronger layer, so an `"auto"` is skipped here and the command (or the
default) supplies it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Iterable, Mapping

from slurm_liquid.jobspec.command import training_values

MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIGS = 4
MAX_SETTINGS = 2000       # settings read from one file (YAML aliases can repeat a list many times)
Reader = Callable[[str], "tuple[str, str] | None"]   # path -> (resolved path, text), None if unreadable


class UserFiles:
    """A Reader for the user-side process: a path as written, else relative to each base directory
    (the script's own, the working directory sbatch will run it in)."""

    def __init__(self, bases: Iterable[str] = ()) -> None:
        self.bases = [b for b in bases if b]

    def __call__(self, path: str) -> tuple[str, str] | None:
        path = os.path.expanduser(path)
        candidates = [path] if os.path.isabs(path) else [os.path.join(b, path) for b in self.bases] + [path]
        for candidate in candidates:
            try:
                with open(candidate, "rb") as handle:
                    data = handle.read(MAX_CONFIG_BYTES + 1)
            except OSError:
                continue
            if len(data) > MAX_CONFIG_BYTES:
                return None
            return candidate, data.decode("utf-8", errors="replace")
        return None


def _load(path: str, text: str) -> Any:
    if path.lower().endswith(".json"):
        return json.loads(text)
    import yaml  # only when a YAML config is named: keeps the submit path light

    return yaml.safe_load(text)


def _stage(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or str(value) not in "0123":
        return None
    return "none" if str(value) == "0" else f"zero{value}"


def _on(device: Any) -> bool:
    return isinstance(device, str) and device.lower() in ("cpu", "nvme")


def _enabled(section: Any) -> bool | None:
    value = section.get("enabled") if isinstance(section, Mapping) else None
    return value if isinstance(value, bool) else None


def deepspeed_pairs(doc: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A DeepSpeed config: ZeRO stage and offload, precision, batch, accumulation, live parameters."""
    pairs: list[tuple[str, Any]] = []
    zero = doc.get("zero_optimization") if isinstance(doc.get("zero_optimization"), Mapping) else {}
    if _stage(zero.get("stage")):
        pairs.append(("sharding", _stage(zero.get("stage"))))
    off_opt = zero.get("offload_optimizer") if isinstance(zero.get("offload_optimizer"), Mapping) else {}
    off_par = zero.get("offload_param") if isinstance(zero.get("offload_param"), Mapping) else {}
    if _on(off_par.get("device")):
        pairs.append(("offload", "params"))
    elif _on(off_opt.get("device")) or zero.get("cpu_offload") is True:
        pairs.append(("offload", "optimizer"))
    live = zero.get("stage3_max_live_parameters")
    if isinstance(live, (int, float)) and not isinstance(live, bool) and zero.get("stage") == 3:
        pairs.append(("live-params", str(int(live))))
    if _enabled(doc.get("bf16")) or _enabled(doc.get("bfloat16")):
        pairs.append(("precision", "bf16"))
    elif _enabled(doc.get("fp16")):
        pairs.append(("precision", "fp16"))
    for name, key in (("train_micro_batch_size_per_gpu", "micro-batch"),
                      ("gradient_accumulation_steps", "grad-accum"), ("train_batch_size", "batch-size")):
        value = doc.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            pairs.append((key, str(value)))
    optimizer = doc.get("optimizer")
    if isinstance(optimizer, Mapping) and isinstance(optimizer.get("type"), str):
        pairs.append(("optimizer", optimizer["type"]))
    return pairs


_FSDP_STRATEGIES = {"full-shard": "fsdp", "1": "fsdp", "hybrid-shard": "fsdp", "4": "fsdp",
                    "shard-grad-op": "zero2", "2": "zero2", "no-shard": "none", "3": "none"}


def accelerate_pairs(doc: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], list[str]]:
    """An accelerate config: distributed type (FSDP / DeepSpeed plugin), mixed precision, processes."""
    pairs: list[tuple[str, Any]] = []
    refs: list[str] = []
    kind = str(doc.get("distributed_type", "")).upper()
    if kind == "FSDP":
        fsdp = doc.get("fsdp_config") if isinstance(doc.get("fsdp_config"), Mapping) else {}
        strategy = str(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")).lower().replace("_", "-")
        pairs.append(("sharding", _FSDP_STRATEGIES.get(strategy, "fsdp")))
        if fsdp.get("fsdp_offload_params") is True:
            pairs.append(("offload", "params"))
        if fsdp.get("fsdp_activation_checkpointing") is True:
            pairs.append(("checkpointing", "true"))
    elif kind == "DEEPSPEED":
        ds = doc.get("deepspeed_config") if isinstance(doc.get("deepspeed_config"), Mapping) else {}
        if isinstance(ds.get("deepspeed_config_file"), str):
            refs.append(ds["deepspeed_config_file"])
        if _stage(ds.get("zero_stage")):
            pairs.append(("sharding", _stage(ds.get("zero_stage"))))
        if _on(ds.get("offload_param_device")):
            pairs.append(("offload", "params"))
        elif _on(ds.get("offload_optimizer_device")):
            pairs.append(("offload", "optimizer"))
        if isinstance(ds.get("gradient_accumulation_steps"), int):
            pairs.append(("grad-accum", str(ds["gradient_accumulation_steps"])))
    elif kind in ("MULTI_GPU", "NO", "MULTI_NODE"):
        pairs.append(("sharding", "none"))
    precision = doc.get("mixed_precision")
    if isinstance(precision, str):
        pairs.append(("precision", precision))
    processes = doc.get("num_processes")
    if isinstance(processes, int) and not isinstance(processes, bool) and processes > 0:
        pairs.append(("gpus", str(processes)))
    return pairs, refs


def _as_tokens(doc: Mapping[str, Any], depth: int = 0) -> list[str]:
    """A training-arguments mapping as the command line it stands for (nested sections flattened
    by their last name: Lightning's `trainer: {precision: ...}`); at most MAX_SETTINGS settings."""
    tokens: list[str] = []
    for name, value in doc.items():
        if not isinstance(name, str) or len(tokens) > 2 * MAX_SETTINGS:
            continue
        if isinstance(value, Mapping):
            if depth < 2:
                if "_component_" in value and name == "loss":
                    tokens += [f"loss={value['_component_']}"]
                else:
                    tokens += _as_tokens(value, depth + 1)
            continue
        if isinstance(value, bool):
            tokens += [f"--{name}", "true" if value else "false"]
        elif isinstance(value, (int, float, str)):
            tokens += [f"--{name}", str(value)]
        elif isinstance(value, list) and len(value) <= 64 and all(isinstance(v, (str, int)) for v in value):
            tokens += [f"--{name}", ",".join(str(v) for v in value)]
    return tokens


_LITERAL = re.compile(r"""\b(precision|strategy|accumulate_grad_batches)\s*=\s*(?:"([\w.-]{1,40})"|'([\w.-]{1,40})'|(\d{1,6})\b)""")


def lightning_pairs(text: str) -> list[tuple[str, Any]]:
    """`Trainer(precision="bf16-mixed", strategy="fsdp", ...)` written literally in a Lightning
    script: the first literal of each (a variable, `precision=args.precision`, says nothing)."""
    if "lightning" not in text or "Trainer(" not in text:
        return []
    said: dict[str, str] = {}
    for match in _LITERAL.finditer(text):
        said.setdefault(match.group(1), next(g for g in match.groups()[1:] if g))
    tokens = [t for name, value in said.items() for t in (f"--{name}", value)]
    return training_values(tokens)[0]


def config_pairs(path: str, text: str) -> tuple[list[tuple[str, Any]], list[str], list[str]]:
    """(key, raw value) pairs, further config files it names, notes."""
    if path.endswith(".py"):
        return lightning_pairs(text), [], []
    try:
        doc = _load(path, text)
    except Exception as exc:  # json/yaml errors of a user's file: skipped, said
        return [], [], [f"skipped config {path}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"]
    if not isinstance(doc, Mapping):
        return [], [], [f"skipped config {path}: not a mapping of settings"]
    if any(k in doc for k in ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size")) \
            or isinstance(doc.get("bf16"), Mapping) or isinstance(doc.get("fp16"), Mapping):
        return deepspeed_pairs(doc), [], []
    if "distributed_type" in doc or "compute_environment" in doc:
        pairs, refs = accelerate_pairs(doc)
        return pairs, refs, []
    pairs, refs, notes = training_values(_as_tokens(doc))
    return pairs, refs, notes
