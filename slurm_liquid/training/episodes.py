"""DL2's episodes: the teacher's slots to imitate, DAgger, RL rollouts and evaluation, each run in a
`sim.world.World`, so under the rules the policy will be applied with (`loop.rules`): the Pollux
setting's (`World.pollux`) or the daemon's (`World.live`, `Rules.daemon`).

A slot is a round in which the policy decides the running jobs' counts (`sim.world.is_slot`); what
the round then does (the change limits, the guard, the placement in the rules' shapes) is the label
the warm-up learns and the outcome RL is rewarded for.

Training workloads come from the Philly trace, never from the 8 evaluation workloads:
`philly_workload(seed)` samples it with the Pollux artifact's generator and other seeds.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, Sequence

import numpy as np

from slurm_liquid.loop import Round
from slurm_liquid.policy.dl2.agent import DEFAULT_WINDOW, DL2Policy, Slot, Step
from slurm_liquid.policy.dl2.train import (SHORTEST_FIRST, RLConfig, Sample, TrainState, imitation_steps,
                                           restart_awareness, returns, rl_update, slot_values, state_value,
                                           teacher_counts)
from slurm_liquid.policy.rate import counts_of
from slurm_liquid.sim.workload import JobSpec
from slurm_liquid.sim.world import World
from slurm_liquid.views import ClusterView, Decision, Policy, SpeedModel, changed

log = logging.getLogger(__name__)
EVAL_JOBS = 160  # each of the 8 Pollux workloads: 160 jobs over 8 hours


def philly_workload(seed: int, jobs: int = EVAL_JOBS) -> list[JobSpec]:
    """`jobs` Philly jobs drawn as the Pollux artifact drew its workloads (`sample_philly`), their
    arrivals compressed by jobs / 160 so that the load matches the evaluation workloads'."""
    from slurm_liquid.sim.workload import sample_philly

    return sample_philly(jobs=jobs, seed=seed, time_scale=jobs / EVAL_JOBS)


class Planned:
    """A teacher with a plan (`policy.rate.CompletionRate`) as a policy: its counts from its plan, the
    plan kept for the slot's labels."""

    def __init__(self, teacher: Policy) -> None:
        self.teacher = teacher
        self.name = teacher.name
        self.speed = getattr(teacher, "speed", None)
        self.payback = getattr(teacher, "payback", 0.0)
        self.plan: list[tuple[int, int]] | None = None

    def reset(self) -> None:
        self.teacher.reset()

    def decide(self, view: ClusterView) -> Decision:
        if not hasattr(self.teacher, "plan"):
            return self.teacher.decide(view)
        self.plan = self.teacher.plan(view)
        return Decision.resize(view, counts_of(self.plan, len(view.jobs)))


def teacher_slot(view: ClusterView, teacher: Policy, place=None) -> tuple[list, list[tuple[int, int]] | None]:
    """The teacher's placed actions for one view under the artifact's placement (or `place`), and its plan
    (its steps in order) if it has one: one slot of the Pollux setting, for a look at a single decision."""
    from slurm_liquid.loop import PlaceStage
    from slurm_liquid.placement.greedy import MostFreeGreedy

    planned = Planned(teacher)
    decision = planned.decide(view)
    return (place or PlaceStage(MostFreeGreedy())).place(view, decision), planned.plan


def _labels(view: ClusterView, done: Round, teacher: Policy, planned: Planned | None, window: int,
            speed: SpeedModel | None, order: str, penalty: float) -> list[Step]:
    shortest_first = getattr(teacher, "name", "") in SHORTEST_FIRST
    margin, keep = restart_awareness(teacher, penalty)
    plan = planned.plan if planned is not None else None
    return imitation_steps(view, teacher_counts(view, done.actions), window, speed, order, shortest_first,
                           margin, keep, plan)


