#!/usr/bin/env python3
"""The live replay in the simulator: the same jobs, arrivals and curves, the measured restart cost.

    python benchmarks/live/simulate.py --workload benchmarks/live/workload-seed0.json \\
        --runs benchmarks/live/runs [--restart-cost 12] [--speed prior|oracle] [--out benchmarks/live/sim.json]

Every job of the workload becomes a `CurveApp` (slurm_liquid/sim/curves.py) registered under its
name, so the simulator's jobs step exactly as the live stand-in trainers do. The cluster is the
test cluster's 4 nodes x 4 GPUs. It runs the one scheduling loop (`slurm_liquid.loop`) the daemon
runs, with the daemon's rules: Slurm's shape rule (the same GPUs on every node of a multi-node job;
a rigid job only on the `-N` it was submitted with, `Shape.SUBMITTED`), no suspension of a running
job, a job kept as it is when its target cannot be placed.
Arms:

| arm | live | simulated |
|---|---|---|
| plain | Slurm, no slurm-liquid | FIFO with backfill, Slurm's best-fit placer (`slurm`), a decision every second, no time limits |
| liquid | rigid jobs placed by the daemon | FIFO with backfill, Liquid's placer, a decision every second |
| drf | elastic 1:max, DRF every slot | DRF every `slot_s` (15 s) through `DaemonMirror`, placement every second |
| dl2 | elastic 1:max, DL2 every slot | DL2 (the shipped policy) the same way |

The restart cost (seconds from a requeue to the trainer's first step again) and the first-start cost
(from Slurm's start of a job to its first step) are the means measured in the live runs' JSON
(`--runs`), or `--restart-cost` / `--start-cost`. DRF's and DL2's speed model: `measured` (default) is
what the live daemon consults (the speed room: the declared model's prior, then the job's own simulated
reports); `oracle` is the true curve. The gap to the live
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

from slurm_liquid.config import Config  # noqa: E402
from slurm_liquid.loop import Loop, PlaceStage, Shape  # noqa: E402
from slurm_liquid.policy import make_policy  # noqa: E402
from slurm_liquid.policy.base import ClusterView, Decision  # noqa: E402
from slurm_liquid.policy.fifo import FifoBackfill  # noqa: E402
from slurm_liquid.sim.backend import SimBackend  # noqa: E402
from slurm_liquid.speed import MeasuredSpeedModel, trace_app  # noqa: E402
from slurm_liquid.sim.apps import register_app  # noqa: E402
from slurm_liquid.sim.curves import Curve, CurveApp  # noqa: E402
from slurm_liquid.sim.engine import ClusterConfig, Simulator  # noqa: E402
from slurm_liquid.sim.oracle import OracleSpeedModel  # noqa: E402
from slurm_liquid.sim.runner import make_placer  # noqa: E402
from slurm_liquid.sim.workload import JobSpec  # noqa: E402

ARMS = ("plain", "liquid", "drf", "dl2")
# The test cluster's daemon settings (containers/slurm/liquid.toml [elastic]).
BF_WINDOW_S = 86400.0   # Slurm's default bf_window (1440 minutes)
# The payback is the shipped one, which run.py gives the live daemon.
DAEMON = {"slot_s": 15.0, "min_change_interval_s": 20.0, "max_changes_per_hour": 30,
          "payback": Config().elastic.payback, "start_wider": Config().elastic.start_wider}
# arm -> (policy, placer, decision interval in seconds: the placement pass's; slots come every slot_s)
# Slurm and the daemon's placement pass both start a job within about a second of its GPUs freeing.
SETUP = {"plain": ("fifo", "slurm", 1.0), "liquid": ("fifo", "liquid", 1.0),
         "drf": ("drf", "liquid", 1.0), "dl2": ("dl2", "liquid", 1.0)}


class DaemonMirror:
    """What the live daemon does around a resizing policy, as a policy of the one loop (GPU counts only;
    the loop places them in Slurm's shapes, never suspends a running job, and keeps a job whose target
    cannot be placed):

    - a waiting job starts as soon as GPUs are free, in arrival order (the daemon's placement pass, and
      Slurm, at every decision): a rigid job at the GPUs it asked for, an elastic one at the largest
      count of its range up to its ask that has a Slurm shape free now (the place stage's rule, and the
      pass's `Admitter._narrower`), or, when it is the only job waiting and `start_wider`, at up to one
      node's GPUs that one node has free (`Admitter._wider`);
    - every `slot_s` the policy decides the running jobs' counts; a change is asked only if the job has
      not started or changed in the last `min_change_s` and has changed fewer than `max_per_hour` times
      in the hour (the daemon's `[elastic]` limits). A waiting job is never started by the slot.
    """

    def __init__(self, policy, slot_s: float, min_change_s: float, max_per_hour: int,
                 start_wider: bool = False) -> None:
        self.policy = policy
        self.speed = getattr(policy, "speed", None)   # the loop bounds unmeasured widths for speed policies
        self.slot_s, self.min_change_s, self.max_per_hour = slot_s, min_change_s, max_per_hour
        self.start_wider = start_wider
        self.name = policy.name
        self.reset()

    def reset(self) -> None:
        self.policy.reset()
        self.next_slot = 0.0
        self.changed: dict[str, list[float]] = {}
        self.held: dict[str, tuple] = {}
        self.last = 0.0

    def decide(self, view: ClusterView) -> Decision:
        now = view.now
        for job in view.jobs:        # what the previous decision changed (started or resized) happened then
            if job.allocation and job.allocation != self.held.get(job.id):
                self.changed.setdefault(job.id, []).append(self.last)
        self.held = {j.id: j.allocation for j in view.jobs if j.allocation}
        self.last = now
        moves = [(j.id, self.start_count(view, j)) for j in view.jobs if not j.allocation]   # the placement pass
        running = [j for j in view.jobs if j.allocation]
        if now + 1e-9 < self.next_slot or not running:
            return Decision(tuple(moves))
        self.next_slot = (now // self.slot_s + 1) * self.slot_s   # slots on the daemon's clock from its start
        wanted = self.policy.decide(view).counts
        for job in running:
            times = [t for t in self.changed.get(job.id, []) if t > now - 3600]
            if job.id not in wanted or (times and now - times[-1] < self.min_change_s) or len(times) > self.max_per_hour:
                continue
            moves.append((job.id, wanted[job.id]))
        return Decision(tuple(moves))

    def start_count(self, view: ClusterView, job) -> int:
        """The count the placement pass starts a waiting job at: its ask, or, for an elastic job that is
        the only one waiting and asked for less than a node, the largest count of its range up to a node
        that one node has free (`Admitter._wider`; the place stage puts it on one node, fewest first)."""
        if not self.start_wider or not job.elastic or sum(1 for j in view.jobs if not j.allocation) != 1:
            return job.gpus
        widest = max((n.gpus for n in view.nodes), default=1)
        most = max((n.gpus_free for n in view.free_state().nodes.values()), default=0)
        return max(job.gpus, min(job.upper, widest, most)) if job.gpus < widest else job.gpus


class MirrorLoop(Loop):
    """The one loop as the mirror runs it: the daemon's placement pass is not the slot's loop, so a
    waiting job's start is never bounded by what the speed room has measured (`Loop.admit` bounds
    what a policy that decides by speed may give a job; here the pass, not the policy, starts jobs)."""

    def admit(self, view: ClusterView):
        bounded_view, bounded = super().admit(view)
        if not bounded:
            return bounded_view, bounded
        waiting = {j.id: j for j in view.jobs if not j.allocation}
        jobs = tuple(waiting.get(j.id, j) for j in bounded_view.jobs)
        return replace(bounded_view, jobs=jobs), {k: v for k, v in bounded.items() if k not in waiting}


class Declared(SimBackend):
    """The simulator as the live daemon sees it: each job's declared model and batch (what its tag
    says; the speed prior), not the curve it really follows, which only its reports reveal."""

    def __init__(self, sim: Simulator, declared: dict[str, tuple[str, int]]) -> None:
        self.declared = declared
        super().__init__(sim)

    def observe(self) -> ClusterView | None:
        view = super().observe()
        if view is None:
            return None
        jobs = tuple(replace(j, app=trace_app(self.declared[j.id][0]), batch_size=self.declared[j.id][1])
                     for j in view.jobs)
        return replace(view, jobs=jobs)

    def reports(self):
        for report in super().reports():
            yield replace(report, model=self.declared[report.job][0])


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


def recorded_payback(runs: Path, arm: str) -> float:
    """The payback the live `arm` in `runs` ran with (`run.py --payback`); the shipped one when it did
    not run, or ran before the option (run.py then always gave the shipped one)."""
    path = runs / f"{arm}.json"
    value = json.loads(path.read_text()).get("payback") if path.exists() else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return Config().elastic.payback


def simulate(workload: dict, arm: str, restart_cost: float, speed_kind: str, start_cost: float | None = None,
             payback: float | None = None) -> dict:
    """One arm in the mirror; `payback`: the daemon's guard for drf/dl2 (default `DAEMON["payback"]`)."""
    policy_name, placer_name, interval = SETUP[arm]
    payback = DAEMON["payback"] if payback is None else payback
    config = ClusterConfig(nodes=4, gpus_per_node=4, interval=interval, restart_penalty=restart_cost,
                           elastic=arm not in ("plain", "liquid"), walltime_factor=0.0, nodes_per_switch=2)
    config, placer = make_placer(placer_name, config)
    place = PlaceStage(placer, Shape.SUBMITTED)
    start = restart_cost if start_cost is None else start_cost
    sim = LiveSimulator(specs_of(workload), config, f"live-{arm}", start)
    declared = {j["name"]: (j["app"], int(j["batch_size"])) for j in workload["jobs"]}
    backend: SimBackend = Declared(sim, declared)
    speed = None
    if policy_name == "fifo":
        # Slurm's backfill: the live jobs have no time limit, so a blocked head job's start lies past
        # bf_window (1 day) and holds no reservation: every later job that fits starts.
        policy = FifoBackfill(window_s=BF_WINDOW_S)
    else:
        if speed_kind == "oracle":   # the true curves: what a perfect speed model would say
            speed = OracleSpeedModel(config.gpus_per_node)
            backend = SimBackend(sim)
        else:                        # the daemon's: the speed room, fed with the jobs' reports
            speed = MeasuredSpeedModel(config.gpus_per_node)
        policy = DaemonMirror(make_policy(policy_name, speed), DAEMON["slot_s"], DAEMON["min_change_interval_s"],
                              DAEMON["max_changes_per_hour"], DAEMON["start_wider"])
    MirrorLoop(policy, place, speed, suspends=False, payback=payback if speed is not None else 0.0,
               weigh_placed=speed is not None).run(backend)
    result = sim.result(policy.name)
    return {"arm": arm, "policy": policy_name, "placer": placer_name, "interval_s": interval,
            "payback": payback if speed is not None else None,
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
    parser.add_argument("--speed", choices=("measured", "oracle"), default="measured",
                        help="what DRF/DL2 know of speed: measured = the speed room on the jobs' reports, as the "
                             "daemon (default); oracle = the true curves")
    parser.add_argument("--smoke", action="store_true", help="the smoke workload (run.py --smoke): 4 jobs, half steps")
    parser.add_argument("--payback", type=float, metavar="F",
                        help="the daemon's [elastic] payback for drf/dl2 (default: what each arm's live run in "
                             "--runs ran with, run.py --payback; else the shipped one)")
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
    if args.payback is not None and not 0 <= args.payback <= 100:
        parser.error(f"--payback {args.payback:g}: give a factor from 0 to 100")
    paybacks = {arm: args.payback if args.payback is not None else recorded_payback(args.runs, arm) for arm in arms}
    results = {arm: simulate(workload, arm, cost, args.speed, start, paybacks[arm]) for arm in arms}
    guards = ", ".join(f"{arm} {paybacks[arm]:g}" for arm in arms if SETUP[arm][0] != "fifo")
    print(f"restart cost {cost:.1f} s, first start {cost if start is None else start:.1f} s, "
          f"DL2/DRF speed model: {args.speed}" + (f", payback: {guards}" if guards else ""))
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
