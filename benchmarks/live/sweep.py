#!/usr/bin/env python3
"""The daemon's `[elastic] payback` on replay workloads the live run does not use, in the simulator.

    python benchmarks/live/sweep.py [--seeds 0-7] [--payback 1,2,3] [--restart-cost 24.8] [--start-cost 1.2]
        [--no-start-wider] [--jitter 2 --draws 8]

Each seed draws a 32-job workload as `workload.py --seed N` does (seed 0 is the committed live one;
seeds 1-7 take the Pollux artifact's other workloads, so they are held out from the live run) and runs
plain Slurm (FIFO + backfill), elastic DRF and elastic DL2 through `simulate.py`'s mirror of the daemon
at each payback factor. Printed: average JCT per arm and its change against plain, per seed, and the
mean change over the held-out seeds. `--jitter S --draws N`: each seed's workload N times with every
arrival moved by up to S seconds either way (seeded), averaged: the live cluster never repeats a run to
the second, and which job finds the queue empty, or GPUs free, turns on such seconds. The default costs are the ones measured live
(`benchmarks/live/results.md`). Takes about a minute on the 2-core build machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simulate  # noqa: E402
from workload import draw  # noqa: E402


def seeds_of(text: str) -> list[int]:
    low, sep, high = text.partition("-")
    try:
        seeds = list(range(int(low), int(high) + 1)) if sep else [int(s) for s in text.split(",")]
    except ValueError:
        raise SystemExit(f"sweep: --seeds {text!r}: give N-M or N,M,...") from None
    if not seeds or min(seeds) < 0:
        raise SystemExit(f"sweep: --seeds {text!r}: no seeds, or a negative one")
    return seeds


def jittered(workload: dict, jitter_s: float, draws: int, seed: int) -> list[dict]:
    """`draws` copies of `workload` with every arrival moved by up to `jitter_s` seconds (never before
    0), in arrival order again; the workload itself when `jitter_s` is 0."""
    if not jitter_s:
        return [workload]
    out = []
    for k in range(draws):
        rng = np.random.default_rng([seed, k])
        jobs = [{**job, "arrival_s": max(0.0, job["arrival_s"] + float(rng.uniform(-jitter_s, jitter_s)))}
                for job in workload["jobs"]]
        out.append({**workload, "jobs": sorted(jobs, key=lambda job: job["arrival_s"])})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-7")
    parser.add_argument("--payback", default="1,2,3", help="comma-separated factors")
    parser.add_argument("--restart-cost", type=float, default=24.8)
    parser.add_argument("--start-cost", type=float, default=1.2)
    parser.add_argument("--jobs", type=int, default=32)
    parser.add_argument("--start-wider", action=argparse.BooleanOptionalAction, default=None,
                        help="an elastic job alone in the queue starts at up to a node's free GPUs (the daemon's "
                             "[elastic] start_wider; default: the shipped setting)")
    parser.add_argument("--jitter", type=float, default=0.0, metavar="S",
                        help="move every arrival by up to S seconds either way (0: as drawn)")
    parser.add_argument("--draws", type=int, default=1, help="jittered copies of each seed's workload")
    args = parser.parse_args(argv)
    try:
        factors = [float(f) for f in args.payback.split(",") if f.strip()]
    except ValueError:
        parser.error(f"--payback {args.payback!r}: give numbers, e.g. 1,2,3")
    if not factors or min(factors) < 0 or args.restart_cost < 0 or args.start_cost < 0 or args.jobs < 1:
        parser.error("--payback factors, costs and --jobs must be >= 0 (jobs >= 1)")
    if args.jitter < 0 or args.draws < 1 or (args.draws > 1 and not args.jitter):
        parser.error("--jitter must be >= 0 and --draws >= 1 (several draws need a jitter)")
    seeds = seeds_of(args.seeds)
    rules = simulate.daemon_rules(start_wider=args.start_wider)
    change: dict[tuple[str, float], dict[int, float]] = {}
    print("| seed | plain | " + " | ".join(f"{arm} @{f:g}" for f in factors for arm in ("drf", "dl2")) + " |")
    print("|---" * (2 + 2 * len(factors)) + "|")
    for seed in seeds:
        workloads = jittered(draw(seed, args.jobs, 360.0), args.jitter, args.draws, seed)
        plains = [simulate.simulate(w, "plain", args.restart_cost, "measured", args.start_cost, rules=rules)["avg_jct_s"]
                  for w in workloads]
        cells = []
        for factor in factors:
            for arm in ("drf", "dl2"):
                jcts = [simulate.simulate(w, arm, args.restart_cost, "measured", args.start_cost, factor, rules)["avg_jct_s"]
                        for w in workloads]
                mean = statistics.fmean((j - p) / p for j, p in zip(jcts, plains))
                change.setdefault((arm, factor), {})[seed] = mean
                cells.append(f"{statistics.fmean(jcts):.1f} ({mean:+.1%})")
        print(f"| {seed} | {statistics.fmean(plains):.1f} | " + " | ".join(cells) + " |", flush=True)
    held = [s for s in seeds if s != 0]
    if held:
        print(f"\nmean change against plain over held-out seeds {held[0]}-{held[-1]} ({len(held)})"
              + (f", {args.draws} draws of +-{args.jitter:g} s each" if args.jitter else "") + ":")
        for (arm, factor), by_seed in change.items():
            print(f"  {arm} payback {factor:g}: {statistics.fmean(by_seed[s] for s in held):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
