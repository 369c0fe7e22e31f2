"""The DL2 policy: the network driving the per-slot "+1 GPU / stop" loop behind the shared interface."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from slurm_liquid.views import ClusterView, Decision, SpeedModel
from slurm_liquid.policy.dl2.net import Params, forward
from slurm_liquid.policy.dl2.state import DEFAULT_WINDOW, SlotState


@dataclass
class Step:
    """One decision: the state matrix, its legal actions and the action taken."""

    x: np.ndarray
    valid: np.ndarray
    action: int
    behaviour: float = 1.0  # probability the acting policy (exploration included) gave `action`


@dataclass
class Slot:
    steps: list[Step] = field(default_factory=list)
    reward: float = 0.0
    restarts: int = 0


class DL2Policy:
    """Re-decides every active job's GPU count each slot with the network.

    `explore` > 0 (training only) samples actions from the softmax, and with that
    probability per decision gives the GPU to a uniformly random job that can take one
    (job-aware exploration: never a random "stop", which would leave GPUs idle). With
    `explore` = 0 and `sample` False, the policy is greedy and deterministic.
    """

    name = "dl2"
    # DL2 prices restarts itself (its teacher charges each change its restart, and RL pays the penalty):
    # an outside guard would only second-guess it (`Rules.guard`).
    payback = 0.0

    def __init__(self, params: Params | None, window: int = DEFAULT_WINDOW, speed: SpeedModel | None = None,
                 sample: bool = False, explore: float = 0.0,
                 job_aware: bool = True, seed: int = 0, order: str = "service", start_margin: float = 0.0,
                 rate: bool = False, world: str = "reference") -> None:
        self.params = params
        self.world = world  # the rules it runs under: picks the shipped file when none is given
        self.window = window
        self.order = order
        self.start_margin = start_margin  # restart penalties added to a waiting job's rank (the file's teacher's)
        self.rate = rate  # whether the state fills its RATE column (a file taught by the completion-rate teacher)
        self.speed = speed
        self.sample = sample
        self.explore = explore
        self.job_aware = job_aware
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.record: list[Slot] | None = None

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def choose(self, x: np.ndarray, valid: np.ndarray) -> tuple[int, float]:
        """The action, and the probability with which it was chosen (for off-policy correction)."""
        present = np.ones(len(x), dtype=bool)
        fw = forward(self.params, x[None], present[None], valid[None])
        if not self.sample:
            return int(np.argmax(fw.logp[0])), 1.0
        p = fw.prob[0] / fw.prob[0].sum()
        jobs = (np.flatnonzero(valid[:-1]) if self.job_aware else np.flatnonzero(valid)) if self.explore else ()
        if len(jobs) and self.rng.random() < self.explore:
            action = int(self.rng.choice(jobs))
        else:
            action = int(self.rng.choice(len(p), p=p))
        uniform = 1.0 / len(jobs) if action in jobs else 0.0
        explore = self.explore if len(jobs) else 0.0
        return action, float((1 - explore) * p[action] + explore * uniform)

    def allocate(self, view: ClusterView) -> list[int]:
        state = SlotState(view, self.window, self.speed, self.order, self.start_margin * view.restart_penalty_s, self.rate)
        slot = Slot() if self.record is not None else None
        stop = len(state.jobs)
        while True:
            valid = state.valid()
            if not valid.any():
                break
            x = state.matrix()
            action, behaviour = self.choose(x, valid)
            if slot is not None:
                slot.steps.append(Step(x, valid, action, behaviour))
            if action == stop:
                break
            state.apply(action)
        if slot is not None:
            self.record.append(slot)
        return state.counts()

    def decide(self, view: ClusterView) -> Decision:
        if self.params is None:  # no file given: the shipped one trained for this restart penalty
            from slurm_liquid.policy.dl2 import rate_of, start_margin_of
            from slurm_liquid.policy.dl2.io import load_policy, shipped_for

            self.params, meta = load_policy(shipped_for(view.restart_penalty_s, self.world))
            self.window = int(meta.get("window", self.window))
            self.order = meta.get("window_order", "arrival")
            self.start_margin = start_margin_of(meta)
            self.rate = rate_of(meta)
        return Decision.resize(view, self.allocate(view))
