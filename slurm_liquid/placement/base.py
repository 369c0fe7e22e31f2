"""The placement interface shared by the command line, the simulator and the daemon.

A placer sees a request and the free resources, and answers with GPUs per node or
with the reason it cannot. It never changes the state it is given: the caller
applies a placement with `ClusterState.take`, so that the simulator and the live
daemon keep their own books.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Protocol, Sequence


@dataclass(frozen=True)
class NodeState:
    """One node's GPUs (and optionally CPUs and memory), total and free."""

    name: str
    gpus: int
    gpus_free: int
    gpu_type: str | None = None
    cpus: int | None = None
    cpus_free: int | None = None
    mem_mib: int | None = None
    mem_free_mib: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.gpus_free <= self.gpus:
            raise ValueError(f"node {self.name}: gpus_free={self.gpus_free} must lie in [0, gpus={self.gpus}]")


@dataclass(frozen=True)
class PlacementRequest:
    """What a job asks of placement: a GPU count, optionally a fixed count per node."""

    job: str
    gpus: int
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    prefer: frozenset[str] = frozenset()   # nodes that hold the job's data (staging): a tie-breaker only

    def __post_init__(self) -> None:
        if self.gpus <= 0:
            raise ValueError(f"job {self.job}: gpus must be positive, got {self.gpus}")
        if self.gpus_per_node is not None and (self.gpus_per_node <= 0 or self.gpus % self.gpus_per_node):
            raise ValueError(f"job {self.job}: gpus={self.gpus} is not a multiple of gpus_per_node={self.gpus_per_node}")


@dataclass(frozen=True)
class Placement:
    """The answer: GPUs taken per node, or None with the reason it does not fit now."""

    job: str
    nodes: Mapping[str, int] | None
    reason: str | None = None

    @property
    def placed(self) -> bool:
        return self.nodes is not None


@dataclass(frozen=True)
class ClusterState:
    """Free resources of the whole cluster, keyed by node name."""

    nodes: Mapping[str, NodeState] = field(default_factory=dict)

    @property
    def gpus_free(self) -> int:
        return sum(n.gpus_free for n in self.nodes.values())

    @classmethod
    def from_nodes(cls, nodes: Iterable[Any]) -> "ClusterState":
        """The state of live nodes, as the Slurm client reports them (`slurm_liquid.slurm.Node`).

        A node that is down, drained or failing offers no free GPUs.
        """
        out = {}
        for n in nodes:
            up = n.available   # a property: read once per node (the daemon's slot builds this per resize)
            out[n.name] = NodeState(n.name, n.gpus, n.gpus_free, n.gpu_type,
                                    n.cpus, max(n.cpus - n.cpus_alloc, 0) if up else 0,
                                    n.mem_mib, max(n.mem_mib - n.mem_alloc_mib, 0) if up else 0)
        return cls(out)

    def take(self, placement: Placement) -> "ClusterState":
        """The state after `placement` took its GPUs; raises if it would over-commit a node."""
        if placement.nodes is None:
            return self
        nodes = dict(self.nodes)
        for name, gpus in placement.nodes.items():
            node = nodes[name]
            if gpus > node.gpus_free:
                raise ValueError(f"placement of {placement.job} takes {gpus} GPUs on {name}, which has {node.gpus_free} free")
            nodes[name] = replace(node, gpus_free=node.gpus_free - gpus)
        return ClusterState(nodes)


class Placer(Protocol):
    """What every placement strategy offers (first-fit, Liquid best-fit, grouping GA, ...)."""

    def place(self, request: PlacementRequest, state: ClusterState) -> Placement:
        """Place one job on the free resources of `state`."""
        ...

    def place_all(self, requests: Sequence[PlacementRequest], state: ClusterState) -> list[Placement]:
        """Place jobs in order, each seeing the GPUs taken by the previous ones."""
        ...
