"""What deciding from measured speeds costs against the oracle, on the 8 Pollux workloads.

The same loop, policies and workloads; only what the policies know of each job's speed differs:

- oracle: the traces' exact step times and remaining work (the reference runs, the published numbers);
- measured: the speed room (`slurm_liquid.speed`), fitted on each job's simulated progress reports,
  its prior until the job reports, a width it was never measured at tried one step at a time;
- measured + uniform: also Slurm's shape rule (the same GPUs on every node), as the live daemon runs.

Run from the repository root (about 10 minutes on 2 cores):

    nice python benchmarks/sim/measured_vs_oracle.py [--policies drf,optimus,dl2] [--penalty 30]

Writes measured_vs_oracle.md beside this script.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from slurm_liquid.loop import Shape
from slurm_liquid.sim.engine import ClusterConfig
from slurm_liquid.sim.runner import run_all
from slurm_liquid.sim.workload import BUNDLED_WORKLOADS, load_workload

HERE = Path(__file__).resolve().parent
ARMS = (("oracle", Shape.FREE), ("measured", Shape.FREE), ("measured", Shape.UNIFORM))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="tiresias,drf,optimus,dl2")
    ap.add_argument("--penalty", type=float, default=30.0)
    args = ap.parse_args()
    workloads = load_workload(BUNDLED_WORKLOADS)
    config = ClusterConfig(restart_penalty=args.penalty)
    policies = [p for p in args.policies.split(",") if p]
    rows = []
    for speed, shape in ARMS:
        started = time.perf_counter()
        results = run_all(workloads, policies, config, speed=speed, shape=shape)
        wall = time.perf_counter() - started
        for policy, per in results.items():
            jct = statistics.fmean(r.avg_jct_s for r in per.values())
            restarts = sum(r.restarts for r in per.values())
            rows.append((policy, f"{speed}, {shape.value}", jct, restarts, wall))
            print(f"{policy:<10} {speed:<9} {shape.value:<8} {jct:9.0f} s  restarts {restarts:5d}", flush=True)
    oracle = {p: j for p, arm, j, _, _ in rows if arm == "oracle, free"}
    md = ["# Measured speeds against the oracle (8 Pollux workloads)", "",
          f"16 x 4 GPUs, restart penalty {args.penalty:g} s, 60 s slots, fixed batch. Machine: "
          f"{platform.machine()}, Python {platform.python_version()}. Reproduce: "
          f"`nice python benchmarks/sim/measured_vs_oracle.py --policies {args.policies} --penalty {args.penalty:g}`.", "",
          "| policy | speed, shape | mean JCT (s) | vs oracle | restarts | wall time of the arm (s) |",
          "|---|---|---|---|---|---|"]
    for policy, arm, jct, restarts, wall in rows:
        md.append(f"| {policy} | {arm} | {jct:.0f} | {jct / oracle[policy] - 1:+.1%} | {restarts} | {wall:.0f} |")
    (HERE / "measured_vs_oracle.md").write_text("\n".join(md) + "\n")
    print(f"wrote {HERE / 'measured_vs_oracle.md'}")


if __name__ == "__main__":
    main()
