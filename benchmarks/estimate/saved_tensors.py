"""Bytes that transformers' code saves for backward, counted with autograd's saved-tensor hooks: the
MLP activation (GPT-2's `gelu_new` chain of ops vs torch's fused gelu) per intermediate element, and
the eager attention probabilities (GPT-2's and BERT's `eager_attention_forward`) per score element.
These are the coefficients of `_python_gelu_extra` and `_eager_probs_bytes` in
slurm_liquid/estimate/prior.py, checked against the code rather than fitted to peaks.

    python benchmarks/estimate/saved_tensors.py                 # CPU: fp32 and bf16 tensors
    python benchmarks/estimate/saved_tensors.py --device cuda   # + bf16 autocast (the mixed layout)

Each distinct storage is counted once (a tensor saved by two ops costs once). On the CPU, dropout
saves a mask of the input's dtype; CUDA's fused dropout saves a 1-byte mask.
"""

from __future__ import annotations

import argparse
import contextlib
import types
from typing import Callable

import torch
from transformers.activations import GELUActivation, NewGELUActivation
from transformers.models.bert.modeling_bert import eager_attention_forward as bert_eager
from transformers.models.gpt2.modeling_gpt2 import eager_attention_forward as gpt2_eager


def saved_bytes(run: Callable[[], object], exclude: tuple[torch.Tensor, ...] = ()) -> int:
    """Bytes of the distinct storages autograd saves while `run` executes, less `exclude`'s."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    for tensor in exclude:
        storages.pop(tensor.untyped_storage().data_ptr(), None)
    return sum(storages.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    modes = [("fp32", torch.float32, False), ("bf16 tensors", torch.bfloat16, False)]
    if device.type == "cuda":
        modes.append(("bf16 autocast over fp32", torch.float32, True))
    print(f"torch {torch.__version__} on {device}")
    for label, dtype, autocast in modes:
        make = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
        # MLP activation: the input x comes from a linear under autocast (16-bit); bytes per element
        x = torch.randn(64, 1024, device=device, dtype=torch.bfloat16 if autocast else dtype,
                        requires_grad=True)
        for act in (GELUActivation(), NewGELUActivation()):
            with make():
                total = saved_bytes(lambda: act(x))
            print(f"{label:26s} {type(act).__name__:18s} saves {total / x.numel():5.2f} bytes per element")
        # eager attention: bytes per score element beyond q, k, v themselves
        heads, seq, dim = 4, 256, 32
        qkv_dtype = torch.bfloat16 if autocast else dtype
        q, k, v = (torch.randn(2, heads, seq, dim, device=device, dtype=qkv_dtype, requires_grad=True)
                   for _ in range(3))
        module = types.SimpleNamespace(training=True)
        for name, fn in (("gpt2", gpt2_eager), ("bert", bert_eager)):
            for p in (0.0, 0.1):
                with make():
                    total = saved_bytes(lambda: fn(module, q, k, v, None, dropout=p), exclude=(q, k, v))
                print(f"{label:26s} {name} eager dropout={p}: {total / (2 * heads * seq * seq):5.2f} "
                      "bytes per score element")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
