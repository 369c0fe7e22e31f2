"""Every policy by name, once: what compares in the simulator, what the daemon may run every slot, what
teaches DL2, and the restart guard each runs under by default (`loop.rules.Rules.guard`).

Light on purpose: `config` reads the elastic names from here at submission time, and nothing is
imported until a policy is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from slurm_liquid.errors import UsageError


@dataclass(frozen=True)
class Entry:
    name: str
    target: str                     # "module:attribute" of the class (or factory)
    speed: bool = False             # needs a speed model
    compare: bool = False           # one of the simulator's "all"
    learned: bool = False           # needs a trained file
    elastic: bool = False           # the daemon may run it every slot (`[elastic] policy`)
    teacher: bool = False           # DL2's warm-up may learn from it


ENTRIES = (
    Entry("fifo", "slurm_liquid.policy.fifo:FifoBackfill", compare=True, teacher=True),
    Entry("drf", "slurm_liquid.policy.drf:DRF", compare=True, elastic=True, teacher=True),
    Entry("tiresias", "slurm_liquid.policy.tiresias:Tiresias", compare=True, teacher=True),
    Entry("optimus", "slurm_liquid.policy.optimus:Optimus", speed=True, compare=True, elastic=True, teacher=True),
    Entry("dl2", "slurm_liquid.policy.dl2:make_dl2", speed=True, learned=True, elastic=True),
    Entry("static", "slurm_liquid.policy.static:Static", elastic=True),
    Entry("srtf", "slurm_liquid.policy.srtf:SRTF", speed=True, teacher=True),
    Entry("srtf-restart", "slurm_liquid.policy.srtf:SRTFRestart", speed=True, teacher=True),
    Entry("completion-rate", "slurm_liquid.policy.rate:CompletionRate", speed=True, teacher=True),
)
BY_NAME = {e.name: e for e in ENTRIES}
POLICY_NAMES = tuple(e.name for e in ENTRIES if e.compare)
LEARNED_POLICY_NAMES = tuple(e.name for e in ENTRIES if e.learned)
ELASTIC_POLICIES = tuple(e.name for e in ENTRIES if e.elastic)
TEACHERS = tuple(e.name for e in ENTRIES if e.teacher)
SIMULATED = POLICY_NAMES + LEARNED_POLICY_NAMES + ("static",)


def make_policy(name: str, speed=None, policy_file: str | None = None, world: str = "reference"):
    """A fresh policy by name; those that decide by speed need `speed`; DL2 reads `policy_file`, else
    the shipped file for `world` (the rules it will run under: `loop.rules.RULES`)."""
    entry = BY_NAME.get(name.strip().lower())
    if entry is None:
        raise UsageError(f"unknown policy {name!r} (known: {', '.join(BY_NAME)})")
    module, attr = entry.target.split(":")
    factory = getattr(import_module(module), attr)
    if entry.learned:
        return factory(policy_file, speed, world=world)
    if entry.speed:
        if speed is None:
            raise UsageError(f"policy {entry.name} needs a speed model")
        return factory(speed)
    return factory()
