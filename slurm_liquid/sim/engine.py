"""The simulation engine: a fixed-interval clock driving jobs and one policy (SIMULATOR.md 1, 4).

Two ways to drive it:

- `Simulator.run(policy)`: the whole workload through the one scheduling loop
  (`slurm_liquid.loop`, with `sim.backend.SimBackend`), returns a `SimResult`.
- `view = sim.reset()`, then `view = sim.step(actions)` until it returns None: one
  scheduling slot per call, for policies trained in the loop (DL2). After each step,
  `sim.last_progress` holds the slot's normalised progress (a ready-made reward).

Each tick advances every allocated job by `interval` seconds, moves the clock, and asks
the policy about the active jobs. Stretches with no active job are skipped in one jump,
which changes nothing because the policy is not called while the cluster is empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from slurm_liquid.errors import LiquidError, UsageError
from slurm_liquid.views import (REFERENCE_RESTART_PENALTY_S, Action, ClusterView, JobView, NodeView, Policy,
                                SpeedModel)
from slurm_liquid.sim.apps import load_app
from slurm_liquid.sim.job import SimJob
from slurm_liquid.sim.oracle import isolated_runtime
from slurm_liquid.sim.workload import MAX_MEASURED_GPUS, JobSpec, check_fits


if TYPE_CHECKING:
    from slurm_liquid.loop import Loop, PlaceStage
    from slurm_liquid.sim.backend import SimBackend

MAX_GPUS_PER_NODE = 4  # placements.csv measures 1-4 replicas per node


@dataclass(frozen=True)
class ClusterConfig:
    """The simulated cluster and the costs of changing allocations."""

    nodes: int = 16
    gpus_per_node: int = 4
    interval: float = 60.0
    restart_penalty: float = REFERENCE_RESTART_PENALTY_S  # seconds lost on every (re)start; a Slurm requeue costs more
    nodes_per_switch: int | None = None  # None: all nodes under one switch (the Pollux set-up)
    cross_switch_slowdown: float = 0.0  # rate penalty of a job whose nodes span leaf switches
    interference: float = 0.0  # the artifact's slowdown of distributed jobs sharing a node
    elastic: bool = True  # jobs may run on 1..batch/min_local GPUs (used by DRF, Optimus)
    # Jobs pick their own goodput-best batch at every start and epoch (as Pollux's and AdaptDL's
    # jobs do) instead of training at the declared one; policies still see the declared batch.
    batch_scaling: bool = False
    walltime_factor: float = 2.0  # FIFO time limit = factor x isolated run time + penalty
    node_switch: Mapping[str, str] | None = None  # explicit node -> leaf switch (a Topology)
    # A run stops with an error once the clock passes the last arrival by this much: a policy that
    # restarts jobs faster than they can run (a change every slot, a restart longer than a slot)
    # would otherwise never finish. The Pollux workloads end within about a day of their last arrival.
    horizon_s: float = 14 * 86400.0

    def __post_init__(self) -> None:
        if self.nodes <= 0 or self.gpus_per_node <= 0:
            raise LiquidError(f"cluster needs nodes > 0 and GPUs per node > 0, got {self.nodes} x {self.gpus_per_node}")
        if self.gpus_per_node > MAX_GPUS_PER_NODE:
            raise LiquidError(f"the measured traces cover up to {MAX_GPUS_PER_NODE} GPUs per node, got {self.gpus_per_node}")
        if self.interval <= 0 or self.restart_penalty < 0:
            raise LiquidError("interval must be positive and restart penalty non-negative")
        if self.nodes_per_switch is not None and self.nodes_per_switch <= 0:
            raise LiquidError(f"nodes per switch must be positive, got {self.nodes_per_switch}")
        if not 0 <= self.cross_switch_slowdown < 1 or not 0 <= self.interference < 1:
            raise LiquidError("cross-switch slowdown and interference must lie in [0, 1)")

    def node_views(self) -> tuple[NodeView, ...]:
        width = len(str(self.nodes - 1))
        names = [f"n{i:0{width}d}" for i in range(self.nodes)]
        if self.node_switch is not None:
            return tuple(NodeView(n, self.gpus_per_node, self.node_switch.get(n, "s0")) for n in names)
        per = self.nodes_per_switch or self.nodes
        return tuple(NodeView(n, self.gpus_per_node, f"s{i // per}") for i, n in enumerate(names))


@dataclass
class SimResult:
    """What one policy did on one workload."""

    policy: str
    workload: str
    jcts: dict[str, float]
    avg_jct_s: float
    makespan_s: float
    gpu_utilisation: float
    restarts: int
    gpus_total: int = 0
    times: list[float] = field(default_factory=list)  # decision times
    gpus_in_use: list[int] = field(default_factory=list)  # GPUs allocated after each decision

    def summary(self) -> dict:
        return {"policy": self.policy, "workload": self.workload, "jobs": len(self.jcts),
                "avg_jct_s": self.avg_jct_s, "makespan_s": self.makespan_s,
                "gpu_utilisation": self.gpu_utilisation, "restarts": self.restarts}


class Simulator:
    """A trace-driven cluster running one workload under one policy at a time."""

    def __init__(self, specs: Sequence[JobSpec], config: ClusterConfig | None = None, name: str = "workload") -> None:
        self.config = config or ClusterConfig()
        self.name = name
        self.nodes = self.config.node_views()
        self.total_gpus = sum(n.gpus for n in self.nodes)
        self.specs = sorted(specs, key=lambda s: s.time)
        if not self.specs:
            raise LiquidError(f"{name}: the workload has no jobs")
        check_fits(self.specs, self.total_gpus)
        self._switch = {n.name: n.switch for n in self.nodes}
        self.reset()

    # -- the step-by-step interface ----------------------------------------------------
    def reset(self) -> ClusterView | None:
        """Start the workload over; returns the first decision's view."""
        cfg = self.config
        self.jobs: list[SimJob] = []
        for i, spec in enumerate(self.specs):
            app = load_app(spec.application)
            # Elastic jobs stop at 64 GPUs: the traces measure nothing larger.
            largest = app.max_bsz if cfg.batch_scaling else spec.batch_size
            upper = min(self.total_gpus, max(spec.num_replicas, min(MAX_MEASURED_GPUS, largest // app.min_local_bsz)))
            limit = None
            if cfg.walltime_factor > 0:
                run = isolated_runtime(app, spec.batch_size, spec.num_replicas, cfg.gpus_per_node)
                limit = cfg.walltime_factor * run + cfg.restart_penalty
            self.jobs.append(SimJob(spec, i, app, upper if cfg.elastic else None, limit, cfg.batch_scaling))
        self.by_id = {}
        for j in self.jobs:
            if self.by_id.setdefault(j.spec.name, j) is not j:
                raise UsageError(f"{j.spec.source or self.name}: job name {j.spec.name!r} is used twice")
        self.tick = 0
        self.clock = 0.0
        self.next_arrival = 0
        self.active: list[SimJob] = []
        self.completed = 0
        self.last_progress = 0.0
        self.times: list[float] = []
        self.in_use: list[int] = []
        return self._advance()

    @property
    def done(self) -> bool:
        return self.completed == len(self.jobs)

    def view(self) -> ClusterView:
        now = self.clock
        jobs = tuple(JobView(
            id=j.spec.name, submit_time=j.spec.time, gpus=j.spec.num_replicas, allocation=j.allocation,
            max_gpus=j.max_gpus, attained_gpu_seconds=j.attained, restarts=j.restarts or 0,
            app=j.spec.application, batch_size=j.spec.batch_size, epoch=j.epoch, epochs=j.app.max_epochs,
            time_limit_s=j.time_limit, started_at=j.started_at, changes=j.changes) for j in self.active)
        return ClusterView(now, self.nodes, jobs, self.config.restart_penalty)

    def step(self, actions: Sequence[Action]) -> ClusterView | None:
        """Apply the policy's actions for this slot, then run to the next decision (None: all done)."""
        self._apply(actions)
        return self._advance()

    # -- whole runs --------------------------------------------------------------------
    def run(self, policy: Policy, place: "PlaceStage | None" = None, speed: SpeedModel | None = None,
            progress: bool = False, loop: "Loop | None" = None, backend: "SimBackend | None" = None) -> SimResult:
        """The whole workload under `policy`, through the one scheduling loop (`slurm_liquid.loop`).

        `place`: the place stage (default: the artifact's greedy rule, any GPUs per node); `speed`: the
        speed model `policy` was built with, when it learns from the simulated progress reports; `loop`:
        the loop to run instead (`Loop.under(rules, ...)`, whose policy is `policy` as the rules call it);
        `backend`: the simulator as the loop sees it (default: `SimBackend` of this simulator)."""
        from slurm_liquid.loop import Loop, PlaceStage
        from slurm_liquid.placement.greedy import MostFreeGreedy
        from slurm_liquid.sim.backend import SimBackend

        loop = loop or Loop(policy, place or PlaceStage(MostFreeGreedy()), speed)
        policy = loop.policy
        policy.reset()
        backend = backend or SimBackend(self)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(self.jobs), desc=f"{policy.name} {self.name}", unit="job", leave=False)
        done = 0
        horizon = max((j.spec.time for j in self.jobs), default=0.0) + self.config.horizon_s
        while loop.turn(backend) is not None:
            if self.clock > horizon:
                left = sum(1 for j in self.jobs if j.completion is None)
                raise LiquidError(f"policy {policy.name} left {left} of {len(self.jobs)} jobs of {self.name} unfinished "
                                  f"{self.config.horizon_s / 86400:g} simulated days after the last arrival "
                                  f"(restarts so far: {sum(j.restarts or 0 for j in self.jobs)}); it stalls on this workload")
            if bar is not None:
                bar.update(self.completed - done)
                done = self.completed
        if bar is not None:
            bar.close()
        return self.result(policy.name)

    def result(self, policy_name: str) -> SimResult:
        jcts = {j.spec.name: j.completion - j.spec.time for j in self.jobs if j.completion is not None}
        makespan = max((j.completion for j in self.jobs if j.completion is not None), default=0.0)
        busy = sum(j.attained for j in self.jobs)
        return SimResult(
            policy=policy_name, workload=self.name, jcts=jcts,
            avg_jct_s=sum(jcts.values()) / len(jcts) if jcts else math.nan, makespan_s=makespan,
            gpu_utilisation=busy / (self.total_gpus * makespan) if makespan else 0.0,
            restarts=sum(j.restarts or 0 for j in self.jobs), gpus_total=self.total_gpus, times=self.times, gpus_in_use=self.in_use)

    # -- internals ---------------------------------------------------------------------
    def _slowdown(self, allocation) -> float:
        s = self.config.cross_switch_slowdown
        if not s or len(allocation) < 2:
            return 0.0
        return s if len({self._switch[n] for n, _ in allocation}) > 1 else 0.0

    def _apply(self, actions: Sequence[Action]) -> None:
        cfg = self.config
        for action in actions:
            job = self.by_id.get(action.job)
            if job is None or job.done or job.spec.time > self.clock:
                raise LiquidError(f"policy acted on {action.job!r}, which is not an active job")
            if action.allocation != job.allocation:
                job.reallocate(action.allocation, self.clock, cfg.restart_penalty, self._slowdown(action.allocation))
        used: dict[str, int] = {}
        for job in self.active:
            for node, gpus in job.allocation:
                used[node] = used.get(node, 0) + gpus
        for node in self.nodes:
            if used.pop(node.name, 0) > node.gpus:
                raise LiquidError(f"policy over-committed node {node.name} at t={self.clock:g}")
        if used:
            raise LiquidError(f"policy used unknown node(s) {', '.join(sorted(used))}")
        self.times.append(self.clock)
        self.in_use.append(sum(j.gpus for j in self.active))

    def _interfered(self) -> set[int]:
        """Indices of distributed jobs sharing a node with another distributed job."""
        holders: dict[str, list[SimJob]] = {}
        for job in self.active:
            if len(job.allocation) > 1:
                for node, _ in job.allocation:
                    holders.setdefault(node, []).append(job)
        hit: set[int] = set()
        for jobs in holders.values():
            if len(jobs) > 1:
                hit.update(j.index for j in jobs)
        return hit

    def _advance(self) -> ClusterView | None:
        """Run ticks until the next decision with active jobs; None once every job completed."""
        interval = self.config.interval
        interference = self.config.interference
        specs = self.specs
        self.last_progress = 0.0
        while not self.done:
            hit = self._interfered() if interference else ()
            running = [j for j in self.active if j.counts]
            if not running and not self.active and self.next_arrival < len(specs):
                # Nothing runs or waits: jump to the first tick at or after the next arrival.
                self.tick = max(self.tick + 1, math.ceil(specs[self.next_arrival].time / interval))
            else:
                for job in running:
                    gained = job.advance(self.clock, interval, interference if job.index in hit else 0.0)
                    self.last_progress += gained / job.app.target_progress
                self.tick += 1
            self.clock = self.tick * interval
            finished = [j for j in self.active if j.done]
            if finished:
                self.completed += len(finished)
                self.active = [j for j in self.active if not j.done]
                for j in finished:  # a finished job's GPUs are free at the next decision
                    j.reallocate((), self.clock, 0.0, 0.0)
            while self.next_arrival < len(specs) and specs[self.next_arrival].time <= self.clock:
                self.active.append(self.jobs[self.next_arrival])
                self.next_arrival += 1
            if self.active:
                return self.view()
        return None
