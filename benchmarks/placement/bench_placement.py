"""Placement speed and quality on a 4,096-node x 8-GPU, three-level switch tree.

    nice /tmp/v/bin/python benchmarks/placement/bench_placement.py [--requests 1000] [--seed 0]

Writes results.md, results.csv and placement.png next to this file. Every placer runs the
same requests from the same random occupancy, in one process, so the numbers side by side
are comparable; times exclude process start-up.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from slurm_liquid.placement.base import ClusterState, NodeState, Placement, PlacementRequest
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.placement.ga import GroupingGA
from slurm_liquid.placement.liquid import LiquidBestFit
from slurm_liquid.placement.quality import job_quality, whole_node_slots
from slurm_liquid.topology import Topology

HERE = Path(__file__).parent
FANOUTS = (8, 16, 32)  # 8 spines x 16 leaves x 32 nodes = 4,096 nodes
GPUS = 8
# Job sizes in GPUs and their shares, roughly those of public GPU-cluster traces (Philly, Helios):
# most jobs are small, a few are large.
SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
SHARES = (0.40, 0.15, 0.15, 0.17, 0.07, 0.035, 0.015, 0.01)
PLACERS = ("liquid", "slurm", "first-fit", "random")


def occupancy(topology: Topology, rng: np.random.Generator, busy: float) -> ClusterState:
    """Random free GPUs: a share of nodes wholly free, some wholly busy, the rest partly used."""
    whole_free, whole_busy = (1 - busy) * 0.6, busy * 0.6
    kind = rng.choice(3, size=len(topology), p=[whole_free, whole_busy, 1 - whole_free - whole_busy])
    free = np.where(kind == 0, GPUS, np.where(kind == 1, 0, rng.integers(1, GPUS, size=len(topology))))
    return ClusterState({n: NodeState(n, GPUS, int(f)) for n, f in zip(topology.nodes, free)})


def workload(rng: np.random.Generator, count: int) -> list[PlacementRequest]:
    sizes = rng.choice(SIZES, size=count, p=SHARES)
    return [PlacementRequest(f"j{i}", int(g)) for i, g in enumerate(sizes)]


def quality(topology: Topology, state: ClusterState, placements: Sequence[Placement]) -> dict[str, float]:
    placed = [p for p in placements if p.nodes is not None]
    multi = [job_quality(topology, p.nodes) for p in placed if sum(p.nodes.values()) > 1]  # type: ignore[arg-type]
    after = state
    for p in placements:
        after = after.take(p)
    return {
        "jobs placed": len(placed),
        "GPUs placed": sum(sum(p.nodes.values()) for p in placed),  # type: ignore[union-attr]
        "nodes per job": statistics.fmean(q.nodes for q in multi),
        "switches spanned": statistics.fmean(q.switches_spanned for q in multi),
        "jobs across leaves": sum(len(q.leaf_switches) > 1 for q in multi),
        "cross-switch GPU pairs": sum(q.cross_switch_pairs for q in multi),
        "network cost": statistics.fmean(q.network_cost for q in multi),
        "8-GPU jobs still fitting": whole_node_slots(after, GPUS),
    }


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _per(start: tuple[float, float], count: int) -> tuple[float, float]:
    """(wall, CPU) milliseconds per item since `start`."""
    wall, cpu = _clocks()
    return (wall - start[0]) * 1e3 / count, (cpu - start[1]) * 1e3 / count


def time_immediate(placer: Any, requests: Sequence[PlacementRequest], state: ClusterState) -> dict[str, Any]:
    placer.place_all(requests[:5], state)  # warm the index cache and numpy
    start = _clocks()
    placements = placer.place_all(requests, state)
    batch_wall, batch_cpu = _per(start, len(requests))
    # one call per request, each on a state object it has never seen: pays for reading the state
    fresh = [ClusterState(dict(state.nodes)) for _ in range(20)]
    start = _clocks()
    for request, s in zip(requests, fresh):
        placer.place(request, s)
    single_wall, single_cpu = _per(start, len(fresh))
    return {"ms per placement (all in one call)": batch_wall, "CPU ms per placement (all in one call)": batch_cpu,
            "ms per call (fresh state)": single_wall, "CPU ms per call (fresh state)": single_cpu,
            "_placements": placements}


def batch_mode(topology: Topology, requests: Sequence[PlacementRequest], state: ClusterState, seeds: int,
               budget: float) -> list[dict[str, float]]:
    """64-job batches: the GA against the same jobs placed one by one."""
    rows = []
    liquid = LiquidBestFit(topology)
    for seed in range(seeds):
        batch = list(requests[seed * 64:(seed + 1) * 64])
        ga = GroupingGA(topology, seed=seed, time_budget_s=budget)
        start = _clocks()
        planned = ga.place_all(batch, state)
        wall_ms, cpu_ms = _per(start, 1)
        immediate = liquid.place_all(batch, state)
        cost = {name: _plan_cost(ga, state, batch, plan) for name, plan in (("ga", planned), ("immediate", immediate))}
        q_ga, q_imm = quality(topology, state, planned), quality(topology, state, immediate)
        rows.append({"seed": seed, "seconds": wall_ms / 1e3, "CPU seconds": cpu_ms / 1e3, "generations": ga.last_generations,
                     "cost immediate": cost["immediate"][2], "cost ga": cost["ga"][2],
                     "wide immediate": cost["immediate"][1], "wide ga": cost["ga"][1],
                     "cross pairs immediate": q_imm["cross-switch GPU pairs"],
                     "cross pairs ga": q_ga["cross-switch GPU pairs"],
                     "8-GPU slots immediate": q_imm["8-GPU jobs still fitting"],
                     "8-GPU slots ga": q_ga["8-GPU jobs still fitting"],
                     "GPUs placed immediate": q_imm["GPUs placed"], "GPUs placed ga": q_ga["GPUs placed"]})
    return rows


def _plan_cost(ga: GroupingGA, state: ClusterState, batch: Sequence[PlacementRequest],
               placements: Sequence[Placement]) -> tuple[int, int, float]:
    snap = ga.tree.snapshot(state)
    groups = [None if p.nodes is None else ga.tree.allocation_of(p.nodes) for p in placements]
    for group in groups:
        snap.take(group or {})
    return ga.cost(ga.tree.snapshot(state), batch, groups, snap.free)


def markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["cross-switch GPU pairs", "network cost", "nodes per job", "8-GPU jobs still fitting",
               "CPU ms per placement (all in one call)"]
    scenarios = sorted({r["scenario"] for r in rows})
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.6))
    width = 0.8 / len(scenarios)
    for ax, metric in zip(axes, metrics):
        for k, scenario in enumerate(scenarios):
            sub = [r for r in rows if r["scenario"] == scenario]
            xs = np.arange(len(sub)) + k * width
            ax.bar(xs, [r[metric] for r in sub], width, label=scenario)
            ax.set_xticks(np.arange(len(sub)) + width * (len(scenarios) - 1) / 2, [r["placer"] for r in sub],
                          rotation=30)
        ax.set_title(metric, fontsize=10)
    axes[0].legend(title="occupancy", fontsize=8)
    fig.suptitle(f"placement on {len_nodes():,} nodes x {GPUS} GPUs, three switch levels", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def len_nodes() -> int:
    return int(np.prod(FANOUTS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=5, help="64-job batches for batch mode")
    parser.add_argument("--budget", type=float, default=0.5, help="GA time budget per batch, seconds")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()

    topology = Topology.tree(FANOUTS)
    rows: list[dict[str, Any]] = []
    for scenario, busy in (("half busy", 0.5), ("mostly busy", 0.8)):
        rng = np.random.default_rng(args.seed)
        state = occupancy(topology, rng, busy)
        requests = workload(rng, args.requests)
        variants: list[tuple[str, Any]] = [(name, make_placer(name, topology)) for name in PLACERS]
        variants += [("liquid a=0", LiquidBestFit(topology, alpha=0.0)), ("liquid a=1", LiquidBestFit(topology, alpha=1.0))]
        for label, placer in variants:
            timing = time_immediate(placer, requests, state)
            placements = timing.pop("_placements")
            row = {"scenario": scenario, "placer": label, "free GPUs before": state.gpus_free,
                   **timing, **quality(topology, state, placements)}
            rows.append(row)
            print(scenario, label, {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        slurm = next(r for r in rows if r["scenario"] == scenario and r["placer"] == "slurm")
        for row in rows:
            if row["scenario"] == scenario:
                base = slurm["cross-switch GPU pairs"]
                row["cross pairs / slurm"] = row["cross-switch GPU pairs"] / base if base else "n/a"
                row["8-GPU slots / slurm"] = row["8-GPU jobs still fitting"] / slurm["8-GPU jobs still fitting"]
                row["network cost / slurm"] = row["network cost"] / slurm["network cost"]

    rng = np.random.default_rng(args.seed)
    state = occupancy(topology, rng, 0.8)
    requests = workload(rng, 64 * args.batches)
    batches = batch_mode(topology, requests, state, args.batches, args.budget)
    for b in batches:
        print("batch", {k: round(v, 3) if isinstance(v, float) else v for k, v in b.items()}, flush=True)

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    columns = list(rows[0])
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out / "placement.png")
    quality_cols = ["scenario", "placer", "jobs placed", "GPUs placed", "nodes per job", "switches spanned",
                    "jobs across leaves", "cross-switch GPU pairs", "cross pairs / slurm", "network cost",
                    "network cost / slurm", "8-GPU jobs still fitting", "8-GPU slots / slurm"]
    timing_cols = ["scenario", "placer", "ms per placement (all in one call)", "CPU ms per placement (all in one call)",
                   "ms per call (fresh state)", "CPU ms per call (fresh state)"]
    batch_cols = list(batches[0])
    text = [
        "# Placement benchmark",
        "",
        f"`nice /tmp/v/bin/python benchmarks/placement/bench_placement.py --requests {args.requests} "
        f"--seed {args.seed} --batches {args.batches} --budget {args.budget}`",
        "",
        f"Tree: {' x '.join(map(str, FANOUTS))} (spines x leaves x nodes) = {len_nodes():,} nodes x {GPUS} GPUs. "
        f"{args.requests} requests with sizes {SIZES} GPUs drawn with shares {SHARES}; "
        "the same requests from the same random occupancy for every placer, placed in order. "
        "Quality columns count jobs of two or more GPUs. "
        f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"shared with other work (load average {os.getloadavg()[0]:.0f} at the end on {os.cpu_count()} CPUs), so "
        "wall times are upper bounds and CPU times (process time) are the better measure.",
        "",
        "## Quality", "", markdown(rows, quality_cols), "",
        "## Immediate-mode speed", "", markdown(rows, timing_cols), "",
        f"## Batch mode: grouping GA on 64-job batches ({args.budget} s budget, 'mostly busy' cluster)", "",
        "Cost is the GA's own plan cost (lower is better; see `GroupingGA.cost`); 'wide' counts jobs spread "
        "wider than the smallest scope that held them.", "",
        markdown(batches, batch_cols), "",
        "![placement](placement.png)", "",
    ]
    (out / "results.md").write_text("\n".join(text))
    print(f"wrote {out / 'results.md'}")


if __name__ == "__main__":
    main()
