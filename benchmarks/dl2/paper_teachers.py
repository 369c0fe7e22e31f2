"""Which teacher, and which placement order, for the replica's DL2? Chosen on validation traces.

    nice python benchmarks/dl2/paper_teachers.py [--setting dl2-paper-small] [--seeds 8] [--first 5000]

Runs the replica's DRF, Optimus and best-split DRF beside three families of hand-written rules on the
validation traces (seeds 5000-5007: disjoint from the training traces below 5000 and from the
held-out traces 10000-10007 of `paper.py`, which `--first 10000` reports only after the choice),
under each placement (`--placement`; every rule of a table under the same one), and prints each one's
mean JCT against DRF and Optimus. The families (they measure how far a teacher could take a warm-up):
- `srtf-F`: shortest remaining time first, each job given the (PS, workers) split that runs it fastest
  with the fewest tasks reaching F of its peak speed, while the cluster takes it.
- `gain/r^A`: Optimus's greedy task-by-task rule, its gain (cut in remaining time) divided by the job's
  remaining time to the power A (favouring short jobs).
- `drf-short^A`: best-split DRF with its queue keyed by dominant share x remaining time^A.
- `hull` (`slurm_liquid.sim.paper.PaperHull`: a worker and a PS each, then the tasks that add the most
  throughput on each job's speed curve) under the table's placement, and `hull-order-*`: its counts
  placed at the end of the slot through the least-used-node rule in another order (run under the
  artifact's placement, which then places each task as given and skips a refused one): `cpu-first`
  CPU-only tasks first (the `cpu-first` placement's order), `workers-first` GPU workers first,
  `bundles-first` every job's bundle first. These choose the order of the `cpu-first` placement.
- `bound`: every job alone on the cluster at its peak speed within the per-role cap from its arrival slot
  (no policy that keeps the cap beats it; `drf-best-split`'s split ignores the cap).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_liquid.sim.paper import (PLACEMENTS, SETTINGS, PaperRun, make_paper_policy, paper_trace)  # noqa: E402
from slurm_liquid.sim.paper_teachers import (HELD_OUT, VALIDATION, SRTF, GainOverRemaining, Ordered,  # noqa: E402,F401
                                             ShortFirstDRF, bound_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", default="dl2-paper-small", choices=sorted(SETTINGS))
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--first", type=int, default=VALIDATION, help=f"first trace seed (default {VALIDATION}, the "
                    f"validation traces; {HELD_OUT} reports the held-out ones)")
    ap.add_argument("--placement", default=",".join(PLACEMENTS), help=f"one or more of {', '.join(PLACEMENTS)}")
    args = ap.parse_args()
    placements = [p for p in args.placement.split(",") if p]
    if not placements or any(p not in PLACEMENTS for p in placements):
        ap.error(f"--placement must name one or more of {', '.join(PLACEMENTS)}, got {args.placement!r}")
    setting = SETTINGS[args.setting]
    seeds = range(args.first, args.first + args.seeds)
    policies = {name: (lambda name=name: make_paper_policy(name)) for name in ("drf", "optimus", "drf-best-split", "hull")}
    for f in (1.0, 0.9, 0.8):
        policies[f"srtf-{f:g}"] = lambda f=f: SRTF(f)
    for a in (0.5, 1.0, 1.5, 2.0):
        policies[f"gain/r^{a:g}"] = lambda a=a: GainOverRemaining(a)
    for a in (0.25, 0.5, 1.0):
        policies[f"drf-short^{a:g}"] = lambda a=a: ShortFirstDRF(a)
    orders = {f"hull-order-{o}": (lambda o=o: Ordered(o)) for o in ("cpu-first", "workers-first", "bundles-first")}
    print(f"{args.setting}, seeds {seeds[0]}-{seeds[-1]}")
    for placement in placements:
        print(f"\nplacement {placement}")
        mean: dict[str, float] = {}
        for name, build in list(policies.items()) + (list(orders.items()) if placement == "artifact" else []):
            t0 = time.perf_counter()
            mean[name] = statistics.fmean(PaperRun(setting, paper_trace(setting, s), f"seed{s}", placement).run(build()).avg_jct_s
                                          for s in seeds)
            print(f"{name:<24} {mean[name] / 3600:7.2f} h  vs drf {mean[name] / mean['drf'] - 1:+6.1%}"
                  f"  vs optimus {mean[name] / mean.get('optimus', mean[name]) - 1:+6.1%}  ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    bound = statistics.fmean(bound_s(setting, s) for s in seeds)
    print(f"\n{'bound':<24} {bound / 3600:7.2f} h  (every job alone at its peak speed from its arrival)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
