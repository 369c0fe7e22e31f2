"""Live-replay workloads in the simulator: the jobs the live replay submits (`benchmarks/live/workload.py`),
each stepping on its own scaling curve, on the cluster they were drawn for, under the world's rules.

A workload file is JSON: `cluster` {nodes, gpus_per_node}, and `jobs`, each with its name, arrival, the
catalog model (`app`) and batch it declares, the GPUs it asks for, its elastic upper bound, its steps and
its curve (`sim.curves`). Arms:

| arm | what runs | simulated as |
|---|---|---|
| plain | Slurm alone: submitted shapes, no daemon, no resizes | FIFO with backfill, Slurm's best-fit placer, rigid jobs |
| static | the daemon's placement pass, no slot policy | the pass's starts (`Rules.daemon`), Liquid's placer, no resizes |
| drf, optimus, dl2 | the daemon with that slot policy | `Rules.daemon` around the policy, Liquid's placer |

Each job's first start costs `start_cost` (Slurm's start to the trainer's first step) and each later
start, a resize, `restart_cost` (signal, checkpoint, requeue, restart): the live means by default.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from slurm_liquid.errors import UsageError
from slurm_liquid.loop import Loop, Rules, Shape
from slurm_liquid.sim.apps import register_app
from slurm_liquid.sim.backend import SimBackend
from slurm_liquid.sim.curves import Curve, CurveApp
from slurm_liquid.sim.engine import ClusterConfig, SimResult, Simulator
from slurm_liquid.sim.workload import JobSpec
from slurm_liquid.views import ClusterView

LIVE_ARMS = ("plain", "static", "drf", "optimus", "dl2")
# Means over the live replay's runs since resizes are weighed on their placed nodes
# (benchmarks/live/runs-placed, runs-seed4-placed, runs-payback0): requeue to first step again, and
# Slurm's start to the first step.
LIVE_RESTART_S = 17.0
LIVE_START_S = 0.8
BF_WINDOW_S = 86400.0   # Slurm's default bf_window: a job with no time limit reserves nothing past it


def is_live_workload(path: str | Path) -> bool:
    return str(path).endswith(".json") and Path(path).is_file()


def load_live(path: str | Path) -> dict:
    """A live workload file, checked enough that a wrong one fails here with its name."""
    try:
        workload = json.loads(Path(path).read_text())
        jobs = workload["jobs"]
        cluster = workload["cluster"]
        int(cluster["nodes"]), int(cluster["gpus_per_node"])
        for job in jobs:
            job["name"], float(job["arrival_s"]), job["app"], int(job["batch_size"]), int(job["gpus"])
            int(job["max_gpus"]), int(job["steps"]), job["curve"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--workload {path}: not a live workload file ({type(exc).__name__}: {exc})") from None
    if not jobs:
        raise UsageError(f"--workload {path}: no jobs")
    return workload


def specs_of(workload: dict) -> list[JobSpec]:
    """The workload's jobs, each registered as an application that steps on its own curve."""
    specs = []
    for job in workload["jobs"]:
        curve = Curve.from_json(job["curve"], job["name"])
        register_app(job["name"], CurveApp(job["name"], curve, int(job["steps"]), int(job["batch_size"]),
                                           int(job["max_gpus"])))
        specs.append(JobSpec(job["name"], float(job["arrival_s"]), job["name"], int(job["gpus"]),
                             int(job["batch_size"]), source=job["name"]))
    return specs


class Declared(SimBackend):
    """The simulator as the live daemon sees it: each job's declared model and batch (its tag; the speed
    prior), not the curve it really follows, which only its reports reveal."""

    def __init__(self, sim: Simulator, declared: dict[str, tuple[str, int]]) -> None:
        from slurm_liquid.speed import trace_app

        self.declared = {k: (trace_app(model), model, batch) for k, (model, batch) in declared.items()}
        super().__init__(sim)

    def observe(self) -> ClusterView | None:
        view = super().observe()
        if view is None:
            return None
        jobs = tuple(replace(j, app=self.declared[j.id][0], batch_size=self.declared[j.id][2]) for j in view.jobs)
        return replace(view, jobs=jobs)

    def reports(self):
        for report in super().reports():
            yield replace(report, model=self.declared[report.job][1])


class LiveSimulator(Simulator):
    """The engine, with a job's first start costing `start_cost` and every later start (a resize) the
    restart penalty. The engine charges the penalty to every start; this sets the first one after it."""

    def __init__(self, specs, config: ClusterConfig, name: str, start_cost: float) -> None:
        self.start_cost = start_cost
        super().__init__(specs, config, name)

    def _apply(self, actions) -> None:
        first = [a.job for a in actions if a.allocation and self.by_id[a.job].restarts is None]
        super()._apply(actions)
        for name in first:
            self.by_id[name].rescale_left = self.start_cost


def live_config(workload: dict, restart_cost: float, elastic: bool) -> ClusterConfig:
    cluster = workload["cluster"]
    nodes, per_node = int(cluster["nodes"]), int(cluster["gpus_per_node"])
    # the test cluster: two leaf switches (containers/slurm/topology.conf); a decision every second, as
    # Slurm and the daemon's placement pass start a job within about a second of its GPUs freeing
    return ClusterConfig(nodes=nodes, gpus_per_node=per_node, interval=1.0, restart_penalty=restart_cost,
                         elastic=elastic, walltime_factor=0.0, nodes_per_switch=max(nodes // 2, 1))


def run_live(workload: dict, arm: str, rules: Rules, restart_cost: float = LIVE_RESTART_S,
             start_cost: float = LIVE_START_S, speed_kind: str = "measured", policy_file: str | None = None,
             name: str = "live") -> SimResult:
    """One arm on a live workload. `rules`: the daemon's (`Rules.daemon`) for static/drf/optimus/dl2;
    plain is Slurm alone whatever they say. `speed_kind`: measured = the speed room on the jobs'
    reports, as the daemon (default); oracle = the true curves."""
    from slurm_liquid.policy import make_policy
    from slurm_liquid.sim.runner import make_placer, make_speed

    if arm not in LIVE_ARMS:
        raise UsageError(f"unknown arm {arm!r} for a live workload (known: {', '.join(LIVE_ARMS)})")
    plain = arm == "plain"
    config, placer = make_placer("slurm" if plain else "liquid", live_config(workload, restart_cost, not plain))
    sim = LiveSimulator(specs_of(workload), config, name, start_cost)
    if plain:
        from slurm_liquid.policy.fifo import FifoBackfill

        policy = FifoBackfill(window_s=BF_WINDOW_S)
        return sim.run(policy, loop=Loop.under(Rules("plain", Shape.SUBMITTED, suspends=False), policy, placer))
    declared = {j["name"]: (j["app"], int(j["batch_size"])) for j in workload["jobs"]}
    backend: SimBackend = Declared(sim, declared)
    speed = make_speed(speed_kind, config)
    if speed_kind == "oracle":
        backend = SimBackend(sim)
    policy = make_policy(arm, speed, policy_file, world=rules.name)
    return sim.run(policy, loop=Loop.under(rules, policy, placer, speed), backend=backend)
