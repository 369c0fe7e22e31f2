"""What each part of the shortest-remaining-time warm-up is worth: the teacher, the order its GPUs are
learnt in, and the state columns that place a job among the others.

    nice python benchmarks/dl2/ablate_teacher.py [--workloads 8] [--epochs 6] [--held-out 8] \\
        [--penalty 30] --out benchmarks/dl2/runs/ablate-teacher.json

Every variant is a supervised warm-up only (no RL) from the same seed on the same Philly samples
(seeds 0.., as `slurm-liquid policy train --supervised`), evaluated greedily on held-out Philly
samples (seeds 30000.., the samples the shipping decision uses; no training run sees them):

- full: teacher `srtf`, learnt shortest first, every column (the shipped warm-up's recipe);
- water-filling: teacher `srtf`, learnt least-served first (the order DRF's decisions are learnt in);
- no ranking columns: teacher `srtf`, shortest first, the five columns of `state.py` that rank a job
  among the others (rank, GPUs asked ahead, ask, past the ask, time one more GPU saves) held at 0
  in training and in evaluation;
- drf teacher: teacher `drf`, least-served first, every column (the earlier recipe's warm-up);
- completion-rate: teacher `completion-rate`, learnt in its plan's order, every column, RATE (its price
  of each job's next step) included (the shipped files' warm-up, without their DAgger rounds);
- completion-rate without RATE: the same with RATE held at 0 in training and in evaluation.

Prints held-out agreement and mean JCT per variant beside DRF and the srtf-oracle reference. About
20 minutes on one core of the 2-core build machine at the defaults.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from slurm_liquid.errors import LiquidError
from slurm_liquid.policy import make_policy
from slurm_liquid.policy.dl2 import train as T
from slurm_liquid.policy.dl2.agent import DL2Policy
from slurm_liquid.policy.dl2.state import ASKED, ASKED_AHEAD, GAIN, OVER_ASK, RATE, SRTF_RANK
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel

RANKING = [SRTF_RANK, ASKED_AHEAD, ASKED, OVER_ASK, GAIN]
HELD_OUT_SEED = 30_000
# label: (teacher, learnt shortest first, columns held at 0)
VARIANTS = {"full": ("srtf", True, []), "water-filling": ("srtf", False, []),
            "no ranking columns": ("srtf", True, RANKING), "drf teacher": ("drf", False, []),
            "completion-rate": ("completion-rate", True, []),  # learnt in its plan's order either way
            "completion-rate without RATE": ("completion-rate", True, [RATE])}


class Masked(DL2Policy):
    """DL2 that never sees `columns` (held at 0, as in its training)."""

    def __init__(self, params, columns, **kw) -> None:
        super().__init__(params, **kw)
        self.columns = columns

    def choose(self, x, valid):
        if self.columns:
            x = x.copy()
            x[:, self.columns] = 0.0
        return super().choose(x, valid)


def collect(teacher, shortest_first: bool, seeds, config, speed) -> list[T.Step]:
    steps = []
    margin, keep = T.restart_awareness(teacher, config)
    for seed in seeds:
        sim = Simulator(T.philly_workload(seed), config)
        teacher.reset()
        view = sim.reset()
        while view is not None:
            actions, plan = T.teacher_slot(view, teacher)
            steps += T.imitation_steps(view, T.teacher_counts(view, actions), speed=speed, shortest_first=shortest_first,
                                       start_margin_s=margin, keep_held=keep, plan=plan)
            view = sim.step(actions)
    return steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=int, default=8, help="Philly samples the teacher runs for training")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--held-out", type=int, default=8, help="held-out Philly samples to evaluate on")
    ap.add_argument("--penalty", type=float, default=30.0)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or min(args.workloads, args.epochs, args.held_out) < 1:
        ap.error(f"unknown variants {unknown} (known: {', '.join(VARIANTS)}), or a count below 1")
    config = ClusterConfig(restart_penalty=args.penalty)
    speed = OracleSpeedModel(config.gpus_per_node, False)
    held = {f"philly-{s}": T.philly_workload(s) for s in range(HELD_OUT_SEED, HELD_OUT_SEED + args.held_out)}
    out = {"restart_penalty": args.penalty, "train_seeds": list(range(args.workloads)), "held_out_seeds": sorted(held),
           "epochs": args.epochs, "variants": {}}
    for label, policy in (("drf", make_policy("drf")), ("srtf-oracle", make_policy("srtf", speed))):
        out[label] = statistics.fmean(Simulator(s, config, n).run(policy).avg_jct_s for n, s in held.items())
        print(f"{label:<20} {out[label]:8.1f} s", flush=True)
    for name in names:
        teacher, shortest_first, columns = VARIANTS[name]
        t0 = time.perf_counter()
        rule = make_policy(teacher, speed)
        train = collect(rule, shortest_first, range(args.workloads), config, speed)
        check = collect(make_policy(teacher, speed), shortest_first, [args.workloads], config, speed)  # agreement
        for s in train + check:
            s.x[:, columns] = 0.0
        res = T.supervised(T.new_params(64, 2, 0), train, check, epochs=args.epochs)
        policy = Masked(res.params, columns, speed=speed, start_margin=float(getattr(rule, "start_margin", 0.0)),
                        rate=hasattr(rule, "plan"))
        row = {"teacher": teacher, "shortest_first": shortest_first, "masked_columns": columns,
               "decisions": len(train), "agreement": res.curve[-1]["held_out_agreement"]}
        try:
            jct = statistics.fmean(Simulator(s, config, n).run(policy).avg_jct_s for n, s in held.items())
        except LiquidError as exc:  # the simulator's horizon: the student stalls (restarts a job forever)
            row.update(stalled=str(exc), wall_s=time.perf_counter() - t0)
            out["variants"][name] = row
            print(f"{name:<20} stalled: {exc} (agreement {row['agreement']:.3f})", flush=True)
            continue
        row.update(avg_jct_s=jct, vs_drf=jct / out["drf"] - 1, wall_s=time.perf_counter() - t0)
        out["variants"][name] = row
        print(f"{name:<20} {jct:8.1f} s  ({row['vs_drf']:+.1%} vs DRF; agreement {row['agreement']:.3f}; "
              f"{row['wall_s']:.0f} s)", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
