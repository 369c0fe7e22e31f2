"""A replica of the DL2 paper's own simulated setting (pengyanghua/DL2), as simulator workloads.

`slurm-liquid simulate --workload dl2-paper-small|dl2-paper-large [--seed N]` runs here instead of
the Pollux engine, because the job model is another one: parameter-server (PS) / worker jobs whose
throughput depends on both counts, not all-reduce jobs on measured placements. The world itself
(jobs, speed table, trace generator, slots and placement) is `slurm_liquid.psworld`, below both
this module and DL2's PS/worker policy. What is replicated (facts read from the public artifact,
which has no licence: its numbers and rules, not its code):

- **Jobs**: the paper's 8 job types. A worker needs [2 CPU slots, 4 GPU slots] (cnn-text-
  classification and dssm workers: no GPU), a PS [2 CPU, 0 GPU]; each node has 8 CPU and 8 GPU slots.
  A job of type t has `EPOCH_FRACTION[t] x max_epochs` epochs; in a slot of 1200 s it makes
  speed(PS, workers) x 1200 / `EPOCH_SIZE[t]` of them, where speed is a linear radial-basis
  interpolation (scipy `Rbf`, as the artifact's `speed.py`) of the measured (PS, workers) ->
  samples/s table in `slurm_liquid/psworld/data/speed.csv` (see its README).
- **Time**: 20-minute slots; every slot rebuilds every allocation from nothing, and a change costs
  nothing. A job that finishes inside a slot is charged the fraction of the slot it needed; its JCT
  is (that end - arrival slot) in slots, times 1200 s (the artifact's FINE_GRAIN_JCT).
- **Arrivals**: the artifact's `Google_Trace` pattern (jobs per slot, capped at the setting's
  maximum, read from a random offset in 0-4); the default `Ali_Trace` is empty in the public artifact.
  Job types uniform at random; lengths fixed per type (the artifact's FIX_JOB_LEN).
- **Settings**: small (48 nodes, 60 jobs, at most 3 arrivals per slot, at most 32 workers/PS per job,
  80000 epochs at most, as `params_template.py`) and large (500 nodes, 200 jobs, 10 arrivals,
  16 workers, 30000 epochs, `parameters.py`).
- **Placement**, the same for every policy of a run (`slurm_liquid.psworld.slot`): `artifact`, each
  task on the least-used node as it is decided, a refused task ending the policy's slot (the
  artifact's rule for all its policies), or `cpu-first` (the default here), tasks counted against
  the cluster's totals and placed at the end of the slot in an order that places them in full.

Policies (`paper_policies`): `drf` (the artifact's: one worker + one PS at a time, by dominant share,
up to the worker cap), `optimus` (the artifact's: a worker and a PS first, then the task with the
largest cut in remaining time), `drf-best-split` (a reference: DRF's task counts, split between PS
and workers as the speed table says is fastest), `hull` (a reference and DL2's teacher: a worker and a
PS each, then the tasks that add the most throughput) and `dl2` (`slurm_liquid.policy.dl2.psworker`).
"""

from __future__ import annotations

from typing import Sequence

from slurm_liquid.errors import UsageError
from slurm_liquid.psworld.run import TraceRun
from slurm_liquid.psworld.slot import (PLACEMENT, PLACEMENTS, PaperPolicy, Slot, assign_bundles, first_bundles,  # noqa: F401
                                       place_cpu_first, reach)
from slurm_liquid.psworld.world import (EPOCH_FRACTION, EPOCH_SIZE, MODELS, NODE_SLOTS, PS_SLOTS,  # noqa: F401
                                        SETTINGS, SLOT_S, WORKER_SLOTS, PaperJob, PaperSetting, capacity,
                                        epochs_per_slot, next_step, paper_trace, peak_speed, samples_per_s,
                                        uses_gpu)
from slurm_liquid.sim.engine import SimResult
from slurm_liquid.sim.paper_policies import PaperBestSplit, PaperDRF, PaperHull, PaperOptimus, best_split  # noqa: F401

PAPER_POLICIES = ("drf", "optimus", "drf-best-split", "hull", "dl2")


class PaperRun(TraceRun):
    """`TraceRun` whose `run` gives the simulator's `SimResult`."""

    def run(self, policy: PaperPolicy, max_slots: int = 10_000) -> SimResult:
        self.play(policy, max_slots)
        return self.result(policy.name)

    def result(self, policy_name: str) -> SimResult:
        jcts = self.jcts()
        makespan = max((j.end + 1.0 for j in self.trace if j.end is not None), default=0.0) * SLOT_S
        total = self.setting.nodes * NODE_SLOTS * len(self.gpu_slots_used)
        return SimResult(policy=policy_name, workload=self.name, jcts=jcts, avg_jct_s=self.mean_jct(),
                         makespan_s=makespan, gpu_utilisation=sum(self.gpu_slots_used) / total if total else 0.0,
                         restarts=self.changes, gpus_total=self.setting.nodes * NODE_SLOTS // 4,
                         times=[i * SLOT_S for i in range(len(self.gpu_slots_used))],
                         gpus_in_use=[g // 4 for g in self.gpu_slots_used])


def make_paper_policy(name: str, policy_file: str | None = None) -> PaperPolicy:
    """A fresh policy for the replica; `dl2` loads `policy_file`, or the shipped file for the setting
    and placement it first runs in."""
    if name == "drf":
        return PaperDRF()
    if name == "optimus":
        return PaperOptimus()
    if name == "drf-best-split":
        return PaperBestSplit()
    if name == "hull":
        return PaperHull()
    if name == "dl2":
        from slurm_liquid.policy.dl2.psworker import make_psworker_dl2

        return make_psworker_dl2(policy_file)
    raise UsageError(f"unknown policy {name!r} for the DL2 paper workloads (known: {', '.join(PAPER_POLICIES)}, all)")


def run_paper(workload: str, seed: int, policies: Sequence[str], policy_file: str | None = None,
              placement: str = PLACEMENT) -> dict[str, SimResult]:
    """policy -> result on the trace `seed` of `workload` (dl2-paper-small or dl2-paper-large), every
    policy under `placement`."""
    if workload not in SETTINGS:
        raise UsageError(f"unknown DL2 paper workload {workload!r} (known: {', '.join(SETTINGS)})")
    setting = SETTINGS[workload]
    run = PaperRun(setting, paper_trace(setting, seed), f"{workload}-seed{seed}", placement)
    return {p: run.run(make_paper_policy(p, policy_file)) for p in policies}