def collect_teacher(world: World, teacher: Policy, window: int = DEFAULT_WINDOW, speed: SpeedModel | None = None,
                    max_slots: int | None = None, order: str = "service") -> list[Step]:
    """Run `teacher` on the world's workload (at most `max_slots` slots) and learn from every slot:
    what the round did with the teacher's counts, under the world's rules."""
    planned = Planned(teacher)
    samples: list[Step] = []
    for _, view, done, slot in world.rounds(planned, speed, max_slots):
        if slot:
            samples.extend(_labels(view, done, teacher, planned, window, speed, order, view.restart_penalty_s))
    return samples


def collect_on_policy(world: World, student: DL2Policy, teacher: Policy, window: int = DEFAULT_WINDOW,
                      speed: SpeedModel | None = None, max_slots: int = 1500, order: str = "service") -> list[Step]:
    """DAgger (Ross, Gordon and Bagnell, 2011): run the student and label every slot it reaches with what
    the teacher would have done there (the same rules, not applied). Imitation alone only ever sees the
    teacher's own states; a student that errs drifts to states (jobs restarted over and over, one job
    holding every GPU) the teacher never visited and where nothing taught it. `max_slots` bounds a
    student that thrashes."""
    planned = Planned(teacher)
    judge = world.loop(planned, speed, paced=False)
    planned.reset()
    samples: list[Step] = []
    for _, view, _, slot in world.rounds(student, speed, max_slots):
        if slot:
            samples.extend(_labels(view, judge.decide(view), teacher, planned, window, speed, order,
                                   view.restart_penalty_s))
    return samples


def rollout(policy: DL2Policy, world: World, weight: float, max_slots: int | None = None,
            reward: str = "jct", speed: SpeedModel | None = None) -> tuple[list[Slot], ClusterView | None, int]:
    """One training episode under the world's rules. A slot's reward is, for "jct", minus the active
    jobs' seconds in it and, per restart it caused, the penalty's seconds (weighted), both in slot
    lengths (summed over an episode: minus the total JCT in slots); for "progress" (DL2's), its
    normalised progress minus the restarts' share of it.

    Stops after `max_slots` slots; returns the slots, the view it stopped at (None: the workload
    completed) and the jobs completed."""
    policy.record = []
    slot_s = world.slot_s
    last_view: ClusterView | None = None
    sim = None
    open_slot: Slot | None = None
    for sim, view, done, slot in world.rounds(policy, speed, max_slots):
        if slot and policy.record:
            open_slot = policy.record[-1]
            open_slot.reward = 0.0
            current = {j.id: j.allocation for j in view.jobs}
            open_slot.restarts = sum(1 for job in changed(view, done.actions) if current.get(job))
            open_slot.reward -= weight * open_slot.restarts * view.restart_penalty_s / slot_s
        if open_slot is not None:
            dt = world.config.interval
            if reward == "jct":
                open_slot.reward -= len(view.jobs) * dt / slot_s
            else:
                running = max(1, sum(1 for j in view.jobs if j.allocation))
                open_slot.reward += sim.last_progress - (open_slot.restarts * weight * sim.last_progress / running
                                                         * view.restart_penalty_s / slot_s if slot else 0.0)
        last_view = view
    slots, policy.record = policy.record, None
    completed = sim.completed if sim is not None else 0
    finished = sim is not None and sim.done
    return slots, (None if finished else last_view), completed


def evaluate(params, worlds: dict[str, World], speed_of: Callable[[], SpeedModel | None],
             window: int = DEFAULT_WINDOW, max_slots: int = 2000, order: str = "service", start_margin: float = 0.0,
             rate: bool = False) -> float:
    """Mean over worlds of the greedy policy's mean JCT (s). A run still going after `max_slots`
    slots (a poor early policy) counts unfinished jobs at their age: a lower bound."""
    means = []
    for world in worlds.values():
        speed = speed_of()
        policy = DL2Policy(params, window=window, speed=speed, order=order, start_margin=start_margin, rate=rate)
        sim = None
        for sim, *_ in world.rounds(policy, speed, max_slots):
            pass
        # a run cut at max_slots leaves the last round unapplied: its clock is the lower bound
        jcts = [max(0.0, (j.completion if j.completion is not None else sim.clock) - j.spec.time) for j in sim.jobs]
        means.append(float(np.mean(jcts)))
    return float(np.mean(means))


