"""The one scheduling-policy interface, driven by both the simulator and the live daemon.

A policy sees a `ClusterView` (the nodes, the active jobs and what each holds now) and
answers with `Action`s: the allocation each job should hold from now on. It never
learns whether the view came from Slurm or from the simulator, and it never applies
anything itself: the caller (simulator engine or Slurm actuator) compares each action
with the job's current allocation and restarts, starts or suspends the job when they
differ. A job that no action names keeps what it holds.

Allocations are ordered tuples of (node name, GPUs): the order is the rank order of
the job's replicas, which the measured step times depend on (see SIMULATOR.md 3.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

from slurm_liquid.placement.base import ClusterState, NodeState, Placement, PlacementRequest, Placer

Allocation = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node: its name, GPU count and the leaf switch it hangs from."""

    name: str
    gpus: int
    switch: str = "s0"


@dataclass(frozen=True, slots=True)
class JobView:
    """What a policy may know about one active (submitted, unfinished) job."""

    id: str
    submit_time: float
    gpus: int  # the GPU count the user asked for (rigid jobs run at exactly this)
    allocation: Allocation = ()
    min_gpus: int = 1
    max_gpus: int | None = None  # elastic upper bound; None: the job is rigid at `gpus`
    attained_gpu_seconds: float = 0.0
    restarts: int = 0
    app: str | None = None
    batch_size: int | None = None
    epoch: int = 0
    epochs: int | None = None
    time_limit_s: float | None = None  # the user's wall-time limit (FIFO backfill uses it)
    started_at: float | None = None  # when the current allocation began

    @property
    def allocated(self) -> int:
        return sum(g for _, g in self.allocation)

    @property
    def elastic(self) -> bool:
        return self.max_gpus is not None

    @property
    def upper(self) -> int:
        return self.gpus if self.max_gpus is None else self.max_gpus


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster as the policy sees it at time `now` (seconds)."""

    now: float
    nodes: tuple[NodeView, ...]
    jobs: tuple[JobView, ...]  # active jobs in submission order (ties keep input order)
    restart_penalty_s: float = 30.0

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def free_state(self, keep: Iterable[JobView] | None = None) -> ClusterState:
        """Free GPUs per node when only the jobs in `keep` (default: all) hold theirs."""
        used: dict[str, int] = {}
        for job in self.jobs if keep is None else keep:
            for node, gpus in job.allocation:
                used[node] = used.get(node, 0) + gpus
        return ClusterState({n.name: NodeState(n.name, n.gpus, n.gpus - used.get(n.name, 0)) for n in self.nodes})


@dataclass(frozen=True, slots=True)
class Action:
    """Give job `job` exactly `allocation` from now on; an empty allocation suspends it."""

    job: str
    allocation: Allocation = field(default=())

    @property
    def gpus(self) -> int:
        return sum(g for _, g in self.allocation)


class Policy(Protocol):
    """A scheduling policy: stateful across calls, reset between independent runs."""

    name: str

    def reset(self) -> None:
        """Forget everything learned from earlier calls (a new simulation or a daemon restart)."""
        ...

    def decide(self, view: ClusterView) -> list[Action]:
        """The allocations that should change now."""
        ...


class SpeedModel(Protocol):
    """Predicts a job's speed; the simulator's oracle or a model fitted on the live cluster."""

    def iteration_time(self, job: JobView, gpus: int) -> float:
        """Seconds per optimizer step of `job` on `gpus` GPUs packed onto whole nodes."""
        ...

    def remaining_iterations(self, job: JobView) -> float:
        """Optimizer steps `job` still needs at its batch size."""
        ...


def as_allocation(placement: Placement) -> Allocation:
    if placement.nodes is None:
        return ()
    return tuple((node, int(g)) for node, g in placement.nodes.items() if g)


def place_in_order(placer: Placer, view: ClusterView, counts: Sequence[tuple[JobView, int]],
                   keep: Iterable[JobView]) -> list[Action]:
    """Place each (job, GPU count) in turn on what `keep` leaves free; suspend those that do not fit.

    Jobs whose count is 0 are suspended. Each placement sees the GPUs the previous ones took.
    """
    state = view.free_state(keep)
    actions: list[Action] = []
    for job, gpus in counts:
        if gpus <= 0:
            if job.allocation:
                actions.append(Action(job.id))
            continue
        placement = placer.place(PlacementRequest(job.id, gpus), state)
        if placement.placed:
            state = state.take(placement)
            actions.append(Action(job.id, as_allocation(placement)))
        elif job.allocation:
            actions.append(Action(job.id))
    return actions


def apply_counts(placer: Placer, view: ClusterView, counts: Sequence[int]) -> list[Action]:
    """Actions giving each job of `view.jobs` its GPU count from `counts`.

    A job whose count is unchanged keeps its nodes (no restart); the others are placed
    in ascending order of count (stable, so ties go in arrival order), smallest first.
    """
    keep = [j for j, n in zip(view.jobs, counts) if n and j.allocated == n]
    kept = {j.id for j in keep}
    moves = sorted(((j, n) for j, n in zip(view.jobs, counts) if j.id not in kept), key=lambda jn: jn[1])
    return place_in_order(placer, view, moves, keep)


def changed(view: ClusterView, actions: Iterable[Action]) -> dict[str, Allocation]:
    """The actions that really change a job's allocation, keyed by job id."""
    current: Mapping[str, Allocation] = {j.id: j.allocation for j in view.jobs}
    return {a.job: a.allocation for a in actions if current.get(a.job, ()) != a.allocation}
