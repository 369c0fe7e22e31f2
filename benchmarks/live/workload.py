#!/usr/bin/env python3
"""Draw the live replay's workload: Pollux-like jobs, time-compressed, each with its own scaling curve.

    python benchmarks/live/workload.py --seed 0 --jobs 32 --out benchmarks/live/workload-seed0.json

The drawing is `slurm_liquid.sim.livegen.draw`. From one of the Pollux artifact's workloads (workload-<seed % 8 + 1>.csv: arrivals, applications,
GPU counts, batch sizes as the artifact drew them from Philly), the first `--jobs` jobs are kept:

- arrivals compressed so that the last one comes `--span` seconds after the first (gaps keep their
  proportions);
- GPU counts scaled from the artifact's 64-GPU cluster to the 16-GPU test cluster (x 1/4, rounded
  up, at most 8: two nodes);
- run time at the asked GPU count: the application's measured run time alone (the traces) mapped
  onto minutes, `40 s x (isolated / 47 s) ** 0.3` (ncf's 47 s -> 40 s, imagenet's 7.6 h -> 270 s);
- a scaling curve per job drawn among three kinds (slurm_liquid/sim/curves.py: near-linear, flat
  past 2 GPUs, slow across nodes) that is NOT the traces' curve for its application, and the
  number of steps that makes the run time above at the asked GPU count;
- the catalog model the job declares (`#LIQUID model=`), so the daemon's prior is the traces'.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from slurm_liquid.sim.curves import KINDS
from slurm_liquid.sim.livegen import draw, smoke  # noqa: F401  (smoke: run.py's --smoke workload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=32)
    parser.add_argument("--span", type=float, default=360.0, help="seconds from the first arrival to the last")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.jobs <= 0 or args.span <= 0:
        parser.error("--jobs and --span must be positive")
    workload = draw(args.seed, args.jobs, args.span)
    args.out.write_text(json.dumps(workload, indent=1) + "\n")
    kinds = {k: sum(j["curve"]["kind"] == k for j in workload["jobs"]) for k in KINDS}
    work = sum(j["gpus"] * j["run_s_at_gpus"] for j in workload["jobs"])
    print(f"{args.out}: {len(workload['jobs'])} jobs, kinds {kinds}, {work:.0f} GPU-seconds at the asked sizes",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
