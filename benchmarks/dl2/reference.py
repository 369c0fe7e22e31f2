"""A reference point for the DL2 benchmark, not a product policy: shortest remaining time first with
the simulator's oracle (`slurm_liquid.policy.srtf.SRTF` on the oracle speed model).

With exact knowledge of every job's remaining work this is about as well as a size-based scheduler
that keeps each job's batch size can do on these workloads; it shows how much of a gap to DRF a
learned elastic policy could close. "srtf-restart-oracle" is the same rule told what a restart
costs (`slurm_liquid.policy.srtf.SRTFRestart`): the stronger reference at a 150 s penalty and under
overload, where plain SRTF restarts running jobs slot after slot. "completion-rate-oracle" hands
GPUs where they raise the sum of the jobs' completion rates most, with the same restart margins
(`slurm_liquid.policy.rate.CompletionRate`): it spreads GPUs only as far as each pays, and under
overload with jobs that scale their batch it is about 30% below DRF where both SRTF references tie
with it.
"""

from __future__ import annotations

from slurm_liquid.policy.rate import CompletionRate
from slurm_liquid.policy.srtf import SRTF, SRTFRestart


class OracleSRTF(SRTF):
    name = "srtf-oracle"


class OracleSRTFRestart(SRTFRestart):
    name = "srtf-restart-oracle"


class OracleCompletionRate(CompletionRate):
    name = "completion-rate-oracle"


REFERENCES = {"srtf-oracle": OracleSRTF, "srtf-restart-oracle": OracleSRTFRestart,
              "completion-rate-oracle": OracleCompletionRate}  # each built on the oracle speed model
