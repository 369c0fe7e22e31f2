"""Array view of a topology and a cluster state, so one placement costs a few numpy passes.

`TreeIndex` is built once per topology: nodes in depth-first order (each switch owns the
slice `start[s]:end[s]`), switch levels, and the uplink weights for network cost.
`Snapshot` holds per-node total and free GPUs as arrays; placers read and update it
in place while placing a list of requests, and never touch the caller's `ClusterState`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from slurm_liquid.placement.base import ClusterState, PlacementRequest
from slurm_liquid.topology import Topology

Allocation = dict[int, int]  # node position in TreeIndex.names -> GPUs taken


@dataclass
class Snapshot:
    """Per-node GPUs, total and free, aligned with `TreeIndex.names`; `free` is the working copy."""

    total: np.ndarray
    free: np.ndarray
    gpu_type: np.ndarray  # code per node, -1 for "no type given"
    type_codes: Mapping[str, int]

    def copy(self) -> "Snapshot":
        return Snapshot(self.total, self.free.copy(), self.gpu_type, self.type_codes)

    def take(self, allocation: Allocation) -> None:
        for node, gpus in allocation.items():
            if gpus > self.free[node]:
                raise ValueError(f"allocation over-commits node position {node}")
            self.free[node] -= gpus

    def give_back(self, allocation: Allocation) -> None:
        for node, gpus in allocation.items():
            self.free[node] += gpus


class TreeIndex:
    """Static arrays of one topology; get it with `TreeIndex.of(topology)` to share it."""

    _cache: "weakref.WeakKeyDictionary[Topology, TreeIndex]" = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, topology: Topology) -> "TreeIndex":
        index = cls._cache.get(topology)
        if index is None:
            index = cls._cache[topology] = cls(topology)
        return index

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.names: list[str] = list(topology.nodes)
        self.position = topology.index
        switches = topology.switches
        sw_pos = {s: i for i, s in enumerate(switches)}
        self.switch_names = switches
        self.start = np.array([topology.node_range(s)[0] for s in switches], dtype=np.int64)
        self.end = np.array([topology.node_range(s)[1] for s in switches], dtype=np.int64)
        self.level = np.array([topology.level(s) for s in switches], dtype=np.int64)
        graph = topology.graph
        self.child_switches: list[list[int]] = []
        self.direct_end: list[int] = []  # direct nodes of switch s are start[s]:direct_end[s]
        for i, s in enumerate(switches):
            kids = [sw_pos[c] for c in graph.successors(s) if graph.nodes[c]["kind"] == "switch"]
            self.child_switches.append(kids)
            n_direct = sum(1 for c in graph.successors(s) if graph.nodes[c]["kind"] == "node")
            self.direct_end.append(int(self.start[i]) + n_direct)
        self.leaf = np.array([sw_pos[topology.leaf_of(n)] for n in self.names], dtype=np.int64)
        self.node_weight = np.array([graph.edges[topology.leaf_of(n), n]["weight"] for n in self.names])
        root = sw_pos[topology.root]
        self.uplink = np.array([graph.edges[topology.parent(s), s]["weight"] if i != root else 0.0
                                for i, s in enumerate(switches)])
        # switches from each leaf up to (not including) the root: the links a GPU's traffic climbs
        self.chain: list[list[int]] = [[sw_pos[a] for a in [s] + topology.ancestors(s) if a != topology.root]
                                       for s in switches]
        self.diameter = topology.diameter
        self._last: tuple[ClusterState, Snapshot] | None = None

    # ---- state ----------------------------------------------------------------------------
    def snapshot(self, state: ClusterState) -> Snapshot:
        """Arrays for `state` (a fresh copy of `free`); nodes the state omits have no GPUs."""
        last = self._last  # one read, so a concurrent call cannot swap it between test and use
        if last is not None and last[0] is state:
            return last[1].copy()
        n = len(self.names)
        total = np.zeros(n, dtype=np.int64)
        free = np.zeros(n, dtype=np.int64)
        gpu_type = np.full(n, -1, dtype=np.int64)
        codes: dict[str, int] = {}
        position = self.position
        try:
            for name, node in state.nodes.items():
                i = position[name]
                total[i] = node.gpus
                free[i] = node.gpus_free
                if node.gpu_type is not None:
                    gpu_type[i] = codes.setdefault(node.gpu_type, len(codes))
        except KeyError:
            self.topology.check_nodes(state.nodes)  # raises, naming the unknown nodes
            raise
        snap = Snapshot(total, free, gpu_type, codes)
        self._last = (state, snap)
        return snap.copy()

    def capacity(self, snap: Snapshot, request: PlacementRequest) -> np.ndarray:
        """GPUs each node can give this request: all its free ones, or exactly gpus_per_node."""
        cap = snap.free
        if request.gpus_per_node is not None:
            cap = np.where(cap >= request.gpus_per_node, request.gpus_per_node, 0)
        if request.gpu_type is not None:
            code = snap.type_codes.get(request.gpu_type, -2)
            cap = np.where(snap.gpu_type == code, cap, 0)
        return cap

    def switch_capacity(self, cap: np.ndarray) -> np.ndarray:
        """Sum of `cap` under every switch, from one cumulative sum over the depth-first order."""
        cs = np.concatenate(([0], np.cumsum(cap)))
        return cs[self.end] - cs[self.start]

    def names_of(self, allocation: Allocation) -> dict[str, int]:
        return {self.names[i]: int(g) for i, g in sorted(allocation.items())}

    def allocation_of(self, nodes: Mapping[str, int]) -> Allocation:
        return {self.position[name]: int(g) for name, g in nodes.items() if g > 0}

    # ---- costs ----------------------------------------------------------------------------
    def pair_distance(self, allocation: Allocation) -> float:
        """Sum over the job's GPU pairs of their distance (see Topology.pair_distance)."""
        total = sum(allocation.values())
        cost = 0.0
        below: dict[int, int] = {}
        for node, gpus in allocation.items():
            cost += self.node_weight[node] * gpus * (total - gpus)
            for switch in self.chain[self.leaf[node]]:
                below[switch] = below.get(switch, 0) + gpus
        for switch, gpus in below.items():
            cost += self.uplink[switch] * gpus * (total - gpus)
        return float(cost)

    def network_cost(self, allocation: Allocation) -> float:
        """0 on one node, growing with spread; 1 if every pair crossed the diameter."""
        total = sum(allocation.values())
        if total < 2 or self.diameter == 0 or len(allocation) < 2:
            return 0.0
        return self.pair_distance(allocation) / (total * (total - 1) / 2 * self.diameter)

    @staticmethod
    def load_cost(snap: Snapshot, allocation: Allocation) -> float:
        """Share of the touched nodes' GPUs left idle after the job: 0 when it fills them."""
        # a job touches a handful of nodes: scalar reads beat numpy's fancy-indexing overhead
        size = sum(int(snap.total[n]) for n in allocation)
        if size == 0:
            return 0.0
        idle = sum(int(snap.free[n]) - g for n, g in allocation.items())
        return idle / size
