"""Evaluate DL2 policy files against the baselines on the 8 Pollux workloads (16 x 4 GPUs).

    nice python benchmarks/dl2/evaluate.py --penalty 30 dl2=slurm_liquid/policy/dl2/trained/dl2-p30.npz \
        warm-up=benchmarks/dl2/runs/warm.npz --out benchmarks/dl2/results-p30.json

Writes one JSON object: per policy label, the mean JCT per workload and overall, makespan,
restarts and wall time. Baselines (drf, optimus, tiresias, fifo) run in the same process.

With `--philly N` the workloads are instead N held-out Philly samples (160 jobs each, seeds
30000 on: drawn like the 8, used by no training or RL validation run). That is where a new policy
is compared with the shipped one before it replaces it, so that the 8 stay a test set.

With `--bound` the LP lower bound of `bound.py` is computed for the same workloads and stored as
`lp_bound` (mean and per workload); every policy's `x_bound` is its mean JCT over that bound.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from slurm_liquid.errors import LiquidError
from slurm_liquid.policy import make_policy
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel
from slurm_liquid.sim.workload import BUNDLED_WORKLOADS, load_workload, sample_philly

HELD_OUT_SEED = 30_000  # training draws Philly seeds from 0 and 10_000, RL validation from 20_000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--penalty", type=float, default=30.0)
    ap.add_argument("--baselines", default="drf,optimus,tiresias,fifo")
    ap.add_argument("--reference", action="store_true",
                    help="also run the oracle references: SRTF plain and restart-aware, completion rate (reference.py)")
    ap.add_argument("--philly", type=int, default=0, metavar="N",
                    help="evaluate on N held-out Philly samples instead of the 8 Pollux workloads")
    ap.add_argument("--loads", default="1", metavar="L,L,...",
                    help="with --philly: N samples at each load (160 x L jobs; load 1 is the shipping samples)")
    ap.add_argument("--batch-scaling", action="store_true",
                    help="jobs pick their own goodput-best batch (ClusterConfig.batch_scaling)")
    ap.add_argument("--bound", action="store_true", help="also compute the LP lower bound (bound.py) per workload")
    ap.add_argument("--out", required=True)
    ap.add_argument("policies", nargs="*", metavar="LABEL=FILE")
    args = ap.parse_args()
    config = ClusterConfig(restart_penalty=args.penalty, batch_scaling=args.batch_scaling)
    speed = OracleSpeedModel(config.gpus_per_node, config.batch_scaling)
    if args.philly:
        # load L: 160 x L jobs in the same arrival window, as generalise.py draws its loads (load 1 is
        # exactly the shipping samples)
        workloads = {f"philly-{s}" + ("" if load == 1 else f"-load{load:g}"): sample_philly(jobs=round(160 * load), seed=s)
                     for load in _loads(args.loads) for s in range(HELD_OUT_SEED, HELD_OUT_SEED + args.philly)}
    else:
        workloads = load_workload(BUNDLED_WORKLOADS)
    entries = [(b, lambda b=b: make_policy(b, speed)) for b in args.baselines.split(",") if b]
    if args.reference:
        sys.path.insert(0, str(Path(__file__).parent))
        from reference import REFERENCES

        entries += [(name, lambda cls=cls: cls(speed)) for name, cls in REFERENCES.items()]
    for item in args.policies:
        label, _, path = item.partition("=")
        entries.append((label, lambda path=path: make_policy("dl2", speed, policy_file=path)))
    out = {"restart_penalty": args.penalty, "batch_scaling": args.batch_scaling, "workloads": sorted(workloads), "policies": {}}
    if args.bound:
        sys.path.insert(0, str(Path(__file__).parent))
        from slurm_liquid.sim.bound import lp_bound

        per = {name: lp_bound(specs, config) for name, specs in workloads.items()}
        out["lp_bound"] = {"avg_jct_s": statistics.fmean(per.values()), "workloads": per}
        print(f"{'lp-bound':<22} {out['lp_bound']['avg_jct_s']:9.1f} s", file=sys.stderr, flush=True)
    for label, build in entries:
        t0 = time.perf_counter()
        policy = build()
        try:
            per = {name: Simulator(specs, config, name).run(policy) for name, specs in workloads.items()}
        except LiquidError as exc:  # the simulator's horizon: this policy stalls on a workload; the others still run
            out.setdefault("stalled", {})[label] = str(exc)
            print(f"{label:<22} stalled: {exc}", file=sys.stderr, flush=True)
            continue
        row = {"avg_jct_s": statistics.fmean(r.avg_jct_s for r in per.values()),
               "makespan_s": statistics.fmean(r.makespan_s for r in per.values()),
               "restarts": sum(r.restarts for r in per.values()),
               "workloads": {n: r.avg_jct_s for n, r in per.items()},
               "wall_s": time.perf_counter() - t0}
        if "lp_bound" in out:
            row["x_bound"] = row["avg_jct_s"] / out["lp_bound"]["avg_jct_s"]
        out["policies"][label] = row
        by_load = _by_load(row["workloads"])
        print(f"{label:<22} {row['avg_jct_s']:9.1f} s  restarts {row['restarts']:6d}  ({row['wall_s']:.0f} s)" +
              ("".join(f"  load {k}: {v:.1f}" for k, v in by_load.items()) if len(by_load) > 1 else ""),
              file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


def _loads(text: str) -> list[float]:
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        loads = []
    if not loads or min(loads) <= 0:
        raise SystemExit(f"evaluate.py: --loads {text!r}: give positive loads, e.g. 1,1.5,2")
    return loads


def _by_load(per_workload: dict[str, float]) -> dict[str, float]:
    """Mean JCT per load of the held-out samples (names end in -loadL; load 1 has no suffix)."""
    groups: dict[str, list[float]] = {}
    for name, jct in per_workload.items():
        load = name.rpartition("-load")[2] if "-load" in name else "1"
        groups.setdefault(load, []).append(jct)
    return {k: statistics.fmean(v) for k, v in groups.items()}


if __name__ == "__main__":
    sys.exit(main())
