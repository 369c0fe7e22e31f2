"""The training command line of a batch script: launcher and training flags -> job-spec values.

Inferred values fill only the gaps the job's directives leave. Flags are read the way their
parsers read them: HF Trainer's booleans take `--bf16`, `--bf16 True` and `--bf16=True` (and
`--bf16 False` says no); a boolean flag before a positional argument does not swallow it; a
list flag (`--lora_target_modules q_proj v_proj`) takes every word up to the next flag.
`name=value` overrides (torchtune, Hydra, LightningCLI `trainer.precision=bf16-mixed`) are read by
their last dotted name. Launchers say how many processes (= GPUs) run: torchrun/`python -m
torch.distributed.run` `--nproc_per_node` x `--nnodes`, `deepspeed --num_gpus` x `--num_nodes`,
`accelerate launch --num_processes`, `srun -n`/`--ntasks`. Config files a command names
(`--deepspeed ds.json`, `accelerate launch --config_file fsdp.yaml`, a positional `train.yaml`) are
returned as references: only a user-side caller reads them (jobspec.launch).
"""

from __future__ import annotations

import re
from typing import Iterable

from slurm_liquid.jobspec.spec import KEYS
from slurm_liquid.jobspec.values import _norm_word

# normalised training flag -> directive key. Values go through the same parsers.
TRAINING_FLAGS: dict[str, str] = {
    **dict.fromkeys(["model", "arch", "a", "model-name", "model-type", "network", "net",
                     "model-name-or-path", "pretrained-model-name-or-path", "backbone", "base-model"], "model"),
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
    **dict.fromkeys(["lora-target-modules", "target-modules", "lora-target", "lora-targets",
                     "lora-modules"], "lora-targets"),
    **dict.fromkeys(["peft", "adapter", "finetuning-type", "peft-type"], "adapter"),
    **dict.fromkeys(["seq-len", "seq-length", "max-seq-length", "max-seq-len", "block-size",
                     "sequence-length", "max-length", "context-length", "max-source-length",
                     "model-max-length", "cutoff-len", "sequence-len", "max-model-len",
                     "max-position"], "seq-len"),
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
                     "grad-checkpoint", "recompute-activations", "checkpointing",
                     "enable-activation-checkpointing", "fsdp-activation-checkpointing"], "checkpointing"),
    **dict.fromkeys(["recompute-granularity"], "checkpointing"),
    **dict.fromkeys(["zero-stage", "sharding", "fsdp", "strategy"], "sharding"),
    **dict.fromkeys(["enable-activation-offloading", "activation-offloading",
                     "offload-activations"], "offload-activations"),
    **dict.fromkeys(["torch-compile", "compile"], "compile"),
    **dict.fromkeys(["optimizer-in-bwd", "optimizer-in-backward", "fused-optimizer-in-backward"],
                    "optimizer-in-backward"),
    **dict.fromkeys(["gpu-memory-utilization"], "gpu-memory-utilization"),
    **dict.fromkeys(["quantization-method", "quant-method", "quantization"], "precision"),
}
# bare boolean training flags that set a value (`--bf16`, `--bf16 True`; `--bf16 False` sets nothing)
BARE_FLAGS = {"fp16": ("precision", "fp16"), "bf16": ("precision", "bf16"),
              "amp": ("precision", "amp"), "half": ("precision", "fp16"),
              "fsdp": ("sharding", "fsdp"), "fp8": ("precision", "fp8"),
              "use-peft": ("adapter", "lora"), "use-lora": ("adapter", "lora"), "lora": ("adapter", "lora"),
              "qlora": ("adapter", "qlora"), "use-qlora": ("adapter", "qlora"),
              "load-in-4bit": ("precision", "int4"), "load-in-8bit": ("precision", "int8"),
              "use-flash-attn": ("attention", "flash"), "flash-attn": ("attention", "flash"),
              "use-flash-attention-2": ("attention", "flash"), "flash-attention": ("attention", "flash"),
              "use-flash-attention": ("attention", "flash"), "sdpa": ("attention", "sdpa"),
              "offload-optimizer": ("offload", "optimizer"), "cpu-offload": ("offload", "params"),
              "use-fsdp": ("sharding", "fsdp"), "use-deepspeed": ("sharding", "zero2")}
# flags whose value is a list (argparse nargs='+')
LIST_FLAGS = {"lora-target-modules", "target-modules", "lora-modules"}
# launcher flags: processes per node and nodes (torchrun, deepspeed, accelerate, srun)
PER_NODE = {"nproc-per-node", "num-gpus", "ntasks-per-node", "num-gpus-per-node"}
NODES = {"nnodes", "num-nodes", "num-machines", "N", "nodes"}
TOTAL = {"num-processes", "n", "ntasks", "np"}
# scripts that start their own processes (Lightning, LitGPT): `--devices 4 --num_nodes 2`, also as
# LightningCLI's `--trainer.devices=4`
SPAWNING = {"devices", "num-nodes"}
# flags naming a launch config file the estimator may read (user side only)
CONFIG_FLAGS = {"deepspeed", "deepspeed-config", "ds-config", "config-file", "fsdp-config", "config",
                "deepspeed-config-file"}
