"""Placement room: which nodes (and how many GPUs on each) a job gets."""

from slurm_liquid.placement.base import ClusterState, NodeState, Placement, PlacementRequest, Placer

__all__ = ["ClusterState", "NodeState", "Placement", "PlacementRequest", "Placer"]
