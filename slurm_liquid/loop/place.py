"""The place stage: a policy's GPU counts become nodes, under the back end's rules.

Policies decide counts only (`policy.base.Decision`). Here each moved job is placed in the
decision's order on what the jobs that keep their nodes leave free, each placement seeing the GPUs the
previous ones took. Two rules come from the back end:

- `shape`: FREE lets a job take any GPUs per node (the Pollux artifact's simulator, whose published
  numbers depend on it); UNIFORM is what Slurm can express for one job (`--nodes=K --gres=gpu:N`: the
  same N GPUs on each of K nodes), tried fewest nodes first.
- `eligible`: the nodes one job may use as it sees them (on the live cluster: up, in its partition,
  with its GPU type and features, `placement.slurm_rules.JobViews.usable`; free CPUs and memory are
  not checked when a running job is resized); None: every node.

A job that cannot be placed is suspended if it held GPUs and the back end suspends (the simulator);
otherwise it stays as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable

from slurm_liquid.placement.base import ClusterState, Placement, PlacementRequest, Placer
from slurm_liquid.policy.base import Action, Allocation, ClusterView, Decision, JobView


class Shape(str, Enum):
    FREE = "free"
    UNIFORM = "uniform"


def slurm_shapes(gpus: int, gpus_per_node: int) -> list[tuple[int, int]]:
    """(nodes, GPUs per node) shapes Slurm can express for `gpus` GPUs, fewest nodes first."""
    shapes = []
    for nodes in range(max(1, math.ceil(gpus / max(gpus_per_node, 1))), gpus + 1):
        if gpus % nodes == 0 and gpus // nodes <= gpus_per_node:
            shapes.append((nodes, gpus // nodes))
    return shapes


def as_allocation(placement: Placement) -> Allocation:
    if placement.nodes is None:
        return ()
    return tuple((node, int(g)) for node, g in placement.nodes.items() if g)


# The nodes one job may use: its view of the free state (other nodes absent or offering no GPUs).
Eligible = Callable[[JobView, ClusterState], ClusterState]


@dataclass(frozen=True)
class PlaceStage:
    placer: Placer
    shape: Shape = Shape.FREE
    eligible: Eligible | None = None

    def place(self, view: ClusterView, decision: Decision, suspends: bool = True) -> list[Action]:
        """The actions that give each moved job its count; running jobs not moved keep their nodes.

        `suspends` False (a back end that cannot suspend a running job: Slurm without a requeue): a moved
        running job frees its own GPUs only when its turn comes, and keeps them when its new count cannot
        be placed, so no placement ever counts on GPUs a kept job still holds."""
        moved = decision.counts
        held = [j for j in view.jobs if j.allocation and (j.id not in moved or not suspends)]
        state = view.free_state(held)
        jobs = {j.id: j for j in view.jobs}
        widest = max((n.gpus for n in view.nodes), default=1)
        actions: list[Action] = []
        for job_id, gpus in decision.moves:
            job = jobs.get(job_id)
            if job is None:
                continue
            if gpus <= 0:
                if job.allocation:
                    actions.append(Action(job.id))
                    state = _release(state, job.allocation) if not suspends else state
                continue
            own = state if suspends or not job.allocation else _release(state, job.allocation)
            placement = self._place(job, gpus, own, widest)
            if placement is not None:
                state = own.take(placement)
                actions.append(Action(job.id, as_allocation(placement)))
            elif job.allocation and suspends:
                actions.append(Action(job.id))
        return actions

    def _place(self, job: JobView, gpus: int, state: ClusterState, widest: int) -> Placement | None:
        """A placement of `gpus`; under UNIFORM, an elastic job whose count has no shape that fits now
        gets the largest count below it that has one (never below its minimum): Slurm cannot give 5
        GPUs on 4-GPU nodes, but 4 it can, and a count that can never be placed would starve the job."""
        seen = self.eligible(job, state) if self.eligible is not None else state
        if self.shape is Shape.FREE:
            return self._first(job, gpus, [None], seen)
        counts = range(gpus, max(job.min_gpus, 1) - 1, -1) if job.elastic else (gpus,)
        for count in counts:
            placement = self._first(job, count, [per_node for _, per_node in slurm_shapes(count, widest)], seen)
            if placement is not None:
                return placement
        return None

    def _first(self, job: JobView, gpus: int, shapes: list[int | None], seen: ClusterState) -> Placement | None:
        for per_node in shapes:
            placement = self.placer.place(PlacementRequest(job.id, gpus, per_node, job.gpu_type), seen)
            if placement.placed:
                return placement
        return None


def _release(state: ClusterState, allocation: Allocation) -> ClusterState:
    """`state` with the GPUs of `allocation` free again (nodes it does not list are ignored)."""
    nodes = dict(state.nodes)
    for name, gpus in allocation:
        node = nodes.get(name)
        if node is not None:
            nodes[name] = replace(node, gpus_free=min(node.gpus, node.gpus_free + gpus))
    return ClusterState(nodes)
