"""A lower bound on the mean JCT any policy can reach on a workload: a small linear program.

    python benchmarks/dl2/bound.py [--penalty 30] [--batch-scaling] [--step 120]   # the 8 Pollux workloads

The bound and how it relaxes the simulator: `slurm_liquid/sim/bound.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_liquid.sim.bound import lp_bound  # noqa: E402
from slurm_liquid.sim.engine import ClusterConfig  # noqa: E402


def main() -> int:
    from slurm_liquid.sim.workload import BUNDLED_WORKLOADS, load_workload

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--penalty", type=float, default=30.0)
    ap.add_argument("--batch-scaling", action="store_true")
    ap.add_argument("--step", type=float, default=120.0, help="grid width in seconds (default 120)")
    ap.add_argument("--out", help="write the per-workload bounds as JSON")
    args = ap.parse_args()
    config = ClusterConfig(restart_penalty=args.penalty, batch_scaling=args.batch_scaling)
    per = {}
    for name, specs in load_workload(BUNDLED_WORKLOADS).items():
        t0 = time.perf_counter()
        per[name] = lp_bound(specs, config, args.step)
        print(f"{name:<12} {per[name]:9.1f} s  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    out = {"restart_penalty": args.penalty, "batch_scaling": args.batch_scaling, "step_s": args.step,
           "workloads": per, "avg_jct_s": statistics.fmean(per.values())}
    print(f"mean {out['avg_jct_s']:.1f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
