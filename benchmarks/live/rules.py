#!/usr/bin/env python3
"""The daemon's world in the simulator (`slurm-liquid simulate --rules daemon`) on live-replay draws.

    python benchmarks/live/rules.py grid [--seeds 2000-2007]          # choose [elastic] settings (validation)
    python benchmarks/live/rules.py report [--seeds 3000-3015] [--policy-file F]   # held out, shipped settings

`grid`: mean change in average JCT against plain Slurm, per arm, for each combination of slot_s,
min_change_interval_s and restart_penalty_s (the rest as shipped), on validation seeds only: the shipped
settings are chosen here. `report`: on held-out seeds, with the shipped [elastic] settings, every arm
(plain, static, drf, optimus, dl2), and each arm again with every job started at its ask
(`start_wider` off): what starts give and what resizes add. Results go to benchmarks/live/rules.md.
Takes about two minutes on the 2-core build machine for 16 seeds.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_liquid.config import Config  # noqa: E402
from slurm_liquid.loop import Rules  # noqa: E402
from slurm_liquid.sim.live import run_live  # noqa: E402
from slurm_liquid.sim.livegen import draw  # noqa: E402

ARMS = ("plain", "static", "drf", "optimus", "dl2")


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def changes(workloads: dict, rules: Rules, arms=ARMS, policy_file: str | None = None) -> dict[str, list[float]]:
    """arm -> per workload, its average JCT over plain's, minus one; and the arms' restarts in all."""
    out: dict[str, list[float]] = {arm: [] for arm in arms}
    restarts = {arm: 0 for arm in arms}
    for workload in workloads.values():
        plain = run_live(workload, "plain", rules).avg_jct_s
        for arm in arms:
            result = run_live(workload, arm, rules, policy_file=policy_file if arm == "dl2" else None)
            out[arm].append(result.avg_jct_s / plain - 1)
            restarts[arm] += result.restarts
    out["_restarts"] = [restarts[a] for a in arms]  # type: ignore[assignment]
    return out


def grid(workloads: dict) -> None:
    base = Config().elastic
    print("| slot_s | min_change_interval_s | restart_penalty_s | " + " | ".join(ARMS[1:]) + " |")
    print("|---|---|---|" + "---|" * (len(ARMS) - 1))
    for slot, between, penalty in itertools.product((15, 30, 60), (20, 60, 300), (30, 150)):
        rules = Rules.daemon(replace(base, slot_s=slot, min_change_interval_s=between, restart_penalty_s=penalty))
        got = changes(workloads, rules, ARMS[1:])
        print(f"| {slot} | {between} | {penalty} | " + " | ".join(f"{statistics.fmean(got[a]):+.1%}" for a in ARMS[1:])
              + " |", flush=True)


def report(workloads: dict, policy_file: str | None) -> None:
    shipped = Rules.daemon(Config().elastic)
    at_ask = replace(shipped, start_wider=False)
    print(f"{len(workloads)} workloads (seeds {min(workloads)}-{max(workloads)}), shipped [elastic]: slot "
          f"{shipped.slot_s:g} s, {shipped.min_change_interval_s:g} s between changes, penalty "
          f"{shipped.restart_penalty_s:g} s, each policy's guard")
    print("| arm | vs plain | vs plain, starts at the ask | restarts (all workloads) | below DRF |")
    print("|---|---|---|---|---|")
    wide, ask = changes(workloads, shipped, ARMS, policy_file), changes(workloads, at_ask, ARMS, policy_file)
    drf = [1 + x for x in wide["drf"]]
    for i, arm in enumerate(ARMS):
        below = statistics.fmean((1 + a) / d - 1 for a, d in zip(wide[arm], drf))
        print(f"| {arm} | {statistics.fmean(wide[arm]):+.1%} (worst {max(wide[arm]):+.1%}) | "
              f"{statistics.fmean(ask[arm]):+.1%} | {wide['_restarts'][i]} | {below:+.1%} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("grid", "report"))
    parser.add_argument("--seeds", help="A-B (default: 2000-2007 for grid, 3000-3015 for report)")
    parser.add_argument("--policy-file", help="DL2 file for report (default: the shipped daemon one)")
    args = parser.parse_args(argv)
    seeds = seeds_of(args.seeds or ("2000-2007" if args.what == "grid" else "3000-3015"))
    if args.what == "report" and min(seeds) < 3000:
        print("note: seeds below 3000 are training or validation seeds, not held out", file=sys.stderr)
    workloads = {s: draw(s, 32, 360.0) for s in seeds}
    if args.what == "grid":
        grid(workloads)
    else:
        report(workloads, args.policy_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
