"""The generalisation table: every policy, the oracle reference and the LP bound on held-out Philly
workloads at several loads, both restart penalties, with and without jobs that scale their batch.

    nice python benchmarks/dl2/generalise.py --out benchmarks/dl2/runs/generalise.json          # the full table
    nice python benchmarks/dl2/generalise.py --loads 0.5,1 --seeds 2 --penalties 30 --modes fixed \\
        --out benchmarks/dl2/runs/generalise-subset.json                                          # a cheap subset

A workload of load L is drawn as the Pollux artifact drew its load variants (SIMULATOR.md 2):
round(160 x L) Philly jobs submitted in the same 8-hour window of the day, so load 1.0 is the
8 evaluation workloads' load and 0.5 / 1.5 / 2.0 are their 80 / 240 / 320-job variants. Seeds
start at 40000: training draws from 0 and 10000, RL validation from 20000, the shipping decision
from 30000, so no run behind a shipped policy saw these. `dl2` is the shipped policy for the
penalty (`--policy-file` for another). Rows: the mean over seeds of each workload's mean JCT;
"DL2 share of oracle margin" is (DRF - DL2) / (DRF - srtf-oracle), the issue's reference; the
restart-aware reference (srtf-restart-oracle) is the column beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bound import lp_bound  # noqa: E402
from reference import OracleSRTF, OracleSRTFRestart  # noqa: E402

from slurm_liquid.errors import LiquidError  # noqa: E402
from slurm_liquid.policy import make_policy  # noqa: E402
from slurm_liquid.sim.engine import ClusterConfig, Simulator  # noqa: E402
from slurm_liquid.sim.oracle import OracleSpeedModel  # noqa: E402
from slurm_liquid.sim.workload import sample_philly  # noqa: E402

FIRST_SEED = 40_000
BASE_JOBS = 160  # load 1.0: the 8 evaluation workloads' 160 jobs in 8 hours


def workload(load: float, seed: int):
    return sample_philly(jobs=max(1, round(BASE_JOBS * load)), seed=seed)


def run_cell(load: float, seeds: list[int], penalty: float, scaling: bool, policies: list[str],
             bound: bool, policy_file: str | None) -> dict:
    config = ClusterConfig(restart_penalty=penalty, batch_scaling=scaling)
    speed = OracleSpeedModel(config.gpus_per_node, scaling)
    builders = {p: (lambda p=p: make_policy(p, speed, policy_file) if p == "dl2" and policy_file
                    else make_policy(p, speed)) for p in policies}
    builders["srtf-oracle"] = lambda: OracleSRTF(speed)
    builders["srtf-restart-oracle"] = lambda: OracleSRTFRestart(speed)
    per: dict[str, dict[int, float]] = {name: {} for name in builders}
    if bound:
        per["lp-bound"] = {}
    for seed in seeds:
        specs = workload(load, seed)
        sim = Simulator(specs, config, f"load{load:g}-seed{seed}")
        for name, build in builders.items():
            try:
                per[name][seed] = sim.run(build()).avg_jct_s
            except LiquidError as exc:  # a policy that stalls on this workload (the simulator's horizon)
                print(f"  {exc}", file=sys.stderr, flush=True)
                per[name][seed] = None
        if bound:
            per["lp-bound"][seed] = lp_bound(specs, config)
    # a policy that stalled on any seed has no mean (None, "stalled" in the table)
    return {"avg_jct_s": {k: None if None in v.values() else statistics.fmean(v.values()) for k, v in per.items()},
            "per_seed": per}


def _share(drf: float | None, dl2: float | None, orc: float | None) -> str:
    """DL2's share of the oracle reference's margin over DRF; no share where that margin is not positive."""
    if not (dl2 and drf and orc):
        return ""
    return f"{(drf - dl2) / (drf - orc):.0%}" if orc < drf else "n/a (oracle not below DRF)"


def table(cells: list[dict]) -> list[str]:
    names = list(cells[0]["avg_jct_s"])
    lines = ["| penalty | batch | load | " + " | ".join(names) + " | DL2 vs DRF | DL2 share of oracle margin | DL2 vs Tiresias | DRF / bound | DL2 / bound |",
             "|---" * (len(names) + 8) + "|"]
    for c in cells:
        m = c["avg_jct_s"]
        row = f"| {c['penalty']:g} | {'scaling' if c['scaling'] else 'fixed'} | {c['load']:g} | " + \
            " | ".join("stalled" if m[n] is None else f"{m[n]:.0f}" for n in names)
        dl2, drf, orc, tir, lb = (m.get(k) for k in ("dl2", "drf", "srtf-oracle", "tiresias", "lp-bound"))
        extra = [f"{dl2 / drf - 1:+.1%}" if dl2 and drf else "",
                 _share(drf, dl2, orc),
                 f"{dl2 / tir - 1:+.1%}" if dl2 and tir else "",
                 f"{drf / lb:.2f}x" if drf and lb else "", f"{dl2 / lb:.2f}x" if dl2 and lb else ""]
        lines.append(row + " | " + " | ".join(extra) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="0.5,1,1.5,2")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--penalties", default="30,150")
    ap.add_argument("--modes", default="fixed,scaling", help="fixed: the declared batch; scaling: --batch-scaling")
    ap.add_argument("--policies", default="fifo,drf,tiresias,optimus,dl2")
    ap.add_argument("--policy-file", help="DL2 policy file (default: the shipped one for the penalty)")
    ap.add_argument("--no-bound", action="store_true", help="skip the LP lower bound (the slowest column)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    seeds = list(range(FIRST_SEED, FIRST_SEED + args.seeds))
    policies = [p for p in args.policies.split(",") if p]
    out = {"seeds": seeds, "cells": []}
    for penalty in (float(p) for p in args.penalties.split(",")):
        for mode in args.modes.split(","):
            for load in (float(x) for x in args.loads.split(",")):
                t0 = time.perf_counter()
                cell = run_cell(load, seeds, penalty, mode == "scaling", policies, not args.no_bound, args.policy_file)
                cell.update(penalty=penalty, scaling=mode == "scaling", load=load, wall_s=time.perf_counter() - t0)
                out["cells"].append(cell)
                Path(args.out).write_text(json.dumps(out, indent=1))  # partial results survive an interrupted run
                print(f"penalty {penalty:g} {mode} load {load:g}: " +
                      ", ".join(f"{k} {'stalled' if v is None else format(v, '.0f')}" for k, v in cell["avg_jct_s"].items()) + f" ({cell['wall_s']:.0f} s)",
                      file=sys.stderr, flush=True)
    print("\n".join(table(out["cells"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
