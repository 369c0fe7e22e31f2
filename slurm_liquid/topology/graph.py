"""The switch tree as a networkx graph, with the distances that placement scores by.

Edges point from a switch to what it connects (a lower switch or a compute node) and carry
the switch's `link_speed` and a `weight` = fastest link speed / this link speed, so one hop
on the fastest links costs 1 and slower links cost more. Compute nodes are listed in
depth-first order, which makes every switch's nodes one contiguous slice of `nodes`: the
placement index sums free GPUs per switch with one cumulative sum.
"""

from __future__ import annotations

import itertools
import math
import re
from functools import cached_property
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import networkx as nx

from slurm_liquid.errors import UsageError
from slurm_liquid.files import read_text
from slurm_liquid.topology.parse import SwitchSpec, parse_switch_lines

VIRTUAL_ROOT = "(root)"  # joins disconnected trees; parentheses keep it apart from host names
FLAT_SWITCH = "(flat)"


class Topology:
    """A tree of switches over compute nodes (build it with one of the `from_*` constructors)."""

    def __init__(self, graph: nx.DiGraph, root: str) -> None:
        self.graph = graph
        self.root = root
        self.nodes: list[str] = []
        self.switches: list[str] = []
        self._range: dict[str, tuple[int, int]] = {}
        self._walk(root)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.nodes)}
        self._parent: dict[str, str] = {child: parent for parent, child in graph.edges}
        self._level = self._levels()
        self._depth = self._depths()

    # ---- constructors -------------------------------------------------------------------
    @classmethod
    def flat(cls, node_names: Iterable[str]) -> "Topology":
        """One switch over every node: the cluster without a topology file."""
        names = list(node_names)
        if not names:
            raise UsageError("topology: a flat topology needs at least one node")
        return cls.from_switches([SwitchSpec(FLAT_SWITCH, tuple(names))])

    @classmethod
    def tree(cls, fanouts: Sequence[int], node_prefix: str = "node", link_speeds: Sequence[float] | None = None) -> "Topology":
        """A regular tree: `fanouts` are children per switch from the top, the last one nodes per leaf.

        `Topology.tree([8, 16, 32])` is 8 spines x 16 leaves x 32 nodes = 4,096 nodes under one
        root. `link_speeds` (one per switch level, top first) default to 1.
        """
        if not fanouts or any(f < 1 for f in fanouts):
            raise UsageError(f"topology: fanouts must be positive, got {list(fanouts)}")
        speeds = list(link_speeds) if link_speeds is not None else [1.0] * len(fanouts)
        if len(speeds) != len(fanouts):
            raise UsageError("topology: give one link speed per switch level")
        width = len(str(math.prod(fanouts) - 1))
        specs: list[SwitchSpec] = []
        counter = itertools.count()

        def build(depth: int, name: str) -> None:
            if depth == len(fanouts) - 1:
                nodes = tuple(f"{node_prefix}{next(counter):0{width}d}" for _ in range(fanouts[depth]))
                specs.append(SwitchSpec(name, nodes, link_speed=speeds[depth]))
                return
            kids = tuple(f"{name}.{i}" for i in range(fanouts[depth]))
            specs.append(SwitchSpec(name, switches=kids, link_speed=speeds[depth]))
            for kid in kids:
                build(depth + 1, kid)

        build(0, "s")
        return cls.from_switches(specs)

    @classmethod
    def from_topology_conf(cls, text: str) -> "Topology":
        """From the text of a Slurm topology.conf (comments and blank lines allowed)."""
        return cls.from_switches(parse_switch_lines(text, strict=True))

    @classmethod
    def from_scontrol(cls, text: str) -> "Topology":
        """From `scontrol show topology` output (upper switches also list their nodes there)."""
        return cls.from_switches(parse_switch_lines(text, strict=False))

    @classmethod
    def from_file(cls, path: str | Path) -> "Topology":
        """From a topology.conf, or a saved `scontrol show topology` (recognised by Level=)."""
        text = read_text(path, "topology")
        scontrol = re.search(r"(?im)^\s*SwitchName=\S+\s+Level=", text) is not None
        try:
            return cls.from_scontrol(text) if scontrol else cls.from_topology_conf(text)
        except UsageError as exc:  # name the file: the message names the line
            raise UsageError(f"{path}: {exc}") from None

    @classmethod
    def from_switches(cls, switch_specs: Iterable[SwitchSpec]) -> "Topology":
        """Check the specs form a tree and build it; UsageError names the first problem."""
        specs = {s.name: s for s in switch_specs}
        if not specs:
            raise UsageError("topology: no switches")
        graph = nx.DiGraph()
        for spec in specs.values():
            if not spec.nodes and not spec.switches:
                raise UsageError(f"topology: switch {spec.name!r} is empty (no nodes and no switches)")
            graph.add_node(spec.name, kind="switch", link_speed=float(spec.link_speed))
        for spec in specs.values():
            for child in spec.switches:
                if child not in specs:
                    raise UsageError(f"topology: switch {spec.name!r} lists unknown switch {child!r}")
                if graph.in_degree(child):
                    other = next(iter(graph.predecessors(child)))
                    raise UsageError(f"topology: switch {child!r} is under two switches, {other!r} and {spec.name!r}")
                graph.add_edge(spec.name, child)
        try:
            cycle = nx.find_cycle(graph)
        except nx.NetworkXNoCycle:
            pass
        else:
            raise UsageError("topology: switches form a cycle: " + " -> ".join(edge[0] for edge in cycle))
        _attach_nodes(graph, specs)
        roots = [s for s in specs if graph.in_degree(s) == 0]
        root = roots[0]
        if len(roots) > 1:
            # Slurm keeps disconnected trees apart; we join them above everything, at the slowest speed.
            slowest = min(graph.nodes[s]["link_speed"] for s in specs)
            graph.add_node(VIRTUAL_ROOT, kind="switch", link_speed=slowest, virtual=True)
            graph.add_edges_from((VIRTUAL_ROOT, r) for r in roots)
            root = VIRTUAL_ROOT
        fastest = max(data["link_speed"] for _, data in graph.nodes(data=True) if data["kind"] == "switch")
        for parent, child in graph.edges:
            speed = graph.nodes[parent]["link_speed"]
            graph.edges[parent, child].update(link_speed=speed, weight=fastest / speed)
        return cls(graph, root)

    # ---- structure ----------------------------------------------------------------------
    def _walk(self, root: str) -> None:
        """Depth-first: each switch's direct nodes, then its child switches, in written order."""
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            name, done = stack.pop()
            if done:
                self._range[name] = (self._range[name][0], len(self.nodes))
                continue
            self.switches.append(name)
            self._range[name] = (len(self.nodes), -1)
            children = list(self.graph.successors(name))
            self.nodes.extend(c for c in children if self.graph.nodes[c]["kind"] == "node")
            stack.append((name, True))
            stack.extend((c, False) for c in reversed(children) if self.graph.nodes[c]["kind"] == "switch")

    def _levels(self) -> dict[str, int]:
        """Slurm's Level: 0 for switches without lower switches, else one above the highest child."""
        level: dict[str, int] = {}
        for name in reversed(self.switches):  # children come after their parent in preorder
            below = [level[c] for c in self.graph.successors(name) if c in level]
            level[name] = 1 + max(below) if below else 0
        return level

    def _depths(self) -> dict[str, float]:
        """Weighted distance from the root to every switch and node."""
        depth = {self.root: 0.0}
        for parent, child in nx.bfs_edges(self.graph, self.root):
            depth[child] = depth[parent] + self.graph.edges[parent, child]["weight"]
        return depth

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, node: object) -> bool:
        return node in self.index

    def __repr__(self) -> str:
        return f"Topology({len(self.nodes)} nodes, {len(self.switches)} switches, levels={self.level(self.root) + 1})"

    def is_switch(self, name: str) -> bool:
        return self.graph.nodes[name]["kind"] == "switch" if name in self.graph else False

    def parent(self, name: str) -> str | None:
        return self._parent.get(name)

    def children(self, switch: str) -> list[str]:
        return list(self.graph.successors(switch))

    def leaf_of(self, node: str) -> str:
        """The switch a compute node hangs from."""
        if node not in self.index:
            raise UsageError(f"topology: unknown node {node!r}")
        return self._parent[node]

    def level(self, switch: str) -> int:
        return self._level[switch]

    def ancestors(self, name: str) -> list[str]:
        """Switches above `name`, nearest first, up to the root."""
        out, current = [], self._parent.get(name)
        while current is not None:
            out.append(current)
            current = self._parent.get(current)
        return out

    def node_range(self, switch: str) -> tuple[int, int]:
        """The slice of `nodes` under `switch`."""
        return self._range[switch]

    def nodes_under(self, switch: str) -> list[str]:
        start, end = self._range[switch]
        return self.nodes[start:end]

    def check_nodes(self, names: Iterable[str]) -> None:
        """Raise UsageError naming node names the topology does not know."""
        unknown = [n for n in names if n not in self.index]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise UsageError(f"topology does not know node(s) {shown}")

    # ---- distances ----------------------------------------------------------------------
    def depth(self, name: str) -> float:
        return self._depth[name]

    def lowest_common_switch(self, a: str, b: str) -> str:
        above_a = set(self.ancestors(a)) | {a}
        current: str | None = b
        while current not in above_a:
            current = self._parent[current]  # type: ignore[index]
        return current  # type: ignore[return-value]

    def distance(self, a: str, b: str) -> float:
        """Weighted path length between two nodes (0 for the same node)."""
        if a == b:
            return 0.0
        return self._depth[a] + self._depth[b] - 2 * self._depth[self.lowest_common_switch(a, b)]

    def hops(self, a: str, b: str) -> int:
        """Links on the path between two nodes."""
        return 0 if a == b else nx.shortest_path_length(self.graph.to_undirected(as_view=True), a, b)

    @cached_property
    def diameter(self) -> float:
        """The largest distance between two compute nodes."""
        down: dict[str, float] = {}
        best = 0.0
        for name in reversed(self.switches):
            reach = sorted((self.graph.edges[name, c]["weight"] + down.get(c, 0.0) for c in self.graph.successors(name)),
                           reverse=True)
            down[name] = reach[0]
            if len(reach) > 1:
                best = max(best, reach[0] + reach[1])
        return best

    def pair_distance(self, allocation: Mapping[str, int]) -> float:
        """Sum over pairs of the job's GPUs of the distance between their nodes.

        Each link is crossed by (GPUs below it) x (GPUs above it) pairs, so one walk up the
        tree per node is enough, whatever the number of GPUs.
        """
        total = sum(allocation.values())
        below: dict[str, int] = {}
        for node, gpus in allocation.items():
            if gpus <= 0:
                continue
            below[node] = below.get(node, 0) + gpus
            for switch in self.ancestors(node):
                below[switch] = below.get(switch, 0) + gpus
        return sum(self.graph.edges[self._parent[n], n]["weight"] * b * (total - b)
                   for n, b in below.items() if n != self.root)

    def network_cost(self, allocation: Mapping[str, int]) -> float:
        """Mean distance between the job's GPU pairs over the diameter: 0 on one node, 1 at worst."""
        total = sum(allocation.values())
        if total < 2 or self.diameter == 0:
            return 0.0
        return self.pair_distance(allocation) / (total * (total - 1) / 2 * self.diameter)


def _attach_nodes(graph: nx.DiGraph, specs: Mapping[str, SwitchSpec]) -> None:
    """Hang each node from the lowest switch that lists it.

    `scontrol show topology` lists on an upper switch all the nodes below it; a node is
    attached directly to a switch only if no switch below lists it.
    """
    below: dict[str, set[str]] = {}
    owner: dict[str, str] = {}
    for name in reversed(list(nx.topological_sort(graph))):  # lower switches first
        under = set().union(*(below[c] for c in graph.successors(name)))
        for node in specs[name].nodes:
            if node in specs:
                raise UsageError(f"topology: {node!r} is both a switch and a node")
            if node in under or owner.get(node) == name:
                continue
            if node in owner:
                first, second = sorted((owner[node], name))
                raise UsageError(f"topology: node {node!r} is under two leaf switches, {first!r} and {second!r}")
            owner[node] = name
        below[name] = under | set(specs[name].nodes)
    for node, switch in owner.items():
        graph.add_node(node, kind="node")
    # edges in the order each switch wrote its nodes, so node order follows the file
    for name, spec in specs.items():
        graph.add_edges_from((name, n) for n in spec.nodes if owner.get(n) == name)
