"""The place stage's array path (loop/place.py, `FreeArrays`) against the ClusterState path it replaces.

The arrays are built once per round and changed in place as placements take GPUs and moved jobs free
theirs; after any sequence of takes and frees they must be what `TreeIndex.snapshot` makes of the state
the ClusterState path holds (`ClusterState.take`, `_release`), also cut to any set of nodes. And the
stage must hand out the same actions either way, for any view, decision, node filter, shape and
suspend rule.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from slurm_liquid.loop import PlaceStage, Shape
from slurm_liquid.loop.place import FreeArrays, _release
from slurm_liquid.placement.base import ClusterState, NodeState, Placement
from slurm_liquid.placement.baselines import FirstFit, SlurmBestFit
from slurm_liquid.placement.index import Snapshot, TreeIndex
from slurm_liquid.placement.liquid import LiquidBestFit
from slurm_liquid.views import ClusterView, Decision, JobView, NodeView
from slurm_liquid.topology import Topology

TOPOLOGY = Topology.from_topology_conf("""
SwitchName=l1 Nodes=n[1-4]
SwitchName=l2 Nodes=n[5-8]
SwitchName=l3 Nodes=n[9-12]
SwitchName=top Switches=l[1-3]
""")
TREE = TreeIndex.of(TOPOLOGY)
NAMES = [f"n{i}" for i in range(1, 13)]
TYPES = (None, "a100", "h100")
# names a job's allocation may name: the topology's, and one it does not know (ignored by both paths)
HELD_ON = (*NAMES, "zz")


@st.composite
def states(draw) -> ClusterState:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=12, unique=True))
    nodes = {}
    for name in names:
        gpus = draw(st.sampled_from((4, 8)))
        nodes[name] = NodeState(name, gpus, draw(st.integers(0, gpus)), draw(st.sampled_from(TYPES)))
    return ClusterState(nodes)


def same_snapshot(got: Snapshot, want: Snapshot) -> None:
    """Equal arrays; GPU type codes may be numbered differently, but must name the same types."""
    assert np.array_equal(got.total, want.total) and np.array_equal(got.free, want.free)
    names = {c: t for t, c in got.type_codes.items()}
    wanted = {c: t for t, c in want.type_codes.items()}
    assert [names.get(int(c)) for c in got.gpu_type] == [wanted.get(int(c)) for c in want.gpu_type]
    assert set(got.type_codes) == set(want.type_codes)


def cut(state: ClusterState, names) -> ClusterState:
    return state if names is None else ClusterState({n: node for n, node in state.nodes.items() if n in names})


ops = st.lists(st.tuples(st.sampled_from(("take", "free")),
                         st.lists(st.tuples(st.sampled_from(HELD_ON), st.integers(1, 8)), max_size=4)),
               max_size=12)


@settings(max_examples=300, deadline=None)
@given(states(), ops, st.lists(st.none() | st.frozensets(st.sampled_from(NAMES)), min_size=1, max_size=3))
def test_incremental_arrays_are_a_rebuild_after_any_takes_and_frees(state, steps, filters) -> None:
    arrays = FreeArrays(TREE, state)
    for what, pairs in steps:
        if what == "take":
            # what a placement may take: nodes of the state, within their free GPUs
            nodes: dict[str, int] = {}
            for name, gpus in pairs:
                if name in state.nodes and name not in nodes:
                    nodes[name] = min(gpus, state.nodes[name].gpus_free)
            nodes = {n: g for n, g in nodes.items() if g}
            state = state.take(Placement("j", nodes))
            arrays.take(nodes)
        else:
            state = _release(state, pairs)
            arrays.release(pairs)
        same_snapshot(TREE.snapshot(state), arrays.seen(None))
        assert arrays.state() == state
        for names in filters:
            same_snapshot(arrays.seen(names), TREE.snapshot(cut(state, names)))


@settings(max_examples=100, deadline=None)
@given(states(), st.lists(st.tuples(st.sampled_from(HELD_ON), st.integers(1, 8)), min_size=1, max_size=3))
def test_a_take_that_over_commits_is_refused_and_changes_nothing(state, pairs) -> None:
    arrays = FreeArrays(TREE, state)
    nodes = dict(pairs)
    try:
        state.take(Placement("j", nodes))
        refused = False
    except (ValueError, KeyError):
        refused = True
    before = arrays.free.copy()
    if refused:
        try:
            arrays.take(nodes)
            raise AssertionError("an over-committing take was accepted")
        except (ValueError, KeyError):
            pass
        assert np.array_equal(arrays.free, before)
    else:
        arrays.take(nodes)


@st.composite
def rounds(draw):
    """A view (nodes of the topology, jobs holding GPUs on some of them), a decision and a node filter."""
    state = draw(states())
    nodes = tuple(NodeView(n.name, n.gpus, TOPOLOGY.leaf_of(n.name), n.gpu_type) for n in state.nodes.values())
    jobs = []
    for k in range(draw(st.integers(1, 8))):
        held = draw(st.lists(st.tuples(st.sampled_from(HELD_ON), st.sampled_from((1, 2, 4))), max_size=3,
                             unique_by=lambda p: p[0]))
        elastic = draw(st.booleans())
        gpus = draw(st.integers(1, 8))
        jobs.append(JobView(f"j{k}", float(k), gpus, allocation=tuple(held), min_gpus=draw(st.integers(1, 2)),
                            max_gpus=draw(st.integers(gpus, 16)) if elastic else None,
                            gpu_type=draw(st.sampled_from(TYPES))))
    moves = draw(st.lists(st.tuples(st.sampled_from([j.id for j in jobs] + ["gone"]), st.integers(0, 12)),
                          max_size=10, unique_by=lambda m: m[0]))
    filters = {j.id: draw(st.none() | st.frozensets(st.sampled_from(NAMES))) for j in jobs}
    return ClusterView(0.0, nodes, tuple(jobs)), Decision(tuple(moves)), filters


@settings(max_examples=300, deadline=None)
@given(rounds(), st.sampled_from((LiquidBestFit(TOPOLOGY), FirstFit(TOPOLOGY), SlurmBestFit(TOPOLOGY))),
       st.sampled_from(tuple(Shape)), st.booleans())
def test_the_array_path_places_as_the_state_path(round_, placer, shape, suspends) -> None:
    view, decision, filters = round_
    arrays = PlaceStage(placer, shape, usable=lambda job: filters.get(job.id))
    # a ClusterState hook takes the state path: the old way of cutting each job's view
    states = PlaceStage(placer, shape, eligible=lambda job, state: cut(state, filters.get(job.id)))
    assert arrays._arrays(view.free_state()) is not None and states._arrays(view.free_state()) is None
    assert arrays.place(view, decision, suspends) == states.place(view, decision, suspends)


def test_a_state_with_a_node_the_topology_lacks_takes_the_state_path() -> None:
    state = ClusterState({"n1": NodeState("n1", 8, 8), "zz": NodeState("zz", 8, 8)})
    assert PlaceStage(LiquidBestFit(TOPOLOGY))._arrays(state) is None
