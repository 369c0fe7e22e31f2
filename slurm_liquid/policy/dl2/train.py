"""Training DL2: supervised warm-up on an existing scheduler's decisions, then actor-critic RL.

Training workloads come from the Philly trace, never from the 8 evaluation workloads:
`philly_workload(seed)` samples it with the Pollux artifact's generator and other seeds.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from slurm_liquid.loop.place import PlaceStage
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy.base import ClusterView, Decision, Policy, SpeedModel, changed
from slurm_liquid.policy.dl2.agent import DEFAULT_WINDOW, DL2Policy, Slot, Step
from slurm_liquid.policy.dl2.net import Adam, Params, forward, init_params, loss_and_grads
from slurm_liquid.policy.dl2.state import FEATURES, SlotState, target_sequence
from slurm_liquid.policy.rate import counts_of
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.workload import JobSpec

log = logging.getLogger(__name__)
EVAL_JOBS = 160  # each of the 8 Pollux workloads: 160 jobs over 8 hours

# Training steps the simulator slot by slot with the Pollux artifact's placement (the loop's default).
ARTIFACT_PLACE = PlaceStage(MostFreeGreedy())


def philly_workload(seed: int, jobs: int = EVAL_JOBS) -> list[JobSpec]:
    """`jobs` Philly jobs drawn as the Pollux artifact drew its workloads (`sample_philly`), their
    arrivals compressed by jobs / 160 so that the load matches the evaluation workloads'."""
    from slurm_liquid.sim.workload import sample_philly

    return sample_philly(jobs=jobs, seed=seed, time_scale=jobs / EVAL_JOBS)


# -- supervised warm-up ----------------------------------------------------------------------
SHORTEST_FIRST = ("srtf", "srtf-restart", "srtf-oracle")  # teachers whose decisions are learnt in their own rank order


def teacher_slot(view: ClusterView, teacher: Policy) -> tuple[list, list[tuple[int, int]] | None]:
    """The teacher's placed actions for one slot, and its plan (its steps in order) if it has one."""
    plan = teacher.plan(view) if hasattr(teacher, "plan") else None
    decision = Decision.resize(view, counts_of(plan, len(view.jobs))) if plan is not None else teacher.decide(view)
    return ARTIFACT_PLACE.place(view, decision), plan


def teacher_counts(view: ClusterView, actions) -> list[int]:
    new = changed(view, actions)
    return [sum(g for _, g in new.get(j.id, j.allocation)) for j in view.jobs]


def imitation_steps(view: ClusterView, counts: Sequence[int], window: int = DEFAULT_WINDOW,
                    speed: SpeedModel | None = None, order: str = "service",
                    shortest_first: bool = False, start_margin_s: float = 0.0, keep_held: bool = False,
                    plan: Sequence[tuple[int, int]] | None = None) -> list[Step]:
    """One slot of a scheduler's decisions (`counts`, per job of `view.jobs`) as DL2's "+1 GPU"
    sequence: the (state, action) pairs the warm-up learns from. `shortest_first`: fill jobs in
    shortest-estimated-remaining-time order (for a teacher that ranks jobs so; needs `speed`),
    else least-served first (DRF's water-filling). For the restart-aware teacher (`policy.srtf.SRTFRestart`):
    `start_margin_s`, its rank offset for a job that holds no GPUs, so that the ranking columns see jobs
    as it does, and `keep_held`: a running job's GPUs back up to what it holds come before the rest.
    With a teacher's `plan` (its steps in order: `policy.rate.CompletionRate`), its GPUs are learnt in
    that order, and the state fills its RATE column, the teacher's price of each job's next step."""
    state = SlotState(view, window, speed, order, start_margin_s, rate=plan is not None)
    target = state.window_targets(counts)
    turns = _plan_turns(state, plan) if plan is not None else None
    steps: list[Step] = []
    while True:
        valid = state.valid()
        if not valid.any():
            break
        if turns is not None:  # each row's next GPU comes at its place in the teacher's plan
            priority = [t[a] if a < len(t) else math.inf for t, a in zip(turns, state.assigned)]
        else:
            priority = _shortest_first(state, target, keep_held) if shortest_first else None
        label = target_sequence(state.assigned, target, valid, state.index[:window], priority)
        if not valid[label]:  # the teacher idles the whole cluster: DL2 cannot, so nothing to learn
            break
        steps.append(Step(state.matrix(), valid, label))
        if label == len(state.jobs):
            break
        state.apply(label)
    return steps


