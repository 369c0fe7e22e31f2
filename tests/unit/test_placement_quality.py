"""The quality measures the benchmark and the command line report."""

from slurm_liquid.placement.base import ClusterState, NodeState
from slurm_liquid.placement.quality import job_quality, whole_free_nodes, whole_node_slots
from slurm_liquid.topology import Topology

TREE = Topology.tree([2, 2, 2], node_prefix="n")  # n0 n1 | n2 n3 || n4 n5 | n6 n7


def test_one_node_crosses_nothing():
    q = job_quality(TREE, {"n0": 8})
    assert (q.nodes, q.switches_spanned, q.cross_switch_pairs, q.network_cost) == (1, 0, 0, 0.0)


def test_one_leaf_spans_one_switch():
    q = job_quality(TREE, {"n0": 4, "n1": 4})
    assert q.leaf_switches == ("s.0.0",) and q.switches_spanned == 1 and q.cross_switch_pairs == 0


def test_across_spines_counts_every_switch_on_the_way_and_every_pair():
    q = job_quality(TREE, {"n0": 2, "n1": 1, "n6": 3})
    assert q.switches_spanned == 5  # two leaves, two spines, the root
    assert q.cross_switch_pairs == 3 * 3
    assert q.network_cost > job_quality(TREE, {"n0": 3, "n2": 3}).network_cost


def test_fragmentation_measures():
    state = ClusterState({"a": NodeState("a", 8, 8), "b": NodeState("b", 8, 7), "c": NodeState("c", 16, 16),
                          "d": NodeState("d", 0, 0)})
    assert whole_node_slots(state, 8) == 1 + 0 + 2
    assert whole_free_nodes(state) == 2
