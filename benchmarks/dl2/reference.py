"""A reference point for the DL2 benchmark, not a product policy: shortest remaining time first with
the simulator's oracle (`slurm_liquid.policy.srtf.SRTF` on the oracle speed model).

With exact knowledge of every job's remaining work this is about as well as a size-based scheduler
that keeps each job's batch size can do on these workloads; it shows how much of a gap to DRF a
learned elastic policy could close.
"""

from __future__ import annotations

from slurm_liquid.policy.srtf import SRTF


class OracleSRTF(SRTF):
    name = "srtf-oracle"