def _shortest_first(state: SlotState, target: Sequence[int], keep_held: bool = False) -> list[tuple[int, float]]:
    """The order a shortest-remaining-time teacher's GPUs are learnt in: first every job up to its
    ask (or its target, if lower), shortest estimated remaining time first; with `keep_held`, then a
    running job back up to what it holds, in the same order (the restart-aware teacher keeps it); then
    the GPUs beyond, largest time saved first, as the teacher hands them out."""
    keys = []
    for i, job in enumerate(state.jobs):
        if state.assigned[i] < min(target[i], job.gpus):
            keys.append((0, float(state.srtf_rank[i])))
        elif keep_held and state.assigned[i] < min(target[i], state.current[i]):
            keys.append((1, float(state.srtf_rank[i])))
        else:
            keys.append((2, -state.gain(i)))
    return keys


def _plan_turns(state: SlotState, plan: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Per window row, the turn in `plan` at which each of its GPUs is handed out, in order."""
    row = {job: r for r, job in enumerate(state.index[:state.window])}
    turns: list[list[int]] = [[] for _ in state.jobs]
    given = 0
    for job, size in plan:
        if job in row:
            turns[row[job]].extend([given] * size)
        given += 1
    return turns


def restart_awareness(teacher: Policy, config: ClusterConfig) -> tuple[float, bool]:
    """`imitation_steps`'s `start_margin_s` and `keep_held` for `teacher` at `config`'s restart penalty."""
    return (float(getattr(teacher, "start_margin", 0.0)) * config.restart_penalty,
            bool(getattr(teacher, "resize_margin", 0.0)))


def collect_teacher(specs: Sequence[JobSpec], teacher: Policy, config: ClusterConfig,
                    window: int = DEFAULT_WINDOW, speed: SpeedModel | None = None,
                    max_slots: int | None = None, order: str = "service") -> list[Step]:
    """Run `teacher` on a workload (at most `max_slots` slots) and learn from every slot."""
    shortest_first = getattr(teacher, "name", "") in SHORTEST_FIRST
    margin, keep = restart_awareness(teacher, config)
    sim = Simulator(specs, config)
    teacher.reset()
    samples: list[Step] = []
    view = sim.reset()
    slots = 0
    while view is not None and (max_slots is None or slots < max_slots):
        slots += 1
        actions, plan = teacher_slot(view, teacher)
        samples.extend(imitation_steps(view, teacher_counts(view, actions), window, speed, order, shortest_first,
                                       margin, keep, plan))
        view = sim.step(actions)
    return samples


def collect_on_policy(specs: Sequence[JobSpec], student: DL2Policy, teacher: Policy, config: ClusterConfig,
                      window: int = DEFAULT_WINDOW, speed: SpeedModel | None = None, max_slots: int = 1500,
                      order: str = "service") -> list[Step]:
    """DAgger (Ross, Gordon and Bagnell, 2011): run the student and label every slot it reaches with the
    teacher's counts for that slot. Imitation alone only ever sees the teacher's own states; a
    student that errs drifts to states (jobs restarted over and over, one job holding every GPU) the
    teacher never visited and where nothing taught it. `max_slots` bounds a student that thrashes."""
    shortest_first = getattr(teacher, "name", "") in SHORTEST_FIRST
    margin, keep = restart_awareness(teacher, config)
    sim = Simulator(specs, config)
    teacher.reset()
    student.reset()
    samples: list[Step] = []
    view = sim.reset()
    slots = 0
    while view is not None and slots < max_slots:
        slots += 1
        actions, plan = teacher_slot(view, teacher)
        samples.extend(imitation_steps(view, teacher_counts(view, actions), window, speed, order, shortest_first,
                                       margin, keep, plan))
        view = sim.step(ARTIFACT_PLACE.place(view, student.decide(view)))
    return samples


def batch(steps: Sequence[Step]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pad states to a common row count: x (B, R, D), present, valid (B, R), actions (B,)."""
    rows = max(len(s.x) for s in steps)
    x = np.zeros((len(steps), rows, steps[0].x.shape[1]))  # FEATURES, or the PS/worker policy's width
    present = np.zeros((len(steps), rows), dtype=bool)
    valid = np.zeros((len(steps), rows), dtype=bool)
    actions = np.zeros(len(steps), dtype=int)
    for i, s in enumerate(steps):
        r = len(s.x)
        x[i, :r] = s.x
        present[i, :r] = True
        valid[i, :r] = s.valid
        actions[i] = s.action
    return x, present, valid, actions


def agreement(params: Params, steps: Sequence[Step], chunk: int = 2048) -> float:
    """Share of decisions where the network's most likely action is the teacher's."""
    hits = 0
    for lo in range(0, len(steps), chunk):
        x, present, valid, actions = batch(steps[lo:lo + chunk])
        fw = forward(params, x, present, valid)
        hits += int((fw.logp.argmax(axis=1) == actions).sum())
    return hits / max(1, len(steps))


@dataclass
class WarmupResult:
    params: Params
    curve: list[dict] = field(default_factory=list)  # per epoch: loss, train and held-out agreement


def supervised(params: Params, train: Sequence[Step], held_out: Sequence[Step], epochs: int = 10,
               lr: float = 1e-3, batch_size: int = 256, seed: int = 0,
               progress: Callable[[dict], None] | None = None) -> WarmupResult:
    """Cross-entropy on the teacher's actions with Adam; deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    opt = Adam(params, lr=lr)
    curve = []
    for epoch in range(epochs):
        order = rng.permutation(len(train))
        losses = []
        for lo in range(0, len(order), batch_size):
            x, present, valid, actions = batch([train[i] for i in order[lo:lo + batch_size]])
            fw = forward(params, x, present, valid)
            loss, grads = loss_and_grads(params, fw, actions, np.ones(len(actions)))
            opt.step(params, grads)
            losses.append(loss)
        row = {"epoch": epoch + 1, "loss": float(np.mean(losses)),
               "held_out_agreement": agreement(params, held_out)}
        curve.append(row)
        if progress:
            progress(row)
    return WarmupResult(params, curve)


# -- reinforcement learning ------------------------------------------------------------------
@dataclass
class RLConfig:
    episodes: int = 80
    gamma: float = 0.99
    lr: float = 3e-5  # 1e-4 gains for ~20 episodes from a warm start, then collapses
    entropy: float = 0.001
    value_coef: float = 0.5
    explore: float = 0.05  # job-aware exploration probability per decision (decays to a tenth)
    job_aware: bool = True
    critic: bool = True  # False: REINFORCE with a running-mean baseline
    replay: bool = True
    replay_size: int = 50_000
    batch_size: int = 256
    updates: int = 16  # minibatch updates per episode
    critic_warmup: int = 10  # first episodes: fit the value head alone, the policy untouched
    gae_lambda: float = 0.95
    restart_weight: float = 1.0  # restart cost in units of the progress (or time) the penalty wastes
    reward: str = "jct"  # "progress": DL2's normalised progress; "jct": minus the jobs waiting or running
    jobs: int = 160  # Philly jobs per training episode
    max_slots: int = 2000  # episode cut, bootstrapped by the critic (2000: a whole workload)
    pool: int = 16  # distinct training workloads, cycled
    seed: int = 0
    window: int = DEFAULT_WINDOW
    window_order: str = "service"
    start_margin: float = 0.0  # the init file's (`DL2Policy.start_margin`)
    rate: bool = False  # the init file's (`DL2Policy.rate`)
    ppo_clip: float = 0.0  # > 0: PPO's clipped surrogate (ratio in 1 +- ppo_clip) instead of truncated IS


def restart_cost(view: ClusterView, actions, reward: float, running: int, weight: float, interval: float) -> tuple[int, float]:
    """Restarts the actions cause (changes of jobs that already hold GPUs) and their cost in
    reward units: the penalty's share of a slot at the slot's mean per-job progress rate."""
    current = {j.id: j.allocation for j in view.jobs}
    restarts = sum(1 for job in changed(view, actions) if current.get(job))
    per_job = reward / max(1, running)
    return restarts, weight * restarts * per_job * view.restart_penalty_s / interval


def rollout(policy: DL2Policy, sim: Simulator, weight: float,
            max_slots: int | None = None, reward: str = "jct") -> tuple[list[Slot], ClusterView | None]:
    """One training episode. A slot's reward is, for "progress" (DL2's), its normalised progress
    minus its restart cost; for "jct", minus the active jobs in the slot and minus, per restart,
    the slots of delay the penalty adds (summed over an episode: minus the total JCT in slots).

    Stops after `max_slots` slots (a long tail of one big job teaches little and costs much);
    returns the slots and the view it stopped at (None: the workload completed)."""
    policy.record = []
    policy.reset()
    view = sim.reset()
    last, running = 0.0, 1
    while view is not None and (max_slots is None or len(policy.record) < max_slots):
        actions = ARTIFACT_PLACE.place(view, policy.decide(view))
        restarts, cost = restart_cost(view, actions, last, running, weight, sim.config.interval)
        running = sum(1 for j in view.jobs if j.allocation)
        active = len(view.jobs)
        view = sim.step(actions)
        last = sim.last_progress
        slot = policy.record[-1]
        if reward == "jct":
            slot.reward = -(active + weight * restarts * sim.config.restart_penalty / sim.config.interval)
        else:
            slot.reward = last - cost
        slot.restarts = restarts
    slots, policy.record = policy.record, None
    return slots, view


def returns(slots: Sequence[Slot], gamma: float, bootstrap: float = 0.0, values: Sequence[float] | None = None,
            lam: float = 1.0) -> list[tuple[Step, float, float]]:
    """(step, value target, advantage) per step; the steps of one slot share their slot's.

    With the critic's `values` of each slot's first state, advantages are generalised advantage
    estimates (GAE, `lam`) and targets are advantage + value: far less noisy than a whole
    episode's return when 60 decisions share each slot's reward. Without values, both are the
    discounted return (REINFORCE). `bootstrap` is the value of the state after the last slot
    (0 at the end of a workload)."""
    v = list(values) if values is not None else [0.0] * len(slots)
    out: list[tuple[Step, float, float]] = []
    adv, g, nxt = 0.0, bootstrap, bootstrap
    for slot, value in zip(reversed(slots), reversed(v)):
        g = slot.reward + gamma * g
        if values is None:
            target = adv = g
        else:
            adv = slot.reward + gamma * nxt - value + gamma * lam * adv
            target = adv + value
        out.extend((s, target, adv) for s in reversed(slot.steps))
        nxt = value
    out.reverse()
    return out


def slot_values(params: Params, slots: Sequence[Slot], scale: float) -> list[float]:
    """The critic's value (in reward units) of each slot's first decision; a slot without decisions
    takes the next slot's."""
    firsts = [(i, s.steps[0]) for i, s in enumerate(slots) if s.steps]
    found: dict[int, float] = {}
    for lo in range(0, len(firsts), 1024):
        chunk = firsts[lo:lo + 1024]
        x, present, valid, _ = batch([s for _, s in chunk])
        fw = forward(params, x, present, valid)
        found.update({i: float(v) * scale for (i, _), v in zip(chunk, fw.value)})
    out, carry = [0.0] * len(slots), 0.0
    for i in reversed(range(len(slots))):
        carry = found.get(i, carry)
        out[i] = carry
    return out