def train_rl(state: TrainState, cfg: RLConfig, pool: Sequence[World], speed_of: Callable[[], SpeedModel | None],
             validation: dict[str, World], eval_every: int = 10,
             checkpoint: Callable[[TrainState], None] | None = None,
             progress: Callable[[dict], None] | None = None) -> TrainState:
    """Run episodes `state.episode`..`cfg.episodes` on the worlds of `pool` in turn; resumable from a
    checkpointed `state`. `speed_of` makes each episode's speed model (a measured one learns afresh)."""
    buffer: list[Sample] = []
    evaluate_now = lambda: evaluate(state.params, validation, speed_of, cfg.window, order=cfg.window_order,  # noqa: E731
                                    start_margin=cfg.start_margin, rate=cfg.rate)
    if validation and state.episode == 0 and not state.curve:  # the starting point (e.g. the warm-up)
        jct = evaluate_now()
        state.note_validation(jct)
        state.curve.append({"episode": 0, "validation_avg_jct_s": jct})
        if progress:
            progress(state.curve[-1])
    while state.episode < cfg.episodes:
        e = state.episode
        t0 = time.perf_counter()
        explore = cfg.explore * (1 - 0.9 * e / max(1, cfg.episodes - 1))
        speed = speed_of()
        policy = DL2Policy(state.params, window=cfg.window, speed=speed, sample=True, explore=explore,
                           job_aware=cfg.job_aware, seed=cfg.seed * 1_000_003 + e, order=cfg.window_order,
                           start_margin=cfg.start_margin, rate=cfg.rate)
        if not cfg.job_aware:
            policy.explore = 0.0  # the ablation: exploration only from the softmax's own sampling
        slots, last_view, completed = rollout(policy, pool[e % len(pool)], cfg.restart_weight, cfg.max_slots,
                                              cfg.reward, speed)
        if not slots:
            state.episode += 1
            continue
        if not state.reward_scale:
            state.reward_scale = float(np.mean([abs(s.reward) for s in slots])) or 1.0
        tail = 0.0
        if last_view is not None:
            if not cfg.critic:  # no critic to bootstrap with: drop the slots whose return the cut distorts
                slots = slots[:max(1, len(slots) - int(1 / (1 - cfg.gamma)))]
            else:
                tail = state_value(state.params, last_view, cfg.window, speed, cfg.window_order, cfg.start_margin,
                                   cfg.rate) * state.reward_scale / (1 - cfg.gamma)
        scale = state.reward_scale / (1 - cfg.gamma)
        fresh = returns(slots, cfg.gamma, tail,
                        slot_values(state.params, slots, scale) if cfg.critic else None, cfg.gae_lambda)
        rng = np.random.default_rng([cfg.seed, e])
        stats = rl_update(state, fresh, buffer, cfg, rng) if fresh else {"loss": math.nan, "entropy": math.nan}
        if cfg.replay:
            buffer.extend(fresh)
            del buffer[:max(0, len(buffer) - cfg.replay_size)]
        state.episode += 1
        row = {"episode": state.episode, "slots": len(slots), "completed": completed,
               "reward_per_slot": float(np.mean([s.reward for s in slots])),
               "restarts": sum(s.restarts for s in slots),
               "explore": explore, "seconds": time.perf_counter() - t0, **stats}
        if validation and (state.episode % eval_every == 0 or state.episode == cfg.episodes):
            row["validation_avg_jct_s"] = evaluate_now()
            state.note_validation(row["validation_avg_jct_s"])
        state.curve.append(row)
        if progress:
            progress(row)
        if checkpoint and (state.episode % eval_every == 0 or state.episode == cfg.episodes):
            checkpoint(state)
    return state
