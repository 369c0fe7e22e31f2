"""Profiling harness: train a few steps of a catalogued model with PyTorch and record its peak memory.

On a CUDA device it records what a scheduler must reserve: the NVML "used" memory of the card
(CUDA context + allocator pool), the caching allocator's peak reserved and peak allocated bytes.
Without a GPU it records the *tensor-level* peak on the CPU (live tensor storage bytes counted by a
dispatch mode, i.e. weights + gradients + optimizer state + activations + temporaries, no CUDA
context, no allocator slack) and labels the row `measure=tensor` so it is never mistaken for a GPU
measurement. Rows use the history format (`slurm-liquid estimate train --history FILE`).

torch (and transformers, for transformer models) are imported only here, only when profiling runs.
"""

from __future__ import annotations

import csv
import sys
import time
import types
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from slurm_liquid.errors import LiquidError, UsageError
from slurm_liquid.estimate.catalog import ModelEntry

HISTORY_FIELDS = ["model", "batch-size", "grad-accum", "seq-len", "image-size", "precision",
                  "optimizer", "sharding", "checkpointing", "gpus", "measure", "measured_mib",
                  "allocated_mib", "reserved_mib", "gpu_name", "source"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise LiquidError("profiling needs PyTorch: pip install torch (and torchvision, "
                          "transformers for those models)") from None
    return torch


def import_torchvision() -> Any:
    try:
        import torchvision
    except RuntimeError:
        # A CUDA torchvision wheel next to a CPU torch fails registering its C++ ops' fake
        # kernels; the model definitions do not need those ops, so skip that registration.
        for name in [m for m in sys.modules if m.startswith("torchvision")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
    return torchvision


@dataclass(frozen=True)
class Config:
    model: str
    batch_size: int
    precision: str = "fp32"
    optimizer: str = "adamw"
    seq_len: int | None = None
    image_size: int | None = None
    checkpointing: bool = False
    steps: int = 3


def build_model(entry: ModelEntry, checkpointing: bool) -> Any:
    """A randomly initialised model (no weights are downloaded) for `entry`."""
    if entry.builder.startswith("torchvision:"):
        tv = import_torchvision()
        return tv.models.get_model(entry.builder.split(":", 1)[1], weights=None)
    if entry.builder.startswith("timm:"):
        try:
            import timm
        except ImportError:
            raise LiquidError("profiling this model needs: pip install timm") from None
        return timm.create_model(entry.builder.split(":", 1)[1], pretrained=False)
    if entry.builder.startswith("hf:"):
        try:
            import_torchvision()  # transformers imports it when present; apply the shim first
        except ImportError:
            pass
        try:
            import transformers
        except ImportError:
            raise LiquidError("profiling transformer models needs: pip install transformers") from None
        config_name, model_name = entry.builder.split(":", 1)[1].split("/")
        config = getattr(transformers, config_name)(**dict(entry.hf_config))
        model = getattr(transformers, model_name)(config)
        if checkpointing:
            model.gradient_checkpointing_enable()
        return model
    raise UsageError(f"model {entry.name}: the harness cannot build it (builder {entry.builder!r})")


def _batch(torch: Any, entry: ModelEntry, cfg: Config, device: str) -> tuple[Any, Any]:
    if entry.family in ("cnn", "vit", "detection"):
        side = cfg.image_size or entry.image_size
        x = torch.randn(cfg.batch_size, 3, side, side, device=device)
        return x, torch.randint(0, 1000, (cfg.batch_size,), device=device)
    seq = cfg.seq_len or entry.seq_len
    ids = torch.randint(100, min(entry.vocab, 30000), (cfg.batch_size, seq), device=device)
    return ids, ids


def _loss(torch: Any, entry: ModelEntry, model: Any, x: Any, y: Any) -> Any:
    if entry.builder.startswith(("torchvision:", "timm:")):
        out = model(x)
        out = out.logits if hasattr(out, "logits") else out
        return torch.nn.functional.cross_entropy(out, y)
    if entry.family == "encoder":  # sequence classification, as in the published BERT runs
        return model(input_ids=x, labels=torch.zeros(x.shape[0], dtype=torch.long, device=x.device)).loss
    if entry.family == "seq2seq":
        return model(input_ids=x, labels=y).loss
    return model(input_ids=x, labels=y).loss


def _optimizer(torch: Any, name: str, params: Iterable[Any]) -> Any:
    table = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD,
             "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "adafactor":
        import transformers
        return transformers.Adafactor(params, lr=1e-3, relative_step=False)
    if name not in table:
        raise UsageError(f"optimizer {name}: the harness supports {', '.join(sorted(table))}, "
                         "sgd-momentum, adafactor")
    return table[name](params, lr=1e-3)


class _TensorPeak:
    """Counts live tensor storage bytes created while active (CPU tensor-level peak)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        outer = self
        self.live = self.peak = 0
        self.seen: set[int] = set()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):  # noqa: ANN001
                out = func(*args, **(kwargs or {}))
                # in-place ops and views return an input's storage: not a new allocation
                inputs = {id(t.untyped_storage()) for t in tree_flatten((args, kwargs))[0]
                          if hasattr(t, "untyped_storage")}
                for t in tree_flatten(out)[0]:
                    if hasattr(t, "untyped_storage") and id(t.untyped_storage()) not in inputs:
                        outer._track(t.untyped_storage())
                outer.peak = max(outer.peak, outer.live)
                return out

        self.mode = Mode()

    def _track(self, storage: Any) -> None:
        key = id(storage)
        if key in self.seen:
            return
        size = storage.nbytes()
        self.seen.add(key)
        self.live += size
        weakref.finalize(storage, self._free, key, size)

    def _free(self, key: int, size: int) -> None:
        self.seen.discard(key)
        self.live -= size


def run_config(entry: ModelEntry, cfg: Config, device: str) -> dict[str, Any]:
    """Train cfg.steps steps; return one history row (MiB)."""
    torch = _torch()
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise LiquidError("--device cuda asked, but torch sees no CUDA device")
    torch.manual_seed(0)
    model = build_model(entry, cfg.checkpointing).to(device).train()
    opt = _optimizer(torch, cfg.optimizer, model.parameters())
    x, y = _batch(torch, entry, cfg, device)
    half = {"fp16": torch.float16, "amp": torch.float16, "bf16": torch.bfloat16}.get(cfg.precision)
    if cfg.precision == "bf16-pure":
        model = model.to(torch.bfloat16)
    if not cuda and half is torch.float16:
        half = torch.bfloat16  # CPU autocast is bf16 territory; same byte counts as fp16
    scaler = torch.amp.GradScaler("cuda") if cuda and half is torch.float16 else None

    def step() -> None:
        with torch.autocast(device.split(":")[0], dtype=half, enabled=half is not None):
            loss = _loss(torch, entry, model, x, y)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    row: dict[str, Any] = {"model": entry.name, "batch-size": cfg.batch_size, "gpus": 1,
                           "precision": cfg.precision, "optimizer": cfg.optimizer,
                           "checkpointing": str(cfg.checkpointing).lower(),
                           "seq-len": cfg.seq_len or (entry.seq_len if entry.family not in ("cnn", "vit") else ""),
                           "image-size": cfg.image_size or (entry.image_size if entry.family in ("cnn", "vit") else "")}
    start = time.perf_counter()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(cfg.steps):
            step()
        torch.cuda.synchronize()
        mib = 2 ** 20
        row.update(measure="nvml", measured_mib=round(_nvml_used_mib(torch, device)),
                   allocated_mib=round(torch.cuda.max_memory_allocated() / mib),
                   reserved_mib=round(torch.cuda.max_memory_reserved() / mib),
                   gpu_name=torch.cuda.get_device_name(device))
    else:
        base = sum(t.untyped_storage().nbytes() for t in model.parameters())
        counter = _TensorPeak()
        with counter.mode:
            for _ in range(cfg.steps):
                step()
        row.update(measure="tensor", measured_mib=round((base + counter.peak) / 2 ** 20, 1),
                   gpu_name="cpu (tensor-level, no GPU)")
    row["source"] = (f"slurm-liquid estimate profile, torch {torch.__version__}, "
                     f"{cfg.steps} steps, {time.perf_counter() - start:.1f} s")
    return row


def _nvml_used_mib(torch: Any, device: str) -> float:
    """This process's GPU memory as NVML sees it (what Slurm's GPU really loses)."""
    try:
        import pynvml
    except ImportError:
        return torch.cuda.max_memory_reserved() / 2 ** 20
    import os
    pynvml.nvmlInit()
    try:
        index = torch.cuda.current_device() if device == "cuda" else int(device.split(":")[1])
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory:
                return proc.usedGpuMemory / 2 ** 20
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2 ** 20  # containers hide pids
    finally:
        pynvml.nvmlShutdown()


def run_grid(entries: list[ModelEntry], batch_sizes: list[int], precisions: list[str],
             optimizer: str, device: str, steps: int, out: Path,
             seq_len: int | None = None, image_size: int | None = None) -> list[dict[str, Any]]:
    """Every model x batch x precision, each in this process; an OOM is recorded and skipped."""
    torch = _torch()
    rows = []
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not out.exists()
    with out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=HISTORY_FIELDS, extrasaction="ignore")
        if new:
            writer.writeheader()
        for entry in entries:
            for batch in batch_sizes:
                for precision in precisions:
                    cfg = Config(entry.name, batch, precision, optimizer, seq_len, image_size,
                                 steps=steps)
                    try:
                        row = run_config(entry, cfg, device)
                    except torch.cuda.OutOfMemoryError:
                        print(f"{entry.name} batch {batch} {precision}: out of memory", file=sys.stderr)
                        torch.cuda.empty_cache()
                        continue
                    writer.writerow(row)
                    handle.flush()
                    rows.append(row)
                    print(f"{entry.name} batch {batch} {precision}: {row['measure']} "
                          f"{row['measured_mib']} MiB", file=sys.stderr)
                    if device.startswith("cuda"):
                        torch.cuda.empty_cache()
    return rows


def activation_coefficient(entry: ModelEntry, image_size: int | None = None) -> float:
    """Bytes saved for backward per sample in fp32 (parameters excluded) at one sample: the
    catalogue's activation coefficient for convolutional and vision models."""
    torch = _torch()
    model = build_model(entry, checkpointing=False).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    cfg = Config(entry.name, 2, image_size=image_size)
    x, y = _batch(torch, entry, cfg, "cpu")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _loss(torch, entry, model, x, y)
    return sum(saved.values()) / 2