@dataclass
class TrainState:
    params: Params
    opt: Adam
    episode: int = 0
    curve: list[dict] = field(default_factory=list)
    reward_scale: float = 0.0
    best: tuple[float, int, Params] | None = None  # (validation mean JCT, episode, weights)

    def note_validation(self, jct: float) -> None:
        if self.best is None or jct < self.best[0]:
            self.best = (jct, self.episode, {k: v.copy() for k, v in self.params.items()})


Sample = tuple[Step, float, float]  # (decision, value target, advantage), in reward units


def policy_weights(adv: np.ndarray, ratio: np.ndarray, clip: float = 0.0) -> np.ndarray:
    """Per-decision weights w of the policy-gradient loss -w log pi(a), from the normalised advantage
    and the ratio pi(a) / behaviour(a) of the current to the acting policy.

    clip 0: truncated importance sampling, w = A min(1, ratio) (as V-trace). clip > 0: PPO's clipped
    surrogate min(ratio A, clip(ratio, 1 - clip, 1 + clip) A), whose gradient is ratio A grad log pi
    where the ratio has not yet moved past the bound in the advantage's direction and zero where it
    has: a decision stops pulling once the policy has followed it far enough."""
    if clip <= 0:
        return adv * np.minimum(1.0, ratio)
    past = ((adv > 0) & (ratio > 1 + clip)) | ((adv < 0) & (ratio < 1 - clip))
    return np.where(past, 0.0, adv * ratio)


