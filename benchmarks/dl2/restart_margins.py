"""How the restart-aware teacher's margins were chosen (`slurm_liquid.policy.srtf.SRTFRestart`).

    nice python benchmarks/dl2/restart_margins.py            # about 10 minutes on 2 cores

Runs DRF, plain SRTF and SRTF with (start margin, resize margin) pairs, in restart penalties, on the
oracle speed model over Philly samples of seeds 30000-30003 at loads 1, 1.5 and 2, both penalties,
fixed batch and batch scaling; prints each variant's mean JCT and its difference from DRF. No
generalisation or test table uses these seeds (they are the first half of the shipping decision's).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from slurm_liquid.policy.drf import DRF
from slurm_liquid.policy.srtf import SRTF
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel
from slurm_liquid.sim.workload import sample_philly


def variant(speed, start: float, resize: float) -> SRTF:
    policy = SRTF(speed)
    policy.start_margin, policy.resize_margin = start, resize
    return policy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--margins", default="0:1,2:1,2:0,2:3,2:5,2:8,4:8,8:8", help="START:RESIZE pairs")
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args()
    pairs = [tuple(float(x) for x in p.split(":")) for p in args.margins.split(",")]
    for penalty in (150.0, 30.0):
        for scaling in (False, True):
            for load in (1.0, 1.5, 2.0):
                config = ClusterConfig(restart_penalty=penalty, batch_scaling=scaling)
                speed = OracleSpeedModel(config.gpus_per_node, scaling)
                res: dict[str, list[float]] = {}
                for seed in range(30_000, 30_000 + args.seeds):
                    sim = Simulator(sample_philly(jobs=round(160 * load), seed=seed), config)
                    policies = {"drf": DRF(), "srtf": SRTF(speed)} | {f"{s:g}:{r:g}": variant(speed, s, r) for s, r in pairs}
                    for name, policy in policies.items():
                        res.setdefault(name, []).append(sim.run(policy).avg_jct_s)
                drf = statistics.fmean(res["drf"])
                print(f"penalty {penalty:g} {'scaling' if scaling else 'fixed'} load {load:g}: " + ", ".join(
                    f"{k} {statistics.fmean(v):.0f} ({statistics.fmean(v) / drf - 1:+.1%})" for k, v in res.items()),
                    flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
