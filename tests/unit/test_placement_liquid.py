"""Liquid best fit and the baselines on small hand-made clusters."""

import pytest

from slurm_liquid.placement.base import ClusterState, NodeState, PlacementRequest
from slurm_liquid.placement.baselines import FirstFit, RandomFit, SlurmBestFit
from slurm_liquid.placement.factory import PLACERS, make_placer
from slurm_liquid.placement.liquid import LiquidBestFit
from slurm_liquid.topology import Topology

TWO_LEAVES = Topology.from_topology_conf("""
SwitchName=l1 Nodes=n[1-4]
SwitchName=l2 Nodes=n[5-8]
SwitchName=top Switches=l[1-2]
""")


def state(free, gpus=8, types=None):
    return ClusterState({f"n{i + 1}": NodeState(f"n{i + 1}", gpus, f, None if types is None else types[i])
                         for i, f in enumerate(free)})


def test_small_job_goes_to_the_fullest_node_that_fits():
    placement = LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 3), state([8, 5, 4, 8, 3, 8, 8, 8]))
    assert placement.nodes == {"n5": 3}


def test_ties_go_to_the_leaf_with_less_free():
    placement = LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 8), state([8, 8, 8, 8, 8, 0, 0, 0]))
    assert placement.nodes == {"n5": 8}


def test_multi_node_job_stays_under_one_leaf_and_fills_partial_nodes():
    # leaf l1 has 8+5+5=18 free, l2 has 24: 10 GPUs fit both; l1 is tighter and 5+5 fills two nodes
    placement = LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 10), state([8, 5, 5, 0, 8, 8, 8, 0]))
    assert placement.nodes == {"n2": 5, "n3": 5}


def test_alpha_one_prefers_fewer_nodes_alpha_zero_prefers_filled_nodes():
    free = state([8, 5, 5, 0, 0, 0, 0, 0])
    request = PlacementRequest("j", 10)
    assert LiquidBestFit(TWO_LEAVES, alpha=1.0).place(request, free).nodes == {"n1": 8, "n2": 2}
    assert LiquidBestFit(TWO_LEAVES, alpha=0.0).place(request, free).nodes == {"n2": 5, "n3": 5}


def test_job_spans_leaves_only_when_no_leaf_holds_it():
    placement = LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 40), state([8] * 8))
    assert sum(placement.nodes.values()) == 40 and len(placement.nodes) == 5
    assert {TWO_LEAVES.leaf_of(n) for n in placement.nodes} == {"l1", "l2"}


def test_gpus_per_node_takes_exactly_that_many_from_each_node():
    placement = LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 8, gpus_per_node=4), state([8, 3, 4, 6, 0, 0, 0, 0]))
    assert placement.nodes == {"n3": 4, "n4": 4}


def test_gpu_type_is_respected():
    types = ["a"] * 4 + ["b"] * 4
    placement = LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 4, gpu_type="b"), state([8] * 8, types=types))
    assert TWO_LEAVES.leaf_of(next(iter(placement.nodes))) == "l2"


@pytest.mark.parametrize("request_, free, reason", [
    (PlacementRequest("j", 65), [8] * 8, "needs 65 GPUs; 64 free in the cluster"),
    (PlacementRequest("j", 16, gpus_per_node=8), [8, 7, 7, 7, 7, 7, 7, 7], "needs 2 nodes with 8 free GPUs each; 1 such nodes"),
    (PlacementRequest("j", 1, gpu_type="h100"), [8] * 8, "no node has GPUs of type h100"),
])
@pytest.mark.parametrize("name", list(PLACERS))
def test_a_job_that_cannot_fit_says_why(name, request_, free, reason):
    kwargs = {"generations": 2, "time_budget_s": None} if name == "ga" else {}
    placement = make_placer(name, TWO_LEAVES, **kwargs).place(request_, state(free))
    assert placement.nodes is None and not placement.placed
    assert reason in placement.reason


def test_place_all_sees_earlier_jobs_and_leaves_the_state_alone():
    free = state([4, 0, 0, 0, 0, 0, 0, 0])
    before = dict(free.nodes)
    out = LiquidBestFit(TWO_LEAVES).place_all([PlacementRequest("a", 3), PlacementRequest("b", 2)], free)
    assert out[0].nodes == {"n1": 3} and out[1].nodes is None
    assert free.nodes == before


def test_state_with_nodes_the_topology_lacks_is_refused():
    bad = ClusterState({"zz": NodeState("zz", 8, 8)})
    with pytest.raises(Exception, match="zz"):
        LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 1), bad)


def test_nodes_missing_from_the_state_are_unavailable():
    partial = ClusterState({"n8": NodeState("n8", 8, 2)})
    assert LiquidBestFit(TWO_LEAVES).place(PlacementRequest("j", 2), partial).nodes == {"n8": 2}


def test_baselines():
    free = state([1, 8, 2, 8, 8, 8, 8, 8])
    request = PlacementRequest("j", 4)
    assert FirstFit(TWO_LEAVES).place(request, free).nodes == {"n1": 1, "n2": 3}
    assert SlurmBestFit(TWO_LEAVES).place(request, free).nodes == {"n1": 1, "n2": 3}
    assert SlurmBestFit(TWO_LEAVES).place(PlacementRequest("j", 30), free).nodes == \
        {"n5": 8, "n6": 8, "n7": 8, "n8": 6}  # l2 is the tightest leaf that fits 30
    a, b = RandomFit(TWO_LEAVES, seed=3), RandomFit(TWO_LEAVES, seed=3)
    assert [a.place(request, free).nodes for _ in range(3)] == [b.place(request, free).nodes for _ in range(3)]


def test_bad_options():
    with pytest.raises(ValueError):
        LiquidBestFit(TWO_LEAVES, alpha=1.5)
    with pytest.raises(ValueError, match="unknown placer"):
        make_placer("best", TWO_LEAVES)
