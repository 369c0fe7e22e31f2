"""Simulator benchmark: baselines on the 8 Pollux workloads, calibration, speed, and a Philly scale run.

Run from the repository root (takes ~5 minutes on 2 cores; use `nice`):

    nice /tmp/v/bin/python benchmarks/sim/run_benchmarks.py            # everything
    nice /tmp/v/bin/python benchmarks/sim/run_benchmarks.py --no-philly  # skip the 10,000-job run

Writes results.md, results.csv, jct_by_policy.png and jct_cdf.png beside this script.
"""

from __future__ import annotations

import argparse
import csv
import platform
import statistics
import time
from pathlib import Path

from slurm_liquid.sim.apps import DATA_DIR
from slurm_liquid.sim.engine import ClusterConfig
from slurm_liquid.sim.plot import plot_comparison
from slurm_liquid.sim.runner import make_placer, run_all
from slurm_liquid.sim.workload import BUNDLED_WORKLOADS, load_philly, load_workload

HERE = Path(__file__).resolve().parent
POLICIES = ["fifo", "drf", "tiresias", "optimus"]
PENALTIES = [30.0, 150.0]


def published() -> dict[tuple[str, str], float]:
    with (DATA_DIR / "published_avg_jct.csv").open() as fh:
        return {(r["workload"], r["policy"]): float(r["avg_jct_s"]) for r in csv.DictReader(fh)}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-philly", action="store_true")
    ap.add_argument("--philly-jobs", type=int, default=10000)
    args = ap.parse_args()
    workloads = load_workload(BUNDLED_WORKLOADS)
    pub = published()
    md = ["# Simulator benchmark", "",
          f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          "single process. Reproduce: `nice python benchmarks/sim/run_benchmarks.py`.", ""]
    rows = []
    all_results = {}
    md += ["## Baselines on the 8 Pollux workloads (16 x 4 GPUs, greedy placement)", "",
           "Mean over the 8 workloads of each workload's mean JCT and makespan; utilisation = GPU-seconds "
           "held by unfinished jobs (restart delays included) / (64 GPUs x makespan).", "",
           "| restart penalty | policy | mean JCT (h) | makespan (h) | GPU utilisation | restarts | wall time, 8 workloads (s) |",
           "|---|---|---|---|---|---|---|"]
    total_time = {}
    for penalty in PENALTIES:
        config = ClusterConfig(restart_penalty=penalty)
        results, total_time[penalty] = {}, 0.0
        for policy in POLICIES:
            res, secs = timed(lambda: run_all(workloads, [policy], config)[policy])
            results[policy] = res
            total_time[penalty] += secs
            jct = statistics.fmean(r.avg_jct_s for r in res.values())
            mk = statistics.fmean(r.makespan_s for r in res.values())
            util = statistics.fmean(r.gpu_utilisation for r in res.values())
            restarts = sum(r.restarts for r in res.values())
            md.append(f"| {penalty:g} s | {policy} | {jct / 3600:.3f} | {mk / 3600:.2f} | {util:.1%} | {restarts} | {secs:.1f} |")
            for name, r in res.items():
                rows.append({"penalty_s": penalty, "policy": policy, "workload": name, "avg_jct_s": r.avg_jct_s,
                             "makespan_s": r.makespan_s, "gpu_utilisation": round(r.gpu_utilisation, 4),
                             "restarts": r.restarts, "published_avg_jct_s": pub.get((name, policy), "")})
        all_results[penalty] = results
        md.append(f"| {penalty:g} s | all 4 policies x 8 workloads | | | | | **{total_time[penalty]:.1f}** |")
    md += ["", "Speed target: all 8 workloads x 4 policies under 120 s. Measured: "
           + ", ".join(f"{t:.1f} s at penalty {p:g} s" for p, t in total_time.items())
           + " (the first includes loading the traces and building the interpolators).", ""]

    md += ["## Calibration against the artifact's published mean JCT (penalty 30 s)", "",
           "| workload | Tiresias (ours) | Tiresias (published) | Optimus (ours) | Optimus (published) | Pollux (published) |",
           "|---|---|---|---|---|---|"]
    res30 = all_results[30.0]
    worst = 0.0
    for name in workloads:
        t, o = res30["tiresias"][name].avg_jct_s, res30["optimus"][name].avg_jct_s
        pt, po = pub[(name, "tiresias")], pub[(name, "optimus")]
        worst = max(worst, abs(t / pt - 1), abs(o / po - 1))
        md.append(f"| {name} | {t:.2f} | {pt} | {o:.2f} | {po} | {pub[(name, 'pollux')]} |")
    md += ["", f"Largest relative deviation: {worst:.2e} (the published file rounds to 0.1 s).", ""]

    # Liquid best-fit versus the artifact's greedy rule when the tree has several leaf switches.
    md += ["## Placement: greedy vs Liquid best-fit (4 leaf switches of 4 nodes, 10% cross-switch slowdown)", "",
           "| policy | placement | mean JCT (h) | makespan (h) |", "|---|---|---|---|"]
    for kind in ("greedy", "liquid"):
        config, placer = make_placer(kind, ClusterConfig(nodes_per_switch=4, cross_switch_slowdown=0.1))
        res = run_all(workloads, ["tiresias", "optimus"], config, placer)
        for policy, per in res.items():
            md.append(f"| {policy} | {kind} | {statistics.fmean(r.avg_jct_s for r in per.values()) / 3600:.3f} | "
                      f"{statistics.fmean(r.makespan_s for r in per.values()) / 3600:.2f} |")
    md.append("")

    if not args.no_philly:
        specs, load_s = timed(lambda: load_philly(jobs=args.philly_jobs, seed=0, time_scale=0.1))
        config = ClusterConfig(nodes=256, gpus_per_node=4)
        md += [f"## Scale: {args.philly_jobs} Philly-derived jobs on 256 x 4 = 1,024 GPUs", "",
               f"Workload: `load_philly(jobs={args.philly_jobs}, seed=0, time_scale=0.1)` (arrivals compressed 10x, "
               f"span {specs[-1].time / 3600:.1f} h); loading took {load_s:.1f} s. Target: under 600 s per run.", "",
               "| policy | mean JCT (h) | makespan (h) | GPU utilisation | restarts | decisions | wall time (s) |",
               "|---|---|---|---|---|---|---|"]
        for policy in POLICIES:
            res, secs = timed(lambda: run_all({"philly": specs}, [policy], config)[policy]["philly"])
            md.append(f"| {policy} | {res.avg_jct_s / 3600:.2f} | {res.makespan_s / 3600:.1f} | "
                      f"{res.gpu_utilisation:.1%} | {res.restarts} | {len(res.times)} | {secs:.1f} |")
            print(md[-1], flush=True)
        md.append("")

    plot_comparison(all_results[30.0], HERE / "jct_cdf.png", title="8 Pollux workloads, restart penalty 30 s")
    bar_chart(all_results, HERE / "jct_by_policy.png")
    md += ["![JCT CDF and allocation over time](jct_cdf.png)", "", "![mean JCT by policy](jct_by_policy.png)", ""]
    with (HERE / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (HERE / "results.md").write_text("\n".join(md))
    print("\n".join(md))


def bar_chart(all_results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(all_results)
    for k, (penalty, results) in enumerate(all_results.items()):
        means = [statistics.fmean(r.avg_jct_s for r in results[p].values()) / 3600 for p in POLICIES]
        ax.bar(np.arange(len(POLICIES)) + k * width, means, width, label=f"restart penalty {penalty:g} s")
    ax.set_xticks(np.arange(len(POLICIES)) + width * (len(all_results) - 1) / 2, POLICIES)
    ax.set(ylabel="mean JCT over 8 workloads (h)", title="Baselines on the Pollux workloads (64 GPUs)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
