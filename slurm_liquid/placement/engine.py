"""The part of `Placer` every strategy shares: arrays in, names out, requests in order."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from slurm_liquid.placement.base import ClusterState, Placement, PlacementRequest
from slurm_liquid.placement.index import Allocation, Snapshot, TreeIndex
from slurm_liquid.topology import Topology


def no_room_reason(snap: Snapshot, cap: np.ndarray, request: PlacementRequest) -> str | None:
    """Why `request` cannot fit anywhere now, or None if its GPUs exist somewhere."""
    typed = f" of type {request.gpu_type}" if request.gpu_type else ""
    if request.gpu_type is not None and request.gpu_type not in snap.type_codes:
        return f"no node has GPUs of type {request.gpu_type}"
    k = request.gpus_per_node
    if k is not None:
        have = int(np.count_nonzero(cap))
        if have * k < request.gpus:
            return f"needs {request.gpus // k} nodes with {k} free GPUs{typed} each; {have} such nodes now"
        return None
    free = int(cap.sum())
    if free < request.gpus:
        return f"needs {request.gpus} GPUs{typed}; {free} free in the cluster"
    return None


class IndexedPlacer:
    """Base of the placers here: subclasses choose an allocation in `select`."""

    name = "placer"

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.tree = TreeIndex.of(topology)

    def select(self, snap: Snapshot, cap: np.ndarray, request: PlacementRequest) -> Allocation:
        """GPUs per node position for `request`; only called when `cap` holds enough GPUs."""
        raise NotImplementedError

    def place(self, request: PlacementRequest, state: ClusterState) -> Placement:
        return self.place_on(self.tree.snapshot(state), request)

    def place_all(self, requests: Sequence[PlacementRequest], state: ClusterState) -> list[Placement]:
        snap = self.tree.snapshot(state)
        return [self.place_on(snap, request) for request in requests]

    def place_on(self, snap: Snapshot, request: PlacementRequest) -> Placement:
        """Place one request on `snap` and take its GPUs there (the array-level entry point)."""
        allocation = self.allocate(snap, request)
        if isinstance(allocation, str):
            return Placement(request.job, None, allocation)
        snap.take(allocation)
        return Placement(request.job, self.tree.names_of(allocation))

    def allocate(self, snap: Snapshot, request: PlacementRequest) -> Allocation | str:
        """The allocation for `request` on `snap` (not taken), or the reason it does not fit."""
        cap = self.tree.capacity(snap, request)
        reason = no_room_reason(snap, cap, request)
        return reason if reason is not None else self.select(snap, cap, request)
