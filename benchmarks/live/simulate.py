#!/usr/bin/env python3
"""The live replay in the simulator: the same jobs, arrivals and curves, the measured restart cost.

    python benchmarks/live/simulate.py --workload benchmarks/live/workload-seed0.json \\
        --runs benchmarks/live/runs [--restart-cost 12] [--speed prior|oracle] [--out benchmarks/live/sim.json]

Every job of the workload becomes a `CurveApp` (slurm_liquid/sim/curves.py) registered under its
name, so the simulator's jobs step exactly as the live stand-in trainers do. The cluster is the
test cluster's 4 nodes x 4 GPUs; every placement goes through `SlurmShapes`, Slurm's rule that a
multi-node job has the same GPUs on every node (what the daemon does with `uniform_placement_sizes`).
Arms:

| arm | live | simulated |
|---|---|---|
| plain | Slurm, no slurm-liquid | FIFO with backfill, Slurm's best-fit placer (`slurm`), a decision every 2 s, no time limits |
| liquid | rigid jobs placed by the daemon | FIFO with backfill, Liquid's placer, a decision every `poll_s` (5 s) |
| drf | elastic 1:max, DRF every slot | DRF, Liquid's placer, a decision every `slot_s` (15 s) |
| dl2 | elastic 1:max, DL2 every slot | DL2 (the shipped policy), Liquid's placer, every 15 s |

The restart cost (seconds a job loses at each start and resize) is the mean measured in the live
runs' JSON (`--runs`), or `--restart-cost`. DL2's speed model: `prior` (default) is what the live
daemon consults today (daemon/elastic.py `LiveSpeedModel`: the traces' step times of the declared
model, remaining steps from the job's progress); `oracle` is the true curve. The gap to the live
average JCT is printed per arm where a live result exists.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from slurm_liquid.daemon.elastic import LiveSpeedModel  # noqa: E402
from slurm_liquid.daemon.resize import uniform_placement_sizes  # noqa: E402
from slurm_liquid.placement.base import Placement, PlacementRequest  # noqa: E402
from slurm_liquid.policy import make_policy  # noqa: E402
from slurm_liquid.policy.base import ClusterView  # noqa: E402
from slurm_liquid.sim.apps import register_app  # noqa: E402
from slurm_liquid.sim.curves import Curve, CurveApp  # noqa: E402
from slurm_liquid.sim.engine import ClusterConfig, Simulator  # noqa: E402
from slurm_liquid.sim.oracle import OracleSpeedModel  # noqa: E402
from slurm_liquid.sim.runner import make_placer  # noqa: E402
from slurm_liquid.sim.workload import JobSpec  # noqa: E402

ARMS = ("plain", "liquid", "drf", "dl2")
# arm -> (policy, placer, decision interval in seconds)
SETUP = {"plain": ("fifo", "slurm", 2.0), "liquid": ("fifo", "liquid", 5.0),
         "drf": ("drf", "liquid", 15.0), "dl2": ("dl2", "liquid", 15.0)}


class SlurmShapes:
    """A placer that places only what Slurm can express: the same GPU count on every node."""

    def __init__(self, inner, gpus_per_node: int) -> None:
        self.inner = inner
        self.gpus_per_node = gpus_per_node

    def place(self, request: PlacementRequest, state) -> Placement:
        if request.gpus_per_node is not None:
            return self.inner.place(request, state)
        answer = Placement(request.job, None, f"no shape of {request.gpus} GPUs with the same GPUs per node")
        for _, per_node in uniform_placement_sizes(request.gpus, self.gpus_per_node):
            answer = self.inner.place(replace(request, gpus_per_node=per_node), state)
            if answer.placed:
                return answer
        return answer

    def place_all(self, requests, state):
        out = []
        for request in requests:
            placement = self.place(request, state)
            if placement.placed:
                state = state.take(placement)
            out.append(placement)
        return out


class AsLive:
    """Hands a policy the view the live daemon builds: each job's declared model's trace application
    and declared batch (the prior), with remaining steps from the job's own progress."""

    def __init__(self, policy, sim: Simulator, declared: dict[str, tuple[str, int]], speed: LiveSpeedModel) -> None:
        self.policy, self.sim, self.declared, self.speed = policy, sim, declared, speed
        self.name = policy.name

    def reset(self) -> None:
        self.policy.reset()

    def decide(self, view: ClusterView):
        remaining = {}
        jobs = []
        for job in view.jobs:
            sim_job = self.sim.by_id[job.id]
            remaining[job.id] = max(sim_job.app.target_progress - sim_job.progress, 0.0)
            app, batch = self.declared[job.id]
            jobs.append(replace(job, app=app, batch_size=batch))
        self.speed.remaining = remaining
        return self.policy.decide(replace(view, jobs=tuple(jobs)))


