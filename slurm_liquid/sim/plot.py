"""Comparison figure: JCT distribution per policy and GPUs in use over time."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from slurm_liquid.errors import LiquidError
from slurm_liquid.sim.engine import SimResult


def plot_comparison(results: Mapping[str, Mapping[str, SimResult]], path: str | Path, title: str = "") -> Path:
    """Write a two-panel PNG: JCT CDF (all workloads pooled) and GPU utilisation over time."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        raise LiquidError("--plot needs matplotlib: pip install 'slurm-liquid[plot]'") from None
    fig, (ax_cdf, ax_use) = plt.subplots(1, 2, figsize=(12, 4.5))
    for policy, per_wl in results.items():
        jcts = np.sort([j for r in per_wl.values() for j in r.jcts.values()]) / 3600
        if len(jcts):
            ax_cdf.plot(jcts, np.arange(1, len(jcts) + 1) / len(jcts), label=policy)
        first = next(iter(per_wl.values()))
        if first.times:
            total = first.gpus_total or 1
            ax_use.step(np.asarray(first.times) / 3600, np.asarray(first.gpus_in_use) / total,
                        where="post", label=f"{policy} ({first.workload})")
    ax_cdf.set_xscale("log")
    ax_cdf.set(xlabel="job completion time (h, log scale)", ylabel="fraction of jobs", title="JCT CDF")
    ax_use.set(xlabel="time (h)", ylabel="share of GPUs allocated", title="GPU allocation over time", ylim=(0, 1.05))
    for ax in (ax_cdf, ax_use):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise LiquidError(f"cannot write plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path