def rl_update(state: TrainState, fresh: list[Sample], buffer: list[Sample],
              cfg: RLConfig, rng: np.random.Generator) -> dict:
    """Actor-critic minibatch updates on fresh samples mixed with replayed ones.

    Exploration and replay make the samples off-policy: each policy-gradient term is weighted by
    min(1, pi(a) / behaviour(a)) (truncated importance sampling, as in V-trace), so a randomly
    explored GPU, which the policy itself would almost never give, moves it only as much as its
    own probability warrants."""
    scale = state.reward_scale / (1 - cfg.gamma)  # value targets of order one
    stats = {"loss": [], "entropy": []}
    for _ in range(cfg.updates):
        picks = [fresh[i] for i in rng.integers(0, len(fresh), cfg.batch_size)]
        if cfg.replay and buffer:
            picks += [buffer[i] for i in rng.integers(0, len(buffer), cfg.batch_size)]
        x, present, valid, actions = batch([s for s, _, _ in picks])
        targets = np.array([g for _, g, _ in picks]) / scale
        fw = forward(state.params, x, present, valid)
        if cfg.critic:
            adv = np.array([a for _, _, a in picks])
        else:
            adv = targets - targets.mean()
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        behaviour = np.array([s.behaviour for s, _, _ in picks])
        ratio = np.exp(fw.logp[np.arange(len(actions)), actions]) / np.maximum(behaviour, 1e-12)
        adv = policy_weights(adv, ratio, cfg.ppo_clip)
        # A warm-started actor next to an untrained critic: advantages from random values and the
        # value error's gradient through the shared layers would both undo the warm-up, so the value
        # head learns alone first.
        fit_critic_only = cfg.critic and state.episode < cfg.critic_warmup
        loss, grads = loss_and_grads(state.params, fw, actions, adv * (not fit_critic_only),
                                     targets if cfg.critic else None, cfg.entropy * (not fit_critic_only),
                                     cfg.value_coef if cfg.critic else 0.0)
        if fit_critic_only:
            grads = {k: g if k in ("wv", "bv") else np.zeros_like(g) for k, g in grads.items()}
        state.opt.step(state.params, grads)
        stats["loss"].append(loss)
        stats["entropy"].append(float(-(np.where(fw.valid, fw.prob * fw.logp, 0.0)).sum(axis=1).mean()))
    return {k: float(np.mean(v)) for k, v in stats.items()}


