"""Properties every placer keeps, over random trees, occupancies and requests (hypothesis)."""

from hypothesis import given, settings, strategies as st

from slurm_liquid.placement.base import ClusterState, NodeState, PlacementRequest
from slurm_liquid.placement.factory import PLACERS, make_placer
from slurm_liquid.placement.ga import GroupingGA
from slurm_liquid.placement.index import TreeIndex
from slurm_liquid.placement.liquid import LiquidBestFit
from slurm_liquid.topology import SwitchSpec, Topology

TOPOLOGY_AWARE = ("liquid", "slurm", "ga")


@st.composite
def trees(draw):
    """Irregular trees of one to three switch levels, some switches with both nodes and switches."""
    specs, counter = [], iter(range(10_000))

    def switch(depth):
        name = f"s{next(counter)}"
        if depth == 0 or draw(st.booleans()) and depth < 3:
            nodes = tuple(f"n{next(counter)}" for _ in range(draw(st.integers(1, 4))))
            specs.append(SwitchSpec(name, nodes, link_speed=draw(st.sampled_from([1, 2, 10]))))
        else:
            kids = tuple(switch(depth - 1) for _ in range(draw(st.integers(1, 3))))
            # now and then an upper switch with nodes of its own, as topology.conf allows
            direct = tuple(f"n{next(counter)}" for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))))
            specs.append(SwitchSpec(name, direct, kids, link_speed=draw(st.sampled_from([1, 2, 10]))))
        return name

    switch(draw(st.integers(0, 2)))
    return Topology.from_switches(specs)


@st.composite
def clusters(draw):
    topo = draw(trees())
    nodes = {}
    for name in topo.nodes:
        if draw(st.integers(0, 9)) == 0:
            continue  # a node the state does not mention (down): no GPUs
        gpus = draw(st.sampled_from([4, 8]))
        nodes[name] = NodeState(name, gpus, draw(st.integers(0, gpus)), draw(st.sampled_from([None, "a", "b"])))
    return topo, ClusterState(nodes)


@st.composite
def requests(draw, job="j"):
    per_node = draw(st.sampled_from([None, None, 1, 2, 4, 8]))
    count = draw(st.integers(1, 12))
    gpus = count * per_node if per_node else count
    return PlacementRequest(job, gpus, per_node, draw(st.sampled_from([None, None, "a"])))


def capacity(state, request):
    caps = {}
    for name, node in state.nodes.items():
        if request.gpu_type is not None and node.gpu_type != request.gpu_type:
            continue
        k = request.gpus_per_node
        cap = node.gpus_free if k is None else (k if node.gpus_free >= k else 0)
        if cap:
            caps[name] = cap
    return caps


def check_valid(topo, state, request, placement):
    caps = capacity(state, request)
    if placement.nodes is None:
        assert sum(caps.values()) < request.gpus and placement.reason
        return
    assert sum(placement.nodes.values()) == request.gpus
    assert all(g > 0 and g <= caps.get(n, 0) for n, g in placement.nodes.items())
    state.take(placement)  # raises if a node were over-committed


def lowest_fitting_level(topo, caps, need):
    levels = [topo.level(s) for s in topo.switches if sum(caps.get(n, 0) for n in topo.nodes_under(s)) >= need]
    return min(levels)


def top_of(topo, nodes):
    names = list(nodes)
    top = topo.leaf_of(names[0])
    for other in names[1:]:
        top = topo.lowest_common_switch(top, other)
    return top


@settings(deadline=None)
@given(cluster=clusters(), request=requests(), name=st.sampled_from(list(PLACERS)))
def test_every_placer_places_exactly_what_fits_without_overcommitting(cluster, request, name):
    topo, state = cluster
    kwargs = {"generations": 1, "time_budget_s": None, "population": 4, "seed": 0} if name == "ga" else {}
    placement = make_placer(name, topo, **kwargs).place(request, state)
    check_valid(topo, state, request, placement)
    caps = capacity(state, request)
    if name in TOPOLOGY_AWARE and placement.nodes is not None:
        # never wider than the lowest switch level that fits: one leaf if one leaf can hold it
        top = top_of(topo, placement.nodes)
        if len(placement.nodes) > 1 or name == "slurm":
            assert topo.level(top) == lowest_fitting_level(topo, caps, request.gpus)
        if name != "slurm" and request.gpus_per_node in (None, request.gpus) and \
                any(c >= request.gpus for c in caps.values()):
            assert len(placement.nodes) == 1  # fits in one node: goes to one node


@settings(deadline=None)
@given(cluster=clusters(), batch=st.lists(requests(), min_size=1, max_size=6),
       name=st.sampled_from(["liquid", "slurm", "first-fit", "random"]))
def test_place_all_is_placing_one_by_one(cluster, batch, name):
    topo, state = cluster
    batch = [PlacementRequest(str(i), r.gpus, r.gpus_per_node, r.gpu_type) for i, r in enumerate(batch)]
    out = make_placer(name, topo).place_all(batch, state)
    current = state
    for request, placement in zip(batch, out):
        check_valid(topo, current, request, placement)
        current = current.take(placement)
    if name != "random":  # same answers as placing each request on the state the others left
        placer, current = make_placer(name, topo), state
        for request, placement in zip(batch, out):
            assert placer.place(request, current) == placement
            current = current.take(placement)


@given(cluster=clusters(), data=st.data())
def test_array_network_cost_matches_the_graph(cluster, data):
    topo, _ = cluster
    chosen = data.draw(st.lists(st.sampled_from(topo.nodes), min_size=1, max_size=5, unique=True))
    allocation = {n: data.draw(st.integers(1, 8)) for n in chosen}
    tree = TreeIndex.of(topo)
    expected = topo.network_cost(allocation)
    assert abs(tree.network_cost(tree.allocation_of(allocation)) - expected) < 1e-9


def plan_cost(ga, state, jobs, placements):
    snap = ga.tree.snapshot(state)
    groups = [None if p.nodes is None else ga.tree.allocation_of(p.nodes) for p in placements]
    for group in groups:
        snap.take(group or {})  # raises on over-commit across the batch
    return ga.cost(ga.tree.snapshot(state), jobs, groups, snap.free)


@settings(deadline=None, max_examples=25)
@given(cluster=clusters(), jobs=st.lists(requests(), min_size=1, max_size=6), seed=st.integers(0, 3))
def test_batch_plan_is_valid_and_never_worse_than_immediate(cluster, jobs, seed):
    topo, state = cluster
    jobs = [PlacementRequest(str(i), r.gpus, r.gpus_per_node, r.gpu_type) for i, r in enumerate(jobs)]
    ga = GroupingGA(topo, seed=seed, time_budget_s=None, generations=3, population=6)
    planned = ga.place_all(jobs, state)
    immediate = LiquidBestFit(topo).place_all(jobs, state)
    assert plan_cost(ga, state, jobs, planned) <= plan_cost(ga, state, jobs, immediate)
    for request, placement in zip(jobs, planned):
        if placement.nodes is None:
            assert placement.reason
        else:
            check_valid(topo, state, request, placement)