CONFIG_FILE = re.compile(r"\.(json|ya?ml)$", re.IGNORECASE)
# 16-bit load dtypes: the weights themselves are 16-bit, so an optimizer keeps 16-bit states too
PURE_DTYPES = {"bfloat16", "bf16", "float16", "fp16", "half", "torch.bfloat16", "torch.float16"}
_FSDP_WORDS = re.compile(r"^\s*(full_shard|shard_grad_op|hybrid_shard|hybrid_shard_zero2|no_shard|offload|"
                         r"auto_wrap)([\s,]+(full_shard|shard_grad_op|hybrid_shard|hybrid_shard_zero2|no_shard|"
                         r"offload|auto_wrap))*\s*$", re.IGNORECASE)
_TRUE = {"true", "1", "yes", "on", "y", "t"}
_FALSE = {"false", "0", "no", "off", "n", "f", "none"}
# words a boolean flag takes as its value (Megatron's checkpointing flags also say which kind)
_BOOL_WORDS = _TRUE | _FALSE | {"selective", "full"}


def is_boolean(name: str) -> bool:
    key = TRAINING_FLAGS.get(name)
    return name in BARE_FLAGS or (key is not None and KEYS[key].is_flag)


def command_flags(tokens: list[str]) -> Iterable[tuple[str, str | bool]]:
    """(name, value) of every flag and `name=value` override, names normalised (`_` -> `-`)."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token in ("-", "--"):
            continue
        if not token.startswith("-"):
            name, sep, value = token.partition("=")
            if sep and re.fullmatch(r"[A-Za-z_][\w.\-]*", name):   # an override: a.b.name=value
                parts = name.split(".")
                # torchtune/Hydra `loss._component_=...CEWithChunkedOutputLoss` names the component
                last = parts[-2] if parts[-1] == "_component_" and len(parts) > 1 else parts[-1]
                yield _norm_word(last), value
            elif CONFIG_FILE.search(token):
                yield "config", token                               # `llamafactory-cli train x.yaml`
            continue
        name, sep, value = token.lstrip("-").partition("=")
        raw_short = token.startswith("-") and not token.startswith("--") and len(name) == 1
        name = name if raw_short and name == "N" else _norm_word(name.rsplit(".", 1)[-1])
        if not sep:
            nxt = tokens[i] if i < len(tokens) else None
            if name == "fsdp" and nxt is not None and _FSDP_WORDS.match(nxt):
                value, i = nxt, i + 1                 # HF Trainer: --fsdp "full_shard offload auto_wrap"
            elif is_boolean(name):
                if nxt is not None and nxt.lower() in _BOOL_WORDS:
                    value, i = nxt, i + 1
                else:
                    value = True
            elif nxt is not None and not nxt.startswith("-"):
                value, i = nxt, i + 1
                while name in LIST_FLAGS and i < len(tokens) and not tokens[i].startswith("-") \
                        and not tokens[i].endswith(".py") and "=" not in tokens[i]:
                    value, i = f"{value},{tokens[i]}", i + 1
            else:
                value = True
        yield name, value


def truth(value: str | bool) -> bool | None:
    if isinstance(value, bool):
        return value
    word = value.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


def training_values(tokens: list[str]) -> tuple[list[tuple[str, str | bool]], list[str], list[str]]:
    """(key, raw value) pairs of the spec, config files named, and notes, from one command line."""
    pairs: list[tuple[str, str | bool]] = []
    configs: list[str] = []
    notes: list[str] = []
    if any(t == "vllm" or t.startswith("vllm.") or t.endswith("/vllm") for t in tokens):
        # vLLM (`vllm serve`, `python -m vllm.entrypoints...`): inference that reserves its share of the card
        pairs += [("mode", "inference"), ("runtime", "vllm")]
        served = [tokens[i + 2] for i in range(len(tokens) - 2) if tokens[i] == "vllm" and tokens[i + 1] == "serve"
                  and not tokens[i + 2].startswith("-")]
        pairs += [("model", _training_value("model", name)) for name in served[:1]]
    per_node = nodes = total = None
    momentum = dtype = None
    # the launcher's own options come before the training script (`x.py` or `-m module`)
    script_at = next((i for i, t in enumerate(tokens) if t.endswith(".py") or (i and tokens[i - 1] == "-m")),
                     len(tokens))
    if script_at < len(tokens) and tokens[script_at].endswith(".py"):
        configs.append(tokens[script_at])    # a Lightning script may say precision/strategy literally
    flags = [(name, value, True) for name, value in command_flags(tokens[:script_at])]
    flags += [(name, value, False) for name, value in command_flags(tokens[script_at:])]
    for name, value, launcher in flags:
        if isinstance(value, str) and "$" in value:
            if name in TRAINING_FLAGS or name in BARE_FLAGS or name in CONFIG_FLAGS:
                notes.append(f"ignored {name}={value}: a shell variable")
            continue
        if name in CONFIG_FLAGS:
            if isinstance(value, str) and CONFIG_FILE.search(value):
                configs.append(value)
            continue
        if name == "fsdp" and isinstance(value, str) and _FSDP_WORDS.match(value):
            words = value.lower().replace(",", " ").split()
            pairs.append(("sharding", "zero2" if "shard_grad_op" in words else
                          "none" if "no_shard" in words else "fsdp"))
            if "offload" in words:                    # FSDP CPUOffload: parameters (and the step) on the CPU
                pairs.append(("offload", "params"))
            continue
        if name in BARE_FLAGS:
            if truth(value):
                pairs.append(BARE_FLAGS[name])
            continue
        if name in ("momentum", "sgd-momentum"):
            momentum = value
        elif name in ("torch-dtype", "model-dtype") and isinstance(value, str) \
                and value.lower() in PURE_DTYPES | {"float32", "fp32", "torch.float32"}:
            dtype = value.lower()
        elif name in ("quantization-bit", "bits", "quant-bits") and isinstance(value, str):
            pairs.append(("precision", {"4": "int4", "8": "int8"}.get(value.strip(), value)))
        elif (launcher and name in PER_NODE | NODES | TOTAL or name in SPAWNING) and isinstance(value, str) \
                and value.isdigit():
            number = int(value)
            if name in PER_NODE or name == "devices":
                per_node = number
            elif name in NODES:
                nodes = number
            else:
                total = number
        elif name == "loss" and isinstance(value, str) and "chunked" in value.lower():
            pairs.append(("loss-chunks", "8"))    # torchtune CEWithChunkedOutputLoss: num_output_chunks=8
        elif name == "strategy" and isinstance(value, str) and "offload" in value.lower():
            pairs.append(("sharding", _training_value("sharding", value)))
            word = _norm_word(value)   # Lightning: deepspeed_stage_3_offload offloads the parameters too
            pairs.append(("offload", "params" if "stage-3" in word or "param" in word else "optimizer"))
        elif name in TRAINING_FLAGS:
            pairs.append((TRAINING_FLAGS[name], _training_value(TRAINING_FLAGS[name], value)))
    if dtype in PURE_DTYPES:
        # weights loaded in 16 bits train in 16 bits whatever autocast says: no fp32 master copy
        said = dict(pairs).get("precision")
        if said is None or str(said).lower() in ("bf16", "fp16", "amp", "true"):
            pairs = [p for p in pairs if p[0] != "precision"] + [("precision", "bf16-pure")]
    if total or per_node:
        pairs.append(("gpus", str(total or per_node * (nodes or 1))))
    if momentum not in (None, True) and any(k == "optimizer" and str(v).lower() == "sgd" for k, v in pairs):
        try:
            if float(momentum) > 0:
                pairs.append(("optimizer", "sgd-momentum"))
                pairs = [p for p in pairs if p != ("optimizer", "sgd")]
        except ValueError:
            pass
    return pairs, configs, notes


STRATEGIES = {"deepspeed-stage-1": "zero1", "deepspeed-stage-2": "zero2", "deepspeed-stage-3": "zero3",
              "deepspeed-stage-2-offload": "zero2", "deepspeed-stage-3-offload": "zero3",
              "deepspeed-stage-3-offload-parameters": "zero3", "deepspeed": "zero2",
              "ddp": "none", "dp": "none", "ddp-spawn": "none", "fsdp": "fsdp", "auto": "none"}


def _training_value(key: str, value: str | bool) -> str | bool:
    if isinstance(value, str) and key == "model":
        return value.rstrip("/").rsplit("/", 1)[-1]  # a hub path or a local directory
    if isinstance(value, str) and key == "sharding":
        word = _norm_word(value).strip("'\"")
        if word.isdigit():
            return f"zero{word}"
        return STRATEGIES.get(word, word)
    if isinstance(value, str) and key == "checkpointing" and _norm_word(value) in ("full", "selective"):
        return _norm_word(value)                  # Megatron --recompute-granularity
    if isinstance(value, str) and key == "precision":
        return value.strip("'\"")
    return value
