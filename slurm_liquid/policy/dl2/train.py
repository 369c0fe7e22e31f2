"""Learning DL2's network: the teacher's decisions as "+1 GPU" steps, the supervised warm-up, and the
actor-critic update. Pure numpy on recorded steps: the episodes that produce them (the simulator under
the world's rules) are `slurm_liquid.training`.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from slurm_liquid.views import ClusterView, Policy, SpeedModel, changed
from slurm_liquid.policy.dl2.agent import DEFAULT_WINDOW, Slot, Step
from slurm_liquid.policy.dl2.net import Adam, Params, forward, init_params, loss_and_grads
from slurm_liquid.policy.dl2.state import FEATURES, SlotState, target_sequence

log = logging.getLogger(__name__)


# -- supervised warm-up ----------------------------------------------------------------------
SHORTEST_FIRST = ("srtf", "srtf-restart", "srtf-oracle")  # teachers whose decisions are learnt in their own rank order


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


def restart_awareness(teacher: Policy, restart_penalty_s: float) -> tuple[float, bool]:
    """`imitation_steps`'s `start_margin_s` and `keep_held` for `teacher` at a restart penalty."""
    return (float(getattr(teacher, "start_margin", 0.0)) * restart_penalty_s,
            bool(getattr(teacher, "resize_margin", 0.0)))


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
