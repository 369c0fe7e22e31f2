"""The switch tree: structure, errors, distances and network cost."""

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurm_liquid.errors import UsageError
from slurm_liquid.topology import FLAT_SWITCH, VIRTUAL_ROOT, SwitchSpec, Topology

FIXTURES = Path(__file__).parents[1] / "fixtures" / "topology"


def test_conf_and_scontrol_give_the_same_tree():
    conf = Topology.from_topology_conf((FIXTURES / "small.conf").read_text())
    scontrol = Topology.from_scontrol((FIXTURES / "small_scontrol.txt").read_text())
    for topo in (conf, scontrol):
        assert topo.nodes == ["gpu01", "gpu02", "gpu03", "gpu04"]
        assert topo.root == "spine"
        assert [topo.leaf_of(n) for n in topo.nodes] == ["leaf1", "leaf1", "leaf2", "leaf2"]
        assert topo.level("leaf1") == 0 and topo.level("spine") == 1
        assert topo.graph.edges["spine", "leaf1"]["link_speed"] == 50
        assert topo.graph.edges["leaf1", "gpu01"]["weight"] == 1.0   # fastest link
        assert topo.graph.edges["spine", "leaf2"]["weight"] == 2.0   # half the speed, twice the cost
    assert sorted(conf.graph.edges) == sorted(scontrol.graph.edges)


def test_from_file_recognises_both_formats():
    assert Topology.from_file(FIXTURES / "small.conf").nodes == Topology.from_file(FIXTURES / "small_scontrol.txt").nodes
    with pytest.raises(UsageError, match="cannot read topology file"):
        Topology.from_file(FIXTURES / "missing.conf")


def test_flat_is_one_switch():
    topo = Topology.flat(["b", "a"])
    assert topo.nodes == ["b", "a"] and topo.leaf_of("a") == FLAT_SWITCH
    assert topo.distance("a", "b") == 2.0 and topo.diameter == 2.0
    with pytest.raises(UsageError):
        Topology.flat([])


def test_regular_tree_shape():
    topo = Topology.tree([2, 3, 4])
    assert len(topo) == 24 and topo.level(topo.root) == 2
    assert len([s for s in topo.switches if topo.level(s) == 0]) == 6
    assert topo.nodes_under(topo.leaf_of("node00")) == ["node00", "node01", "node02", "node03"]


@pytest.mark.parametrize("specs, message", [
    ([SwitchSpec("s1", switches=("s9",))], "unknown switch 's9'"),
    ([SwitchSpec("a", switches=("b",)), SwitchSpec("b", switches=("a",))], "cycle"),
    ([SwitchSpec("a", switches=("a",))], "cycle"),
    ([SwitchSpec("l1", ("n1",)), SwitchSpec("l2", ("n1",))], "node 'n1' is under two leaf switches, 'l1' and 'l2'"),
    ([SwitchSpec("l1", ("n1",)), SwitchSpec("t1", switches=("l1",)), SwitchSpec("t2", switches=("l1",))],
     "switch 'l1' is under two switches"),
    ([SwitchSpec("l1", ("l1",))], "both a switch and a node"),
    ([SwitchSpec("l1")], "empty"),
])
def test_bad_trees_are_refused(specs, message):
    with pytest.raises(UsageError, match=message):
        Topology.from_switches(specs)


def test_unknown_node_names_are_reported():
    topo = Topology.flat(["a", "b"])
    topo.check_nodes(["a"])
    with pytest.raises(UsageError, match="does not know node.*zz"):
        topo.check_nodes(["a", "zz"])
    with pytest.raises(UsageError, match="unknown node"):
        topo.leaf_of("zz")


def test_disconnected_trees_join_under_a_virtual_root():
    topo = Topology.from_switches([SwitchSpec("l1", ("a", "b"), link_speed=10), SwitchSpec("l2", ("c",), link_speed=5)])
    assert topo.root == VIRTUAL_ROOT and topo.graph.nodes[VIRTUAL_ROOT]["virtual"]
    assert topo.distance("a", "c") > topo.distance("a", "b")


def test_scontrol_upper_switch_may_list_extra_direct_nodes():
    topo = Topology.from_scontrol("SwitchName=l Level=0 Nodes=a,b\nSwitchName=t Level=1 Nodes=a,b,c Switches=l")
    assert topo.leaf_of("c") == "t" and topo.leaf_of("a") == "l"
    assert topo.nodes_under("t") == ["c", "a", "b"]  # direct nodes first, then the children


def test_distances_grow_with_the_tree():
    topo = Topology.tree([2, 2, 2])
    a, same_leaf, same_spine, far = topo.nodes[0], topo.nodes[1], topo.nodes[2], topo.nodes[4]
    assert topo.distance(a, a) == 0
    assert topo.distance(a, same_leaf) < topo.distance(a, same_spine) < topo.distance(a, far) == topo.diameter
    assert [topo.hops(a, b) for b in (a, same_leaf, same_spine, far)] == [0, 2, 4, 6]
    assert topo.network_cost({a: 8}) == 0
    costs = [topo.network_cost({a: 4, b: 4}) for b in (same_leaf, same_spine, far)]
    assert 0 < costs[0] < costs[1] < costs[2] <= 1


def _brute_pairs(topo, allocation):
    gpus = [n for n, g in allocation.items() for _ in range(g)]
    return sum(topo.distance(x, y) for x, y in itertools.combinations(gpus, 2))


@settings(max_examples=60, deadline=None)
@given(fanouts=st.lists(st.integers(1, 3), min_size=1, max_size=3), data=st.data())
def test_pair_distance_matches_brute_force(fanouts, data):
    speeds = data.draw(st.lists(st.sampled_from([1, 2, 4]), min_size=len(fanouts), max_size=len(fanouts)))
    topo = Topology.tree(fanouts, link_speeds=speeds)
    chosen = data.draw(st.lists(st.sampled_from(topo.nodes), min_size=1, max_size=4, unique=True))
    allocation = {n: data.draw(st.integers(1, 3)) for n in chosen}
    assert topo.pair_distance(allocation) == pytest.approx(_brute_pairs(topo, allocation))
    assert 0 <= topo.network_cost(allocation) <= 1
    assert topo.diameter == pytest.approx(max(topo.distance(x, y) for x in topo.nodes for y in topo.nodes))