def state_value(params: Params, view: ClusterView, window: int, speed: SpeedModel | None,
                order: str = "service", start_margin: float = 0.0, rate: bool = False) -> float:
    """The critic's (scaled) value of the first decision of a slot at `view`."""
    state = SlotState(view, window, speed, order, start_margin * view.restart_penalty_s, rate)
    x = state.matrix()
    valid = state.valid()
    if not valid.any():
        valid[-1] = True
    return float(forward(params, x[None], np.ones((1, len(x)), dtype=bool), valid[None]).value[0])


def evaluate(params: Params, workloads: dict[str, Sequence[JobSpec]], config: ClusterConfig,
             speed: SpeedModel | None, window: int = DEFAULT_WINDOW, max_slots: int = 2000,
             order: str = "service", start_margin: float = 0.0, rate: bool = False) -> float:
    """Mean over workloads of the greedy policy's mean JCT (s). A run still going after
    `max_slots` slots (a poor early policy) counts unfinished jobs at their age: a lower bound."""
    policy = DL2Policy(params, window=window, speed=speed, order=order, start_margin=start_margin, rate=rate)
    means = []
    for name, specs in workloads.items():
        sim = Simulator(specs, config, name)
        policy.reset()
        view = sim.reset()
        for _ in range(max_slots):
            if view is None:
                break
            view = sim.step(ARTIFACT_PLACE.place(view, policy.decide(view)))
        jcts = [max(0.0, (j.completion if j.completion is not None else sim.clock) - j.spec.time) for j in sim.jobs]
        means.append(float(np.mean(jcts)))
    return float(np.mean(means))


