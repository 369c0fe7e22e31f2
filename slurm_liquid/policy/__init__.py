"""Scheduling policies behind one interface (`views.Policy`), for the simulator and the daemon; every
name is in `policy.registry`."""

from __future__ import annotations

from slurm_liquid.policy.registry import (ELASTIC_POLICIES, LEARNED_POLICY_NAMES, POLICY_NAMES, TEACHERS,
                                          make_policy)
from slurm_liquid.views import Action, ClusterView, Decision, JobView, NodeView, Policy, SpeedModel

__all__ = ["Action", "ClusterView", "Decision", "JobView", "NodeView", "Policy", "SpeedModel", "POLICY_NAMES",
           "LEARNED_POLICY_NAMES", "ELASTIC_POLICIES", "TEACHERS", "make_policy"]
