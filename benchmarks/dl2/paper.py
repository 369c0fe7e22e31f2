"""The replica of the DL2 paper's setting (slurm_liquid.sim.paper): every policy on N traces per setting,
every policy of a table under the same placement (`slurm_liquid.psworld.slot`), one table per placement.

    nice python benchmarks/dl2/paper.py --seeds 8 --out benchmarks/dl2/runs/paper.json [--policies drf,optimus,drf-best-split,hull,dl2]

Three disjoint sets of traces (seeds of the artifact's generator): training, seeds 0 up to 4999
(`--train` uses 0..--train-seeds-1, then two more per DAgger round, and refuses to reach 5000);
validation, seeds 5000-5007 (`--first 5000`), where every design choice of the replica's DL2 is made
(teacher, placement, which candidate file ships; `paper_teachers.py` runs there by default); and
held-out, seeds 10000-10007 (the default `--first`), measured once the choices are made. Prints a table
of mean JCT per policy and its change against the replica's DRF under the same placement, beside the
figures a Python re-run of the artifact's baselines gave (DL2_PAPER_SETTING.md, under the artifact's
placement) and the paper's own, and a `bound` row: every job alone at its peak speed within the
per-role cap from its arrival, which no policy that keeps the cap beats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from slurm_liquid.sim.paper_teachers import HELD_OUT, VALIDATION, bound_s
from slurm_liquid.sim.paper import PLACEMENT, PLACEMENTS, SETTINGS, run_paper

# Against the artifact's DRF: a Python re-run of its baselines (small: 8 traces, large: 2), and the paper.
RERUN = {"dl2-paper-small": {"optimus": -0.267, "drf-best-split": -0.393},
         "dl2-paper-large": {"optimus": -0.306, "drf-best-split": -0.460}}
PAPER = {"dl2": -0.441, "optimus": -0.32}  # DL2 vs DRF; Optimus implied by DL2's -17.5% against it


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--first", type=int, default=HELD_OUT)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--policies", default="drf,optimus,drf-best-split,hull")
    ap.add_argument("--placement", default=",".join(PLACEMENTS), help="placements to run, each a table with every "
                    f"policy under it ({', '.join(PLACEMENTS)}); with --train the one to train under (default {PLACEMENT})")
    ap.add_argument("--policy-file", help="DL2 PS/worker policy for --policies ...,dl2 (default: the shipped one for "
                    "the setting and placement)")
    ap.add_argument("--out")
    ap.add_argument("--merge", action="store_true", help="add this run's tables to --out (same seeds) instead of "
                    "replacing it")
    ap.add_argument("--train", metavar="OUT.npz", help="instead: a supervised warm-up of the PS/worker DL2 on "
                    "--teacher's decisions, traces 0..--train-seeds-1 of the first of --settings, written to OUT.npz")
    ap.add_argument("--teacher", default="drf-best-split", help="drf, optimus, drf-best-split or hull")
    ap.add_argument("--window", type=int, help="with --train: jobs the network sees per decision (default: the "
                    "setting's scheduling window)")
    ap.add_argument("--sliding-window", action="store_true", help="with --train: the window moves within a slot "
                    "(a job at its peak speed leaves it, the next waiting job enters; recorded in the file)")
    ap.add_argument("--train-seeds", type=int, default=3)
    ap.add_argument("--dagger", type=int, default=0, metavar="ROUNDS", help="with --train: DAgger rounds after the "
                    "warm-up, each on the next two traces (the student acts, the teacher labels its slots)")
    ap.add_argument("--epochs", type=int, default=5)
    args = ap.parse_args()
    if args.window is not None and args.window < 1:
        ap.error(f"--window must be at least 1, got {args.window}")
    if args.dagger < 0:
        ap.error(f"--dagger must be 0 or more, got {args.dagger}")
    placements = [p for p in args.placement.split(",") if p]
    if not placements or any(p not in PLACEMENTS for p in placements):
        ap.error(f"--placement must name one or more of {', '.join(PLACEMENTS)}, got {args.placement!r}")
    if args.train:
        from slurm_liquid.policy.dl2.io import save_policy
        from slurm_liquid.policy.dl2.psworker import PS_FEATURES
        from slurm_liquid.policy.dl2.psworker_train import warmup
        from slurm_liquid.sim.paper import make_paper_policy

        if args.train_seeds + 2 * args.dagger > VALIDATION:
            ap.error(f"training traces would reach the validation traces (seed {VALIDATION})")
        placement = placements[0] if args.placement != ",".join(PLACEMENTS) else PLACEMENT
        setting = SETTINGS[args.settings.split(",")[0]]
        params, meta = warmup(setting, make_paper_policy(args.teacher), range(args.train_seeds), args.epochs,
                              window=args.window, dagger=args.dagger, slide=args.sliding_window, placement=placement)
        save_policy(args.train, params, meta, features=PS_FEATURES)
        print(json.dumps(meta["training"]))
        return 0
    policies = [p for p in args.policies.split(",") if p]
    seeds = list(range(args.first, args.first + args.seeds))
    kind = "validation" if VALIDATION <= args.first < HELD_OUT else "held-out" if args.first >= HELD_OUT else "training"
    out: dict = {"seeds": seeds, "placements": {}}
    if args.merge and args.out and Path(args.out).is_file():
        out = json.loads(Path(args.out).read_text())
        if out.get("seeds") != seeds or "placements" not in out:
            ap.error(f"--merge: {args.out} holds other seeds or another format")
    for placement in placements:
        out["placements"].setdefault(placement, {"settings": {}})
        for name in args.settings.split(","):
            per: dict[str, dict[int, float]] = {p: {} for p in policies}
            t0 = time.perf_counter()
            per["bound"] = {}  # every job alone at its peak speed from its arrival: no policy within the cap beats it
            for seed in seeds:
                for p, r in run_paper(name, seed, policies, args.policy_file, placement).items():
                    per[p][seed] = r.avg_jct_s
                per["bound"][seed] = bound_s(SETTINGS[name], seed)
            means = {p: statistics.fmean(v.values()) for p, v in per.items()}
            out["placements"][placement]["settings"][name] = {"avg_jct_s": means, "per_seed": per,
                                                              "wall_s": time.perf_counter() - t0,
                                                              "dl2_file": args.policy_file or "shipped"}
            print(f"\n{name}, placement {placement} ({args.seeds} {kind} traces, seeds {seeds[0]}-{seeds[-1]}, "
                  f"{time.perf_counter() - t0:.0f} s)")
            print("| policy | mean JCT (h) | vs DRF | vs Optimus | re-run of the artifact vs its DRF | paper vs DRF |")
            print("|---|---|---|---|---|---|")
            for p, m in means.items():
                vs = f"{m / means['drf'] - 1:+.1%}" if "drf" in means else ""
                vs_opt = f"{m / means['optimus'] - 1:+.1%}" if "optimus" in means and p != "optimus" else ""
                rerun = RERUN.get(name, {}).get(p) if placement == "artifact" else None
                paper = PAPER.get(p)
                print(f"| {p} | {m / 3600:.2f} | {vs} | {vs_opt} | {'' if rerun is None else f'{rerun:+.1%}'} | "
                      f"{'' if paper is None else f'{paper:+.1%}'} |", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
