"""The Pollux artifact's placement rule: fill the node with the most free GPUs first.

Repeatedly pick the node with the most free GPUs (ties: the earliest node in the
state's order) and take as many as still needed there. It consolidates a job when one
node can hold it and fragments it otherwise. The simulator uses it to reproduce the
artifact's published numbers; it knows nothing about switches.
"""

from __future__ import annotations

from typing import Sequence

from slurm_liquid.placement.base import ClusterState, Placement, PlacementRequest


class MostFreeGreedy:
    """A `Placer`: the artifact's greedy most-free-node rule."""

    name = "greedy"

    def place(self, request: PlacementRequest, state: ClusterState) -> Placement:
        per_node = request.gpus_per_node
        free = [(name, node.gpus_free) for name, node in state.nodes.items()
                if node.gpus_free > 0 and (request.gpu_type is None or node.gpu_type == request.gpu_type)]
        if per_node is not None:
            free = [(name, per_node) for name, f in free if f >= per_node]
        if sum(f for _, f in free) < request.gpus:
            return Placement(request.job, None, f"needs {request.gpus} GPUs, {sum(f for _, f in free)} free")
        taken: dict[str, int] = {}
        need = request.gpus
        left = dict(free)
        while need > 0:
            # max() returns the first maximum, so ties go to the earliest node.
            name = max(left, key=left.__getitem__)
            take = min(left[name], need)
            taken[name] = take
            need -= take
            del left[name]
        return Placement(request.job, taken)

    def place_all(self, requests: Sequence[PlacementRequest], state: ClusterState) -> list[Placement]:
        out = []
        for request in requests:
            placement = self.place(request, state)
            state = state.take(placement)
            out.append(placement)
        return out
