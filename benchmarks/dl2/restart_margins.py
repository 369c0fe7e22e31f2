"""How the restart-aware teachers' margins were chosen (`slurm_liquid.policy.srtf.SRTFRestart`,
`slurm_liquid.policy.rate.CompletionRate`).

    nice python benchmarks/dl2/restart_margins.py            # about 10 minutes on 2 cores
    nice python benchmarks/dl2/restart_margins.py --teacher completion-rate --penalties 30 \
        --margins 1:1,2:2,4:4,8:8                            # the 30 s file's margin, about 2 minutes

Runs DRF, plain SRTF (srtf-restart only) and the teacher with (start margin, resize margin) pairs, in
restart penalties, on the
oracle speed model over Philly samples of seeds 30000-30003 at loads 1, 1.5 and 2, both penalties,
fixed batch and batch scaling; prints each variant's mean JCT and its difference from DRF. No
generalisation or test table uses these seeds (they are the first half of the shipping decision's).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from slurm_liquid.policy.drf import DRF
from slurm_liquid.policy.rate import CompletionRate
from slurm_liquid.policy.srtf import SRTF
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel
from slurm_liquid.sim.workload import sample_philly


TEACHERS = {"srtf-restart": SRTF, "completion-rate": CompletionRate}


def variant(teacher: str, speed, start: float, resize: float):
    policy = TEACHERS[teacher](speed)
    policy.start_margin, policy.resize_margin = start, resize
    return policy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--margins", default="0:1,2:1,2:0,2:3,2:5,2:8,4:8,8:8", help="START:RESIZE pairs")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--teacher", default="srtf-restart", choices=tuple(TEACHERS))
    ap.add_argument("--penalties", default="150,30", help="restart penalties in s")
    ap.add_argument("--modes", default="fixed,scaling", help="fixed: the declared batch; scaling: --batch-scaling")
    args = ap.parse_args()
    try:
        pairs = [tuple(float(x) for x in p.split(":")) for p in args.margins.split(",")]
        penalties = [float(p) for p in args.penalties.split(",")]
    except ValueError:
        ap.error("--margins START:RESIZE,... and --penalties S,... take numbers")
    if any(len(p) != 2 or min(p) < 0 for p in pairs) or not penalties or min(penalties) < 0:
        ap.error("--margins takes START:RESIZE pairs >= 0, --penalties seconds >= 0")
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"fixed", "scaling"}:
        ap.error("--modes: fixed, scaling or both")
    for penalty in penalties:
        for scaling in (m == "scaling" for m in modes):
            for load in (1.0, 1.5, 2.0):
                config = ClusterConfig(restart_penalty=penalty, batch_scaling=scaling)
                speed = OracleSpeedModel(config.gpus_per_node, scaling)
                res: dict[str, list[float]] = {}
                for seed in range(30_000, 30_000 + args.seeds):
                    sim = Simulator(sample_philly(jobs=round(160 * load), seed=seed), config)
                    policies = {"drf": DRF()} | ({"srtf": SRTF(speed)} if args.teacher == "srtf-restart" else {}) | {
                        f"{s:g}:{r:g}": variant(args.teacher, speed, s, r) for s, r in pairs}
                    for name, policy in policies.items():
                        res.setdefault(name, []).append(sim.run(policy).avg_jct_s)
                drf = statistics.fmean(res["drf"])
                print(f"penalty {penalty:g} {'scaling' if scaling else 'fixed'} load {load:g}: " + ", ".join(
                    f"{k} {statistics.fmean(v):.0f} ({statistics.fmean(v) / drf - 1:+.1%})" for k, v in res.items()),
                    flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
