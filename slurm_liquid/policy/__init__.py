"""Scheduling policies behind one interface (`base.Policy`), for the simulator and the daemon."""

from __future__ import annotations

from slurm_liquid.errors import UsageError
from slurm_liquid.policy.base import Action, ClusterView, Decision, JobView, NodeView, Policy, SpeedModel

POLICY_NAMES = ("fifo", "drf", "tiresias", "optimus")
LEARNED_POLICY_NAMES = ("dl2",)  # need a trained policy file; not part of "all"


def make_policy(name: str, speed: SpeedModel | None = None, policy_file: str | None = None) -> Policy:
    """A fresh policy by name; Optimus needs a `speed` model; DL2 reads `policy_file` (default: shipped)."""
    name = name.strip().lower()
    if name == "dl2":
        from slurm_liquid.policy.dl2 import make_dl2
        return make_dl2(policy_file, speed)
    if name == "fifo":
        from slurm_liquid.policy.fifo import FifoBackfill
        return FifoBackfill()
    if name == "drf":
        from slurm_liquid.policy.drf import DRF
        return DRF()
    if name == "tiresias":
        from slurm_liquid.policy.tiresias import Tiresias
        return Tiresias()
    if name == "optimus":
        if speed is None:
            raise UsageError("policy optimus needs a speed model")
        from slurm_liquid.policy.optimus import Optimus
        return Optimus(speed)
    if name in ("srtf", "srtf-restart"):  # DL2's warm-up teachers
        if speed is None:
            raise UsageError(f"policy {name} needs a speed model")
        from slurm_liquid.policy.srtf import SRTF, SRTFRestart
        return SRTF(speed) if name == "srtf" else SRTFRestart(speed)
    if name == "completion-rate":  # DL2's warm-up teacher (`policy.rate`)
        if speed is None:
            raise UsageError(f"policy {name} needs a speed model")
        from slurm_liquid.policy.rate import CompletionRate
        return CompletionRate(speed)
    raise UsageError(f"unknown policy {name!r} (known: {', '.join(POLICY_NAMES + LEARNED_POLICY_NAMES)})")


__all__ = ["Action", "ClusterView", "Decision", "JobView", "NodeView", "Policy", "SpeedModel", "POLICY_NAMES", "LEARNED_POLICY_NAMES", "make_policy"]
