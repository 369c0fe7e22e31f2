"""The ground floor of scheduling: what a policy sees and answers, for the simulator and the daemon.

These types sit below every room that schedules (speed, policy, loop, sim, daemon), so that none of
them imports a room above it for a type.

A policy sees a `ClusterView` (the nodes, the active jobs and what each holds now) and
answers with a `Decision`: the GPU count each job should hold from now on. It never
learns whether the view came from Slurm or from the simulator, never picks nodes and
never applies anything itself: the loop (`slurm_liquid.loop`) places the counts with
the placer and the shape rules of its back end, and the back end (simulator or Slurm)
restarts, starts or suspends each job whose `Action` differs from what it holds.

Allocations are ordered tuples of (node name, GPUs): the order is the rank order of
the job's replicas, which the measured step times depend on (see SIMULATOR.md 3.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

from slurm_liquid.placement.base import ClusterState, NodeState

Allocation = tuple[tuple[str, int], ...]
# The Pollux artifact's restart penalty (seconds lost on every start and restart): the simulator's,
# training's and a view's default; the daemon's is `[elastic] restart_penalty_s`.
REFERENCE_RESTART_PENALTY_S = 30.0


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node: its name, GPU count and the leaf switch it hangs from."""

    name: str
    gpus: int
    switch: str = "s0"
    gpu_type: str | None = None


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
    gpu_type: str | None = None  # the GPU type the job asked for (None: any)
    changes: tuple[float, ...] = ()  # when its allocation changed while it ran (resizes), oldest first

    @property
    def allocated(self) -> int:
        return sum(g for _, g in self.allocation)

    @property
    def elastic(self) -> bool:
        return self.max_gpus is not None

    @property
    def least(self) -> int:
        """The fewest GPUs it runs on: 1 if elastic, else all it asked for."""
        return self.min_gpus if self.elastic else self.gpus

    @property
    def upper(self) -> int:
        return self.gpus if self.max_gpus is None else self.max_gpus


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster as the policy sees it at time `now` (seconds)."""

    now: float
    nodes: tuple[NodeView, ...]
    jobs: tuple[JobView, ...]  # active jobs in submission order (ties keep input order)
    restart_penalty_s: float = REFERENCE_RESTART_PENALTY_S

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def free_state(self, keep: Iterable[JobView] | None = None) -> ClusterState:
        """Free GPUs per node when only the jobs in `keep` (default: all) hold theirs."""
        used: dict[str, int] = {}
        for job in self.jobs if keep is None else keep:
            for node, gpus in job.allocation:
                used[node] = used.get(node, 0) + gpus
        return ClusterState({n.name: NodeState(n.name, n.gpus, max(n.gpus - used.get(n.name, 0), 0), n.gpu_type)
                             for n in self.nodes})


@dataclass(frozen=True, slots=True)
class Action:
    """Give job `job` exactly `allocation` from now on; an empty allocation suspends it."""

    job: str
    allocation: Allocation = field(default=())

    @property
    def gpus(self) -> int:
        return sum(g for _, g in self.allocation)


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer: how many GPUs jobs should hold from now on, never on which nodes.

    `moves` are (job id, GPU count) pairs in the order the place stage places them; a count of 0
    suspends the job. A running job that `moves` does not name keeps the nodes it holds.
    """

    moves: tuple[tuple[str, int], ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.moves)

    @classmethod
    def resize(cls, view: ClusterView, counts: Sequence[int]) -> "Decision":
        """Each job of `view.jobs` at its count from `counts`: a job whose count is unchanged keeps its
        nodes (no restart); the others are placed in ascending order of count (stable: ties go in
        arrival order), smallest first, as the Pollux artifact's policies do."""
        moves = [(j.id, n) for j, n in zip(view.jobs, counts) if not (n and j.allocated == n)]
        moves.sort(key=lambda jn: jn[1])
        return cls(tuple(moves))


class Policy(Protocol):
    """A scheduling policy: stateful across calls, reset between independent runs."""

    name: str

    def reset(self) -> None:
        """Forget everything learned from earlier calls (a new simulation or a daemon restart)."""
        ...

    def decide(self, view: ClusterView) -> Decision:
        """The GPU counts that should change now (placement is the loop's next stage)."""
        ...


class SpeedModel(Protocol):
    """Predicts a job's speed; the simulator's oracle or a model fitted on the live cluster."""

    def iteration_time(self, job: JobView, gpus: int) -> float:
        """Seconds per optimizer step of `job` on `gpus` GPUs packed onto whole nodes."""
        ...

    def remaining_iterations(self, job: JobView) -> float:
        """Optimizer steps `job` still needs at its batch size."""
        ...


def changed(view: ClusterView, actions: Iterable[Action]) -> dict[str, Allocation]:
    """The actions that really change a job's allocation, keyed by job id."""
    current: Mapping[str, Allocation] = {j.id: j.allocation for j in view.jobs}
    return {a.job: a.allocation for a in actions if current.get(a.job, ()) != a.allocation}
