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
| plain | Slurm, no slurm-liquid | FIFO with backfill, Slurm's best-fit placer (`slurm`), a decision every second, no time limits |
| liquid | rigid jobs placed by the daemon | FIFO with backfill, Liquid's placer, a decision every second |
| drf | elastic 1:max, DRF every slot | DRF every `slot_s` (15 s) through `DaemonMirror`, placement every second |
| dl2 | elastic 1:max, DL2 every slot | DL2 (the shipped policy) the same way |

The restart cost (seconds from a requeue to the trainer's first step again) and the first-start cost
(from Slurm's start of a job to its first step) are the means measured in the live runs' JSON
(`--runs`), or `--restart-cost` / `--start-cost`. DL2's speed model: `prior` (default) is what the live
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import smoke  # noqa: E402

from slurm_liquid.daemon.elastic import LiveSpeedModel  # noqa: E402
from slurm_liquid.daemon.resize import uniform_placement_sizes  # noqa: E402
from slurm_liquid.placement.base import Placement, PlacementRequest  # noqa: E402
from slurm_liquid.policy import make_policy  # noqa: E402
from slurm_liquid.policy.base import Action, ClusterView, JobView, as_allocation  # noqa: E402
from slurm_liquid.sim.apps import register_app  # noqa: E402
from slurm_liquid.sim.curves import Curve, CurveApp  # noqa: E402
from slurm_liquid.sim.engine import ClusterConfig, Simulator  # noqa: E402
from slurm_liquid.sim.oracle import OracleSpeedModel  # noqa: E402
from slurm_liquid.sim.runner import make_placer  # noqa: E402
from slurm_liquid.sim.workload import JobSpec  # noqa: E402

ARMS = ("plain", "liquid", "drf", "dl2")
# The test cluster's daemon settings (containers/slurm/liquid.toml [elastic]).
DAEMON = {"slot_s": 15.0, "min_change_interval_s": 20.0, "max_changes_per_hour": 30}
# arm -> (policy, placer, decision interval in seconds: the placement pass's; slots come every slot_s)
# Slurm and the daemon's placement pass both start a job within about a second of its GPUs freeing.
SETUP = {"plain": ("fifo", "slurm", 1.0), "liquid": ("fifo", "liquid", 1.0),
         "drf": ("drf", "liquid", 1.0), "dl2": ("dl2", "liquid", 1.0)}


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


class DaemonMirror:
    """What the live daemon does around a resizing policy (daemon/elastic.py, at this commit):

    - placement: a waiting job starts at the GPUs it asked for as soon as they are free (Liquid's
      placer in Slurm's shapes), in arrival order: the daemon's placement pass, every decision;
    - every `slot_s` the policy decides; each RUNNING job's target is the GPUs of its action (0 when
      the policy's own placement left it out, then clamped to the job's minimum; no action: unchanged),
      clamped to [min, max]; the change is made only if the job has not started or changed in the last
      `min_change_s`, has changed fewer than `max_per_hour` times in the hour, and the target can be
      placed in Slurm's shapes counting the job's own GPUs as free; else the job keeps what it holds.
      A waiting job is never started by the slot, a running job never suspended.
    """

    def __init__(self, policy, placer, slot_s: float, min_change_s: float, max_per_hour: int) -> None:
        self.policy, self.placer = policy, placer
        self.slot_s, self.min_change_s, self.max_per_hour = slot_s, min_change_s, max_per_hour
        self.name = policy.name
        self.reset()

    def reset(self) -> None:
        self.policy.reset()
        self.next_slot = 0.0
        self.changed: dict[str, list[float]] = {}

    def decide(self, view: ClusterView) -> list[Action]:
        now = view.now
        held = {j.id: j.allocation for j in view.jobs if j.allocation}
        actions = []
        for job in view.jobs:                       # the placement pass
            if job.allocation:
                continue
            placement = self.placer.place(PlacementRequest(job.id, job.gpus), self._free(view, held))
            if placement.placed:
                held[job.id] = as_allocation(placement)
                self.changed[job.id] = [now]
                actions.append(Action(job.id, held[job.id]))
        running = [j for j in view.jobs if j.allocation]
        if now + 1e-9 < self.next_slot or not running:
            return actions
        self.next_slot = (now // self.slot_s + 1) * self.slot_s   # slots on the daemon's clock from its start
        wanted = {a.job: a.gpus for a in self.policy.decide(view)}
        for job in running:
            have = job.allocated
            target = min(max(wanted.get(job.id, have), job.min_gpus), job.upper)
            times = [t for t in self.changed.get(job.id, []) if t > now - 3600]
            if target == have or (times and now - times[-1] < self.min_change_s) or len(times) > self.max_per_hour:
                continue
            others = {k: v for k, v in held.items() if k != job.id}
            placement = self.placer.place(PlacementRequest(job.id, target), self._free(view, others))
            if placement.placed:
                held[job.id] = as_allocation(placement)
                self.changed[job.id] = [*times, now]
                actions.append(Action(job.id, held[job.id]))
        return actions

    @staticmethod
    def _free(view: ClusterView, held: dict):
        return view.free_state([JobView(k, 0.0, 0, allocation=v) for k, v in held.items()])


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


class LiveSimulator(Simulator):
    """The engine, with a job's first start costing what a first start costs live (`start_cost`)
    and every later start (a resize: checkpoint, requeue, start) the restart cost. The engine
    charges one penalty to every start; this sets the first one after it has."""

    def __init__(self, specs, config: ClusterConfig, name: str, start_cost: float) -> None:
        self.start_cost = start_cost
        super().__init__(specs, config, name)

    def _apply(self, actions) -> None:
        first = [a.job for a in actions if a.allocation and self.by_id[a.job].restarts is None]
        super()._apply(actions)
        for name in first:
            self.by_id[name].rescale_left = self.start_cost


def specs_of(workload: dict) -> list[JobSpec]:
    specs = []
    for job in workload["jobs"]:
        curve = Curve.from_json(job["curve"], job["name"])
        register_app(job["name"], CurveApp(job["name"], curve, int(job["steps"]), int(job["batch_size"]),
                                           int(job["max_gpus"])))
        specs.append(JobSpec(job["name"], float(job["arrival_s"]), job["name"], int(job["gpus"]),
                             int(job["batch_size"]), source=job["name"]))
    return specs


def measured_costs(runs: Path) -> tuple[float | None, float | None]:
    """(mean restart cost, mean first-start cost) over every job of every live result in `runs`."""
    restarts, starts = [], []
    for path in (runs / f"{arm}.json" for arm in ARMS):
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        for job in result.get("jobs", []):
            restarts += job.get("restart_costs_s", [])
            if job.get("start_cost_s") is not None:
                starts.append(job["start_cost_s"])
    return (statistics.fmean(restarts) if restarts else None), (statistics.fmean(starts) if starts else None)


def simulate(workload: dict, arm: str, restart_cost: float, speed_kind: str, start_cost: float | None = None
             ) -> dict:
    policy_name, placer_name, interval = SETUP[arm]
    config = ClusterConfig(nodes=4, gpus_per_node=4, interval=interval, restart_penalty=restart_cost,
                           elastic=arm in ("drf", "dl2"), walltime_factor=0.0, nodes_per_switch=2)
    config, placer = make_placer(placer_name, config)
    placer = SlurmShapes(placer, config.gpus_per_node)
    start = restart_cost if start_cost is None else start_cost
    sim = LiveSimulator(specs_of(workload), config, f"live-{arm}", start)
    if policy_name == "fifo":
        policy = make_policy(policy_name, placer)
    else:
        # As the daemon builds it: no placer of its own (the policy's default), the daemon places.
        if speed_kind == "oracle":
            inner = make_policy(policy_name, None, OracleSpeedModel(config.gpus_per_node))
        else:
            live_speed = LiveSpeedModel(config.gpus_per_node, {})
            declared = {j["name"]: (j["app"], int(j["batch_size"])) for j in workload["jobs"]}
            inner = AsLive(make_policy(policy_name, None, live_speed), sim, declared, live_speed)
        policy = DaemonMirror(inner, placer, DAEMON["slot_s"], DAEMON["min_change_interval_s"],
                              DAEMON["max_changes_per_hour"])
    result = sim.run(policy)
    return {"arm": arm, "policy": policy_name, "placer": placer_name, "interval_s": interval,
            "restart_cost_s": round(restart_cost, 1), "start_cost_s": round(start, 1), "speed": speed_kind, "jobs": len(result.jcts),
            "avg_jct_s": round(result.avg_jct_s, 1), "makespan_s": round(result.makespan_s, 1),
            "gpu_busy_fraction": round(result.gpu_utilisation, 3), "restarts": result.restarts,
            "jcts": {k: round(v, 1) for k, v in result.jcts.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=Path(__file__).parent / "workload-seed0.json")
    parser.add_argument("--runs", type=Path, default=Path(__file__).parent / "runs",
                        help="the live results (run.py --out-dir): restart cost and live JCTs")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--restart-cost", type=float, help="seconds a resize costs (default: measured in --runs)")
    parser.add_argument("--start-cost", type=float,
                        help="seconds a job's first start costs (default: measured in --runs, else the restart cost)")
    parser.add_argument("--speed", choices=("prior", "oracle"), default="prior")
    parser.add_argument("--smoke", action="store_true", help="the smoke workload (run.py --smoke): 4 jobs, half steps")
    parser.add_argument("--out", type=Path, help="write the simulated results here as JSON")
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms: choose from {', '.join(ARMS)}")
    try:
        workload = json.loads(args.workload.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"--workload {args.workload}: {exc}")
    if args.smoke:
        workload = smoke(workload)
    measured = measured_costs(args.runs) if args.runs.is_dir() else (None, None)
    cost = args.restart_cost if args.restart_cost is not None else measured[0]
    start = args.start_cost if args.start_cost is not None else measured[1]
    if cost is None:
        parser.error(f"no restart cost measured in {args.runs}; pass --restart-cost SECONDS")
    if cost < 0 or (start is not None and start < 0):
        parser.error("--restart-cost and --start-cost must be >= 0")
    results = {arm: simulate(workload, arm, cost, args.speed, start) for arm in arms}
    print(f"restart cost {cost:.1f} s, first start {cost if start is None else start:.1f} s, "
          f"DL2/DRF speed model: {args.speed}")
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
