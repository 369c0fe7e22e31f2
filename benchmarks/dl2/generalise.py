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
"DL2 share of the best oracle's margin" is (DRF - DL2) / (DRF - the best of srtf-oracle,
srtf-restart-oracle and completion-rate-oracle), so a stronger reference makes the share harder to earn. Below the table,
`targets` checks issue 22's every-load targets per penalty and batch mode.
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

from slurm_liquid.sim.bound import lp_bound  # noqa: E402
from reference import REFERENCES as ORACLES  # noqa: E402

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
    builders.update({name: (lambda cls=cls: cls(speed)) for name, cls in ORACLES.items()})
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


REFERENCES = tuple(ORACLES)  # the oracle references; the best one sets the margin


def best_reference(m: dict) -> float | None:
    """The lower mean JCT of the oracle references a cell ran (each is a rule, not an optimum, so the
    margin DL2 is measured against is the larger of theirs)."""
    got = [m[k] for k in REFERENCES if m.get(k)]
    return min(got) if got else None


def share(drf: float | None, dl2: float | None, orc: float | None) -> float | None:
    """DL2's share of the oracle reference's margin over DRF; None where that margin is not positive."""
    if not (dl2 and drf and orc) or orc >= drf:
        return None
    return (drf - dl2) / (drf - orc)


def _share_text(drf: float | None, dl2: float | None, orc: float | None) -> str:
    if not (dl2 and drf and orc):
        return ""
    got = share(drf, dl2, orc)
    return "n/a (oracle not below DRF)" if got is None else f"{got:.0%}"


def table(cells: list[dict]) -> list[str]:
    names = list(cells[0]["avg_jct_s"])
    lines = ["| penalty | batch | load | " + " | ".join(names) + " | DL2 vs DRF | DL2 share of the best oracle's margin | DL2 vs Tiresias | DRF / bound | DL2 / bound |",
             "|---" * (len(names) + 8) + "|"]
    for c in cells:
        m = c["avg_jct_s"]
        row = f"| {c['penalty']:g} | {'scaling' if c['scaling'] else 'fixed'} | {c['load']:g} | " + \
            " | ".join("stalled" if m[n] is None else f"{m[n]:.0f}" for n in names)
        dl2, drf, tir, lb = (m.get(k) for k in ("dl2", "drf", "tiresias", "lp-bound"))
        extra = [f"{dl2 / drf - 1:+.1%}" if dl2 and drf else "",
                 _share_text(drf, dl2, best_reference(m)),
                 f"{dl2 / tir - 1:+.1%}" if dl2 and tir else "",
                 f"{drf / lb:.2f}x" if drf and lb else "", f"{dl2 / lb:.2f}x" if dl2 and lb else ""]
        lines.append(row + " | " + " | ".join(extra) + " |")
    return lines


def targets(cells: list[dict]) -> list[str]:
    """Issue 22's every-load targets per penalty and batch mode: DL2 below DRF in every cell, on average
    at least half of the best oracle's margin over DRF (cells where that margin is positive), never
    more than 5% above Tiresias. A stalled DL2 fails all three."""
    lines = []
    groups: dict[tuple, list[dict]] = {}
    for c in cells:
        groups.setdefault((c["penalty"], c["scaling"]), []).append(c["avg_jct_s"])
    for (penalty, scaling), ms in groups.items():
        if not all("dl2" in m and "drf" in m for m in ms):
            continue
        stalled = sum(m["dl2"] is None for m in ms)
        ran = [m for m in ms if m["dl2"] is not None]
        below = sum(m["drf"] is not None and m["dl2"] < m["drf"] for m in ran)
        shares = [s for s in (share(m["drf"], m["dl2"], best_reference(m)) for m in ran) if s is not None]
        over_tir = [m["dl2"] / m["tiresias"] - 1 for m in ran if m.get("tiresias")]
        mean_share = sum(shares) / len(shares) if shares else None
        met = (not stalled and below == len(ms) and mean_share is not None and mean_share >= 0.5
               and (not over_tir or max(over_tir) <= 0.05))
        lines.append(f"| {penalty:g} | {'scaling' if scaling else 'fixed'} | {below} of {len(ms)}"
                     + (f" ({stalled} stalled)" if stalled else "") + " | "
                     + ("" if mean_share is None else f"{mean_share:.0%}") + " | "
                     + ("" if not over_tir else f"{max(over_tir):+.1%}") + f" | {'yes' if met else 'no'} |")
    if not lines:
        return []
    return ["| penalty | batch | DL2 below DRF | mean share of the best oracle's margin | DL2 vs Tiresias, worst | target met |",
            "|---|---|---|---|---|---|"] + lines


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
    print("\n".join(table(out["cells"]) + [""] + targets(out["cells"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