def specs_of(workload: dict) -> list[JobSpec]:
    specs = []
    for job in workload["jobs"]:
        curve = Curve.from_json(job["curve"], job["name"])
        register_app(job["name"], CurveApp(job["name"], curve, int(job["steps"]), int(job["batch_size"]),
                                           int(job["max_gpus"])))
        specs.append(JobSpec(job["name"], float(job["arrival_s"]), job["name"], int(job["gpus"]),
                             int(job["batch_size"]), source=job["name"]))
    return specs


def measured_restart_cost(runs: Path) -> float | None:
    costs = []
    for path in sorted(runs.glob("*.json")):
        result = json.loads(path.read_text())
        for job in result.get("jobs", []):
            costs += job.get("restart_costs_s", [])
    return statistics.fmean(costs) if costs else None


def simulate(workload: dict, arm: str, restart_cost: float, speed_kind: str) -> dict:
    policy_name, placer_name, interval = SETUP[arm]
    config = ClusterConfig(nodes=4, gpus_per_node=4, interval=interval, restart_penalty=restart_cost,
                           elastic=arm in ("drf", "dl2"), walltime_factor=0.0, nodes_per_switch=2)
    config, placer = make_placer(placer_name, config)
    placer = SlurmShapes(placer, config.gpus_per_node)
    sim = Simulator(specs_of(workload), config, name=f"live-{arm}")
    if speed_kind == "oracle" or policy_name == "fifo":
        policy = make_policy(policy_name, placer, OracleSpeedModel(config.gpus_per_node))
    else:
        live_speed = LiveSpeedModel(config.gpus_per_node, {})
        declared = {j["name"]: (j["app"], int(j["batch_size"])) for j in workload["jobs"]}
        policy = AsLive(make_policy(policy_name, placer, live_speed), sim, declared, live_speed)
    result = sim.run(policy)
    return {"arm": arm, "policy": policy_name, "placer": placer_name, "interval_s": interval,
            "restart_cost_s": round(restart_cost, 1), "speed": speed_kind, "jobs": len(result.jcts),
            "avg_jct_s": round(result.avg_jct_s, 1), "makespan_s": round(result.makespan_s, 1),
            "gpu_busy_fraction": round(result.gpu_utilisation, 3), "restarts": result.restarts,
            "jcts": {k: round(v, 1) for k, v in result.jcts.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=Path(__file__).parent / "workload-seed0.json")
    parser.add_argument("--runs", type=Path, default=Path(__file__).parent / "runs",
                        help="the live results (run.py --out-dir): restart cost and live JCTs")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--restart-cost", type=float, help="seconds per (re)start (default: measured in --runs)")
    parser.add_argument("--speed", choices=("prior", "oracle"), default="prior")
    parser.add_argument("--out", type=Path, help="write the simulated results here as JSON")
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms: choose from {', '.join(ARMS)}")
    try:
        workload = json.loads(args.workload.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"--workload {args.workload}: {exc}")
    cost = args.restart_cost
    if cost is None:
        cost = measured_restart_cost(args.runs) if args.runs.is_dir() else None
        if cost is None:
            parser.error(f"no restart cost measured in {args.runs}; pass --restart-cost SECONDS")
    if cost < 0:
        parser.error("--restart-cost must be >= 0")
    results = {arm: simulate(workload, arm, cost, args.speed) for arm in arms}
    print(f"restart cost {cost:.1f} s, DL2/DRF speed model: {args.speed}")
    print("| arm | simulated avg JCT (s) | live avg JCT (s) | gap | sim makespan (s) | sim GPU-busy | sim restarts |")
    print("|---|---|---|---|---|---|---|")
    for arm, sim in results.items():
        live_path = args.runs / f"{arm}.json"
        live = json.loads(live_path.read_text()) if live_path.exists() else None
        live_jct = live.get("avg_jct_s") if live and live.get("jobs_total") == sim["jobs"] else None
        gap = f"{(sim['avg_jct_s'] - live_jct) / live_jct:+.1%}" if live_jct else "n/a"
        sim["live_avg_jct_s"], sim["gap"] = live_jct, gap
        print(f"| {arm} | {sim['avg_jct_s']} | {live_jct if live_jct else 'n/a'} | {gap} | {sim['makespan_s']} "
              f"| {sim['gpu_busy_fraction']} | {sim['restarts']} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
