"""Calibrate the prior's optimizer-step temporaries (OPTIMIZER_TEMP) independently of any model:
peak extra bytes of one torch optimizer step over weights + grads + state, per parameter byte.

Two layouts: a few large tensors (CUDA's foreach kernels allocate whole output lists, which this
mimics; the prior uses these numbers) and many small tensors (CPU foreach falls back to a loop per
tensor, so its temporaries stay small: CPU tensor-level peaks of real models sit lower).

    PYTHONPATH=. /tmp/vtorch/bin/python benchmarks/estimate/optimizer_temporaries.py
"""

from __future__ import annotations

import torch

from slurm_liquid.estimate.profile import _TensorPeak


LAYOUTS = {"few large": (4_000_000, 2_000_000, 1_000_000, 1000), "200 small": (35_000,) * 200}


def ratio(make, sizes) -> float:  # noqa: ANN001
    params = [torch.nn.Parameter(torch.randn(n)) for n in sizes]
    opt = make(params)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()                                  # creates the state
    for p in params:
        p.grad = torch.randn_like(p)
    counter = _TensorPeak()
    with counter.mode:
        opt.step()
    size = sum(p.numel() * 4 for p in params)
    return counter.peak / size


if __name__ == "__main__":
    print(f"torch {torch.__version__}: optimizer-step temporaries per fp32 parameter byte")
    for name, make in [("adam", lambda p: torch.optim.Adam(p, lr=1e-3)),
                       ("adamw", lambda p: torch.optim.AdamW(p, lr=1e-3)),
                       ("sgd-momentum", lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9)),
                       ("sgd", lambda p: torch.optim.SGD(p, lr=1e-3)),
                       ("rmsprop", lambda p: torch.optim.RMSprop(p, lr=1e-3)),
                       ("adagrad", lambda p: torch.optim.Adagrad(p, lr=1e-3))]:
        cells = "  ".join(f"{layout}: {ratio(make, sizes):.2f}" for layout, sizes in LAYOUTS.items())
        print(f"  {name:14s} {cells}")
