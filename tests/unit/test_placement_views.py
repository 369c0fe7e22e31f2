"""JobViews (placement/slurm_rules.py) against the node-by-node filter it replaces, over random clusters.

The oracle below is the filter as it was written before the pass grouped jobs by what they ask:
every node, every job. Each view JobViews hands out must be that view (nodes, capped free GPUs,
reason, unreadable), the arrays it gives the placer must be what TreeIndex.snapshot makes of that
view, and so for the shard choice and the one-leaf test the daemon makes from it, also after the
pass has taken GPUs (update).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import given, settings, strategies as st

from slurm_liquid.placement.base import ClusterState, NodeState
from slurm_liquid.placement.index import TreeIndex
from slurm_liquid.placement.slurm_rules import JobView, JobViews, constraint_matches, job_view, per_gpu
from slurm_liquid.slurm import Job, Node
from slurm_liquid.topology import SwitchSpec, Topology

FEATURES = ("a", "b", "ib")
CONSTRAINTS = ("", "a", "a&b", "a|b", "ib&a|b", "a|", "[a|b]", "a*2", "!a", "zz")


def oracle_view(job, nodes, state: ClusterState) -> JobView:
    partitions = {p for p in (job.partition or "").split(",") if p}
    constraint = job.features or ""
    cpus_per_gpu, mem_per_gpu = per_gpu(job)
    seen: dict[str, int] = {}
    usable = {}
    for name, free in state.nodes.items():
        node = nodes.get(name)
        if node is None:
            continue
        if not node.available:
            seen["down"] = seen.get("down", 0) + 1
            continue
        if partitions and node.partitions and not partitions & set(node.partitions):
            seen["partition"] = seen.get("partition", 0) + 1
            continue
        if job.gpu_type and node.gpu_type and job.gpu_type != node.gpu_type:
            seen["gpu type"] = seen.get("gpu type", 0) + 1
            continue
        matches = constraint_matches(constraint, node.features)
        if matches is None:
            return JobView(ClusterState({}), f"constraint {constraint[:60]!r} is not one the daemon reads", True)
        if not matches:
            seen["features"] = seen.get("features", 0) + 1
            continue
        cap = free.gpus_free
        if cpus_per_gpu and free.cpus_free is not None:
            cap = min(cap, math.floor(free.cpus_free / cpus_per_gpu + 1e-9))
        if mem_per_gpu and free.mem_free_mib is not None:
            cap = min(cap, math.floor(free.mem_free_mib / mem_per_gpu + 1e-9))
        usable[name] = replace(free, gpus_free=max(cap, 0))
    view = ClusterState(usable)
    if usable:
        return JobView(view)
    why = ", ".join(f"{count} by {what}" for what, count in sorted(seen.items())) or "none"
    return JobView(view, f"no node can take it (ruled out: {why})")


def oracle_shard_node(shards: int, nodes, state: ClusterState) -> str | None:
    best = None
    for name, node in nodes.items():
        free = state.nodes.get(name)
        if not node.available or node.shards - node.shards_alloc < shards or free is None:
            continue
        shares = node.shards_alloc > 0
        if not shares and free.gpus_free == 0:
            continue
        key = (not shares, free.gpus_free, name)
        if best is None or key < best[0]:
            best = (key, name)
    return best[1] if best else None


def oracle_fits_one_leaf(topology: Topology, gpus: int, per_node: int | None, gpu_type: str | None,
                         state: ClusterState) -> bool:
    for switch in topology.switches:
        under = [state.nodes[n] for n in topology.nodes_under(switch)
                 if n in state.nodes and topology.leaf_of(n) == switch]
        if gpu_type:
            under = [n for n in under if n.gpu_type == gpu_type]
        if per_node:
            if sum(n.gpus >= per_node for n in under) * per_node >= gpus:
                return True
        elif sum(n.gpus for n in under) >= gpus:
            return True
    return False


@st.composite
def scenes(draw):
    count = draw(st.integers(1, 12))
    names = [f"n{i:02d}" for i in range(count)]
    leaves = draw(st.integers(1, 3))
    specs = [SwitchSpec(f"leaf{k}", tuple(names[k::leaves])) for k in range(leaves) if names[k::leaves]]
    if len(specs) > 1:
        specs.append(SwitchSpec("spine", (), tuple(s.name for s in specs)))
    topology = Topology.from_switches(specs)
    nodes, state = {}, {}
    extra = draw(st.booleans())        # a node Slurm knows and the topology does not
    for name in [*names, *(["stray"] if extra else [])]:
        gpus = draw(st.sampled_from([0, 1, 4, 8]))
        shards = gpus * draw(st.sampled_from([0, 4]))
        node = Node(name, draw(st.sampled_from(["IDLE", "MIXED", "DOWN", "IDLE"])),
                    state_flags=draw(st.sampled_from([(), (), ("DRAIN",)])),
                    partitions=tuple(draw(st.sets(st.sampled_from(["gpu", "big", "debug"]), max_size=2))),
                    cpus=draw(st.sampled_from([0, 8, 64])), mem_mib=draw(st.sampled_from([0, 16000, 512000])),
                    gpus=gpus, gpus_alloc=draw(st.integers(0, gpus)), gpu_type=draw(st.sampled_from([None, "h100", "a100"])),
                    shards=shards, shards_alloc=draw(st.integers(0, shards)),
                    features=tuple(draw(st.sets(st.sampled_from(FEATURES), max_size=3))))
        nodes[name] = node
        state[name] = NodeState(name, gpus, draw(st.integers(0, gpus)), node.gpu_type,
                                node.cpus, draw(st.one_of(st.none(), st.integers(0, 64))),
                                node.mem_mib, draw(st.one_of(st.none(), st.integers(0, 600000))))
    if draw(st.booleans()):            # a node in the state that Slurm did not list
        state["ghost"] = NodeState("ghost", 4, 4)
    jobs = []
    for k in range(draw(st.integers(1, 6))):
        gpus = draw(st.integers(0, 16))
        jobs.append(Job(k, f"j{k}", "u", draw(st.sampled_from(["PENDING", "RUNNING"])),
                        partition=draw(st.sampled_from(["", "gpu", "big,gpu", "other"])),
                        gpus=gpus, gpus_per_node=draw(st.sampled_from([None, 1, 2, 4])),
                        num_nodes=draw(st.integers(0, 3)), cpus=draw(st.sampled_from([0, 1, 7, 32])),
                        mem_mib=draw(st.sampled_from([None, 0, 1000, 64000])), shards=draw(st.sampled_from([0, 0, 2, 8])),
                        gpu_type=draw(st.sampled_from([None, "h100", "a100"])), features=draw(st.sampled_from(CONSTRAINTS)),
                        nodes=tuple(draw(st.sets(st.sampled_from(names), max_size=2)))))
    taken = draw(st.lists(st.tuples(st.sampled_from(names), st.integers(0, 8)), max_size=4))
    return topology, nodes, ClusterState(state), jobs, taken


def check(views: JobViews, topology: Topology, nodes, state: ClusterState, job, returned=None) -> None:
    base = state
    if returned:
        base = ClusterState({name: replace(n, gpus_free=min(n.gpus, n.gpus_free + returned[name]))
                             if name in returned else n for name, n in state.nodes.items()})
    want = oracle_view(job, nodes, base)
    got = views.view(job, returned)
    assert (got.state, got.reason, got.unreadable) == (want.state, want.reason, want.unreadable)
    assert got.usable == bool(want.state.nodes)
    for name in nodes:
        expected = want.state.nodes[name].gpus_free if name in want.state.nodes else None
        assert got.free_of(name) == expected
    if job.shards:
        assert got.shard_node(job.shards) == oracle_shard_node(job.shards, nodes, want.state)
    if not got.usable:
        return
    tree = TreeIndex.of(topology)
    if any(name not in topology for name in want.state.nodes):
        try:
            got.snapshot()
        except Exception as exc:   # as TreeIndex.snapshot of that view: the unknown node is named
            assert "stray" in str(exc) or "ghost" in str(exc)
        else:
            raise AssertionError("a view with a node outside the topology gave the placer arrays")
        return
    snap, ref = got.snapshot(), tree.snapshot(want.state)
    assert np.array_equal(snap.total, ref.total) and np.array_equal(snap.free, ref.free)
    assert np.array_equal(snap.gpu_type, ref.gpu_type) and dict(snap.type_codes) == dict(ref.type_codes)
    for gpus in (1, 3, 8, 17):
        for per_node in (None, 1, 4):
            leaf = (got.leaf_capacity(job.gpu_type, per_node) >= gpus).any()
            assert leaf == oracle_fits_one_leaf(topology, gpus, per_node, job.gpu_type, want.state)


@settings(max_examples=300, deadline=None)
@given(scenes())
def test_every_view_is_the_node_by_node_view(scene) -> None:
    topology, nodes, state, jobs, taken = scene
    views = JobViews(nodes, state, TreeIndex.of(topology))
    for job in jobs:
        check(views, topology, nodes, state, job)
        if job.nodes:     # a running job judged as if its own GPUs were free (shadow mode)
            check(views, topology, nodes, state, job, dict.fromkeys(job.nodes, max(job.gpus // len(job.nodes), 1)))
    # the pass takes GPUs (and CPUs and memory) on some nodes: the views follow
    current = dict(state.nodes)
    for name, gpus in taken:
        node = current[name]
        current[name] = replace(node, gpus_free=max(node.gpus_free - gpus, 0),
                                cpus_free=None if node.cpus_free is None else max(node.cpus_free - 2 * gpus, 0))
    later = ClusterState(current)
    views.update(later, {name for name, _ in taken})
    for job in jobs:
        check(views, topology, nodes, later, job)
        assert job_view(job, nodes, later) == oracle_view(job, nodes, later)
