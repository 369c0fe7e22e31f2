"""The place stage: a policy's GPU counts become nodes, under the back end's rules.

Policies decide counts only (`views.Decision`). Here each moved job is placed in the
decision's order on what the jobs that keep their nodes leave free, each placement seeing the GPUs the
previous ones took. Two rules come from the back end:

- `shape`: FREE lets a job take any GPUs per node (the Pollux artifact's simulator, whose published
  numbers depend on it); UNIFORM is what Slurm can express for one job (`--nodes=K --gres=gpu:N`: the
  same N GPUs on each of K nodes), tried fewest nodes first; SUBMITTED is UNIFORM, except that a job
  starting at the GPUs it asked for takes only the shape it was submitted with, the fewest nodes
  (`--nodes=ceil(G / GPUs per node)`, as benchmarks/live/run.py submits): Slurm does not spread a job
  over more nodes than its `--nodes`, and the daemon's admitter starts a job at its ask in the
  submitted shape, choosing the shape only of a narrower start (`Admitter._narrower`) or a resize.
  Spreading such starts made the live replay's simulated plain Slurm and DRF 20-24% slower than the
  cluster on a workload of jobs that are slow across nodes.
- `usable`: the names of the nodes one job may use (on the live cluster: up, in its partition, with
  its GPU type and features, `placement.slurm_rules.JobViews.usable`; free CPUs and memory are not
  checked when a running job is resized); None (the hook, or its answer): every node.
  `eligible` is the older form of the same rule, the job's view of the free state as a `ClusterState`.

With an array placer (`placement.engine.IndexedPlacer`) and no `eligible` hook, the free state is kept
as the placer's arrays (`FreeArrays`): built once per round and updated as each placement takes GPUs
and each moved job frees its own, so that placing one job costs no walk over the nodes (a round of
the daemon's slot at 4,096 nodes moved ~900 jobs, each with a walk: 2 s of its 3.7). A property test
(tests/unit/test_loop_place.py) holds the arrays to a rebuild from scratch and the placements to the
`ClusterState` path, which every other placer and hook still take.

A job that cannot be placed is suspended if it held GPUs and the back end suspends (the simulator);
otherwise it stays as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import AbstractSet, Callable, Iterable

import numpy as np

from slurm_liquid.placement.base import ClusterState, Placement, PlacementRequest, Placer
from slurm_liquid.placement.engine import IndexedPlacer
from slurm_liquid.placement.index import Snapshot, TreeIndex
from slurm_liquid.views import Action, Allocation, ClusterView, Decision, JobView


class Shape(str, Enum):
    FREE = "free"
    UNIFORM = "uniform"
    SUBMITTED = "submitted"


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
# The names of the nodes one job may use; None: every node.
Usable = Callable[[JobView], "AbstractSet[str] | None"]


class FreeArrays:
    """The free state of one round as the placer's arrays, kept current as placements take GPUs and
    moved jobs free theirs (what `ClusterState.take` and `_release` do to the state, on arrays).

    `seen(names)` is what `TreeIndex.snapshot` makes of the state cut to `names`: nodes outside it
    offer nothing (no GPUs, no type), and only the GPU types of nodes inside it are known."""

    def __init__(self, tree: TreeIndex, state: ClusterState):
        self.tree = tree
        self.base = state
        self.snap = tree.snapshot(state)      # raises for a node the topology does not know
        self.in_state = np.zeros(len(tree.names), dtype=bool)
        self.in_state[[tree.position[name] for name in state.nodes]] = True
        self._masks: dict[int, tuple[AbstractSet[str], tuple]] = {}

    @property
    def free(self) -> np.ndarray:
        return self.snap.free

    def take(self, nodes: dict[str, int]) -> None:
        """A placement's GPUs are taken; raises (changing nothing) if it would over-commit a node."""
        allocation = self.tree.allocation_of(nodes)
        for i, gpus in allocation.items():
            if not self.in_state[i] or gpus > self.snap.free[i]:
                raise ValueError(f"placement takes {gpus} GPUs on {self.tree.names[i]}, "
                                 f"which has {int(self.snap.free[i])} free")
        self.snap.take(allocation)

    def release(self, allocation: Iterable[tuple[str, int]]) -> dict[int, int]:
        """A job's GPUs are free again, never beyond a node's GPUs (nodes outside the state are
        ignored); returns what the changed nodes had, for `restore`."""
        before: dict[int, int] = {}
        for name, gpus in allocation:
            i = self.tree.position.get(name)
            if i is None or not self.in_state[i]:
                continue
            before.setdefault(i, int(self.snap.free[i]))
            self.snap.free[i] = min(int(self.snap.total[i]), int(self.snap.free[i]) + gpus)
        return before

    def restore(self, before: dict[int, int]) -> None:
        for i, free in before.items():
            self.snap.free[i] = free

    def mask(self, names: AbstractSet[str]) -> np.ndarray:
        """The positions of `names` that the state holds (cached per set object: the hook's sets are
        shared by the jobs that ask alike)."""
        return self._cut(names)[0]

    def _cut(self, names: AbstractSet[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
        """(mask, total, GPU type codes, known types) of the nodes cut to `names`: fixed for the round."""
        held = self._masks.get(id(names))
        if held is None or held[0] is not names:
            snap = self.snap
            mask = np.zeros(len(self.tree.names), dtype=bool)
            mask[[self.tree.position[n] for n in names if n in self.base.nodes]] = True
            types = np.where(mask, snap.gpu_type, -1)
            present = set(np.unique(types).tolist())
            codes = {t: c for t, c in snap.type_codes.items() if c in present}
            held = self._masks[id(names)] = (names, (mask, np.where(mask, snap.total, 0), types, codes))
        return held[1]

    def seen(self, names: AbstractSet[str] | None) -> Snapshot:
        """A fresh snapshot of the current state cut to `names` (None: every node)."""
        if names is None:
            return self.snap.copy()
        mask, total, types, codes = self._cut(names)
        return Snapshot(total, np.where(mask, self.snap.free, 0), types, codes)

    def state(self) -> ClusterState:
        """The current state as a `ClusterState` (what the state path would hold now)."""
        free = self.snap.free
        nodes = {}
        for name, node in self.base.nodes.items():
            now = int(free[self.tree.position[name]])
            nodes[name] = node if now == node.gpus_free else replace(node, gpus_free=now)
        return ClusterState(nodes)


@dataclass(frozen=True)
class PlaceStage:
    placer: Placer
    shape: Shape = Shape.FREE
    eligible: Eligible | None = None
    usable: Usable | None = None

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
        arrays = self._arrays(state)
        if arrays is not None:
            return self._place_arrays(arrays, jobs, decision, suspends, widest)
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

    def _arrays(self, state: ClusterState) -> FreeArrays | None:
        """The round's state as arrays, when the placer reads arrays and no hook needs a ClusterState."""
        placer = self.placer
        if self.eligible is not None or not isinstance(placer, IndexedPlacer) or type(placer).place is not IndexedPlacer.place:
            return None
        if any(name not in placer.tree.position for name in state.nodes):
            return None     # the state path raises, naming them, when a placement reads them
        return FreeArrays(placer.tree, state)

    def _place_arrays(self, arrays: FreeArrays, jobs: dict[str, JobView], decision: Decision, suspends: bool,
                      widest: int) -> list[Action]:
        """`place` on arrays: the same steps in the same order (a release that leads to no placement
        is undone, as the state path drops its released copy)."""
        actions: list[Action] = []
        for job_id, gpus in decision.moves:
            job = jobs.get(job_id)
            if job is None:
                continue
            if gpus <= 0:
                if job.allocation:
                    actions.append(Action(job.id))
                    if not suspends:
                        arrays.release(job.allocation)
                continue
            before = {} if suspends or not job.allocation else arrays.release(job.allocation)
            names = self.usable(job) if self.usable is not None else None
            placement = self._place(job, gpus, None, widest, lambda: arrays.seen(names))
            if placement is not None:
                arrays.take(placement.nodes)
                actions.append(Action(job.id, as_allocation(placement)))
            else:
                arrays.restore(before)
                if job.allocation and suspends:
                    actions.append(Action(job.id))
        return actions

    def _place(self, job: JobView, gpus: int, state: ClusterState | None, widest: int,
               fresh: Callable[[], Snapshot] | None = None) -> Placement | None:
        """A placement of `gpus`; under UNIFORM, an elastic job whose count has no shape that fits now
        gets the largest count below it that has one (never below its minimum): Slurm cannot give 5
        GPUs on 4-GPU nodes, but 4 it can, and a count that can never be placed would starve the job.
        `fresh`: the job's view as new placer arrays for each try (the array path), instead of `state`."""
        seen = state
        if fresh is None:
            seen = self.eligible(job, state) if self.eligible is not None else state
            if self.usable is not None:
                names = self.usable(job)
                if names is not None:
                    seen = ClusterState({n: node for n, node in seen.nodes.items() if n in names})
        if self.shape is Shape.FREE:
            return self._first(job, gpus, [None], seen, fresh)
        counts = range(gpus, max(job.min_gpus, 1) - 1, -1) if job.elastic else (gpus,)
        starts_as_submitted = self.shape is Shape.SUBMITTED and not job.allocation
        for count in counts:
            shapes = slurm_shapes(count, widest)
            if starts_as_submitted and count == job.gpus:
                shapes = shapes[:1]
            placement = self._first(job, count, [per_node for _, per_node in shapes], seen, fresh)
            if placement is not None:
                return placement
        return None

    def _first(self, job: JobView, gpus: int, shapes: list[int | None], seen: ClusterState | None,
               fresh: Callable[[], Snapshot] | None) -> Placement | None:
        for per_node in shapes:
            request = PlacementRequest(job.id, gpus, per_node, job.gpu_type)
            if fresh is not None:
                placement = self.placer.place_on(fresh(), request)
            else:
                placement = self.placer.place(request, seen)
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
