"""How good a placement is for the network and for the jobs still to come."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from slurm_liquid.placement.base import ClusterState
from slurm_liquid.topology import Topology


@dataclass(frozen=True)
class JobQuality:
    nodes: int
    leaf_switches: tuple[str, ...]
    switches_spanned: int  # switches the job's traffic passes: 0 on one node, 1 under one leaf
    cross_switch_pairs: int  # pairs of the job's GPUs on different leaf switches
    network_cost: float  # Topology.network_cost, in [0, 1]


def job_quality(topology: Topology, nodes: Mapping[str, int]) -> JobQuality:
    used = {n: g for n, g in nodes.items() if g > 0}
    per_leaf: dict[str, int] = {}
    for node, gpus in used.items():
        leaf = topology.leaf_of(node)
        per_leaf[leaf] = per_leaf.get(leaf, 0) + gpus
    total = sum(per_leaf.values())
    cross = (total * total - sum(g * g for g in per_leaf.values())) // 2
    spanned: set[str] = set()
    if len(used) > 1:
        names = list(used)
        top = names[0]
        for other in names[1:]:
            top = topology.lowest_common_switch(top, other)
        for leaf in per_leaf:
            path = [leaf, *topology.ancestors(leaf)]
            spanned.update(path[:path.index(top) + 1])
    return JobQuality(len(used), tuple(sorted(per_leaf)), len(spanned), cross, topology.network_cost(used))


def whole_node_slots(state: ClusterState, size: int = 8) -> int:
    """How many jobs of `size` GPUs, each on one node, still fit (a fragmentation measure)."""
    return sum(node.gpus_free // size for node in state.nodes.values())


def whole_free_nodes(state: ClusterState) -> int:
    """Nodes with GPUs, all of them free."""
    return sum(1 for node in state.nodes.values() if node.gpus and node.gpus_free == node.gpus)