def train_rl(state: TrainState, cfg: RLConfig, config: ClusterConfig, speed: SpeedModel | None,
             validation: dict[str, Sequence[JobSpec]], eval_every: int = 10,
             checkpoint: Callable[[TrainState], None] | None = None,
             progress: Callable[[dict], None] | None = None) -> TrainState:
    """Run episodes `state.episode`..`cfg.episodes`; resumable from a checkpointed `state`."""
    buffer: list[Sample] = []
    if validation and state.episode == 0 and not state.curve:  # the starting point (e.g. the warm-up)
        jct = evaluate(state.params, validation, config, speed, cfg.window, order=cfg.window_order,
                       start_margin=cfg.start_margin, rate=cfg.rate)
        state.note_validation(jct)
        state.curve.append({"episode": 0, "validation_avg_jct_s": jct})
        if progress:
            progress(state.curve[-1])
    pool = [philly_workload(seed=10_000 + cfg.seed * 1000 + k, jobs=cfg.jobs) for k in range(cfg.pool)]
    while state.episode < cfg.episodes:
        e = state.episode
        t0 = time.perf_counter()
        explore = cfg.explore * (1 - 0.9 * e / max(1, cfg.episodes - 1))
        policy = DL2Policy(state.params, window=cfg.window, speed=speed, sample=True, explore=explore,
                           job_aware=cfg.job_aware, seed=cfg.seed * 1_000_003 + e, order=cfg.window_order,
                           start_margin=cfg.start_margin, rate=cfg.rate)
        if not cfg.job_aware:
            policy.explore = 0.0  # the ablation: exploration only from the softmax's own sampling
        sim = Simulator(pool[e % cfg.pool], config, f"train-{e % cfg.pool}")
        slots, last_view = rollout(policy, sim, cfg.restart_weight, cfg.max_slots, cfg.reward)
        if not state.reward_scale:
            state.reward_scale = float(np.mean([abs(s.reward) for s in slots])) or 1.0
        tail = 0.0
        if last_view is not None:
            if not cfg.critic:  # no critic to bootstrap with: drop the slots whose return the cut distorts
                slots = slots[:max(1, len(slots) - int(1 / (1 - cfg.gamma)))]
            else:
                tail = state_value(state.params, last_view, cfg.window, speed,
                                   cfg.window_order, cfg.start_margin, cfg.rate) * state.reward_scale / (1 - cfg.gamma)
        scale = state.reward_scale / (1 - cfg.gamma)
        fresh = returns(slots, cfg.gamma, tail,
                        slot_values(state.params, slots, scale) if cfg.critic else None, cfg.gae_lambda)
        rng = np.random.default_rng([cfg.seed, e])
        stats = rl_update(state, fresh, buffer, cfg, rng) if fresh else {"loss": math.nan, "entropy": math.nan}
        if cfg.replay:
            buffer.extend(fresh)
            del buffer[:max(0, len(buffer) - cfg.replay_size)]
        state.episode += 1
        row = {"episode": state.episode, "slots": len(slots), "completed": sim.completed,
               "reward_per_slot": float(np.mean([s.reward for s in slots])),
               "restarts": sum(s.restarts for s in slots),
               "explore": explore, "seconds": time.perf_counter() - t0, **stats}
        if validation and (state.episode % eval_every == 0 or state.episode == cfg.episodes):
            row["validation_avg_jct_s"] = evaluate(state.params, validation, config, speed, cfg.window,
                                                   order=cfg.window_order, start_margin=cfg.start_margin,
                                                   rate=cfg.rate)
            state.note_validation(row["validation_avg_jct_s"])
        state.curve.append(row)
        if progress:
            progress(row)
        if checkpoint and (state.episode % eval_every == 0 or state.episode == cfg.episodes):
            checkpoint(state)
    return state


def new_params(hidden: int, layers: int, seed: int) -> Params:
    return init_params(FEATURES, hidden, layers, seed)


def curve_json(curve: list[dict]) -> str:
    return json.dumps(curve)


def write_curves(curve: list[dict], path: str | Path, title: str) -> Path | None:
    """CSV next to a PNG of the learning curve (the PNG only if matplotlib is installed)."""
    import csv

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for row in curve for k in row})
    with open(path.with_suffix(".csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(curve)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    xkey = "episode" if "episode" in keys else "epoch"
    for key in ("validation_avg_jct_s",):
        pts = [(r[xkey], r[key]) for r in curve if key in r]
        if pts:
            ax.plot(*zip(*pts), label=key.replace("_", " "), marker="." if key.startswith("val") else None)
    if "held_out_agreement" in keys:
        ax.plot([r[xkey] for r in curve], [r["held_out_agreement"] for r in curve], label="held-out agreement")
    ax.set_xlabel(xkey)
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=100)
    plt.close(fig)
    return path.with_suffix(".png")
