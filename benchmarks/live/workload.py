#!/usr/bin/env python3
"""Draw the live replay's workload: Pollux-like jobs, time-compressed, each with its own scaling curve.

    python benchmarks/live/workload.py --seed 0 --jobs 32 --out benchmarks/live/workload-seed0.json

How the jobs are drawn (arrivals, GPU counts, run times, curves, declared models):
`slurm_liquid/sim/livegen.py`, which DL2's training under the daemon's rules draws from too.
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
