"""The policy interface's types, which live on the ground floor (`slurm_liquid.views`)."""

from slurm_liquid.views import (Action, Allocation, ClusterView, Decision, JobView, NodeView, Policy,
                                SpeedModel, changed)

__all__ = ["Action", "Allocation", "ClusterView", "Decision", "JobView", "NodeView", "Policy", "SpeedModel",
           "changed"]
