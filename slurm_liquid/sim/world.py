"""A workload in a world: the simulator, what the policy sees of it, and the loop under one set of rules.

DL2's training, its evaluation and the live replay's simulated arms all step a `World`: the same
`Loop.under(rules, ...)` the daemon's slot runs, so that DL2 learns in the world it is applied in.
`World.pollux` is the Pollux-setting world (the artifact's rules and greedy placement);
`World.live` a live-replay workload under `Rules.daemon` (Liquid's placer, measured start and restart
costs, the declared models as the speed prior).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

from slurm_liquid.loop import Loop, Round, Rules, SlotPolicy
from slurm_liquid.placement.base import Placer
from slurm_liquid.sim.backend import SimBackend
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.workload import JobSpec
from slurm_liquid.views import ClusterView, Policy, SpeedModel


def _greedy() -> Placer:
    from slurm_liquid.placement.greedy import MostFreeGreedy

    return MostFreeGreedy()


@dataclass
class World:
    specs: Sequence[JobSpec]
    config: ClusterConfig
    rules: Rules = field(default_factory=Rules.reference)
    placer: Placer = field(default_factory=_greedy)
    start_cost: float | None = None                       # a first start's cost (None: the restart penalty)
    declared: dict[str, tuple[str, int]] | None = None    # job -> (model, batch) it declares (the speed prior)
    name: str = "workload"

    @classmethod
    def pollux(cls, specs: Sequence[JobSpec], config: ClusterConfig, name: str = "workload") -> "World":
        return cls(specs, config, name=name)

    @classmethod
    def live(cls, workload: dict, rules: Rules, restart_cost: float, start_cost: float,
             name: str = "live") -> "World":
        from slurm_liquid.sim.live import live_config, specs_of
        from slurm_liquid.sim.runner import make_placer

        config, placer = make_placer("liquid", live_config(workload, restart_cost, True))
        declared = {j["name"]: (j["app"], int(j["batch_size"])) for j in workload["jobs"]}
        return cls(specs_of(workload), config, rules, placer, start_cost, declared, name)

    def simulator(self) -> Simulator:
        if self.start_cost is None:
            return Simulator(self.specs, self.config, self.name)
        from slurm_liquid.sim.live import LiveSimulator

        return LiveSimulator(self.specs, self.config, self.name, self.start_cost)

    def backend(self, sim: Simulator, oracle: bool = False) -> SimBackend:
        if self.declared is None or oracle:
            return SimBackend(sim)
        from slurm_liquid.sim.live import Declared

        return Declared(sim, self.declared)

    def loop(self, policy: Policy, speed: SpeedModel | None = None, paced: bool = True) -> Loop:
        return Loop.under(self.rules, policy, self.placer, speed, paced=paced)

    @property
    def slot_s(self) -> float:
        """Seconds between the policy's decisions."""
        return self.rules.slot_s or self.config.interval

    def rounds(self, policy: Policy, speed: SpeedModel | None = None,
               max_slots: int | None = None) -> Iterator[tuple[Simulator, ClusterView, Round, bool]]:
        """Runs `policy` under the world's rules, yielding (simulator, view, round, whether the policy
        decided in it: a slot) after each round is decided and before it is applied; stops after
        `max_slots` slots or at the end of the workload."""
        sim = self.simulator()
        backend = self.backend(sim)
        loop = self.loop(policy, speed)
        loop.policy.reset()
        slots = 0
        while max_slots is None or slots < max_slots:
            view = loop.observe(backend)
            if view is None:
                return
            slot = is_slot(loop.policy, view)
            done = loop.decide(view)
            slots += slot
            yield sim, view, done, slot
            backend.apply(done)


def is_slot(policy: Policy, view: ClusterView) -> bool:
    """Whether `policy` (as `Rules.wrap` made it) decides the running jobs' counts at `view`."""
    if not isinstance(policy, SlotPolicy):
        return True
    slot = policy.rules.slot_s
    return any(j.allocation for j in view.jobs) and (not slot or view.now + 1e-9 >= policy.next_slot)


