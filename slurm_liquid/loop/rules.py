"""The world a policy's counts are carried out in, as data: one set of rules for the daemon, the
simulator, DL2's training and every comparison.

A `Rules` value says how the one loop (`loop.core.Loop`) turns a policy's GPU counts into changes:

| rule | `Rules.reference()` (the Pollux artifact's simulator) | `Rules.daemon(config.elastic)` (the live daemon) |
|---|---|---|
| shape of a multi-node job | any GPUs per node (FREE) | Slurm's: the same on every node, a job at its ask in its submitted `--nodes` (SUBMITTED) |
| a running job suspended | yes | never (a requeue is a resize, not a pause) |
| restart guard (`payback`) | none | the policy's own (`guard`): DRF and Optimus 2.0, DL2 none (it prices restarts); `[elastic] payback` overrides |
| a resize weighed on its placed nodes | no | yes |
| who starts a waiting job | the policy, every round | the placement pass, every round: at its ask, narrower when only that fits, wider when it waits alone (`start_wider`) |
| when the policy decides | every round | every `slot_s` |
| change limits | none | `min_change_interval_s` since the job started or last changed, `max_changes_per_hour` |
| the restart penalty the policy is told | the simulated one | `restart_penalty_s` |

The daemon builds its slot from `Rules.daemon`, the simulator runs `--rules daemon` from the same
function, DL2 trains under it, and the live replay's simulated arms are `slurm-liquid simulate --rules
daemon`: no copy of a rule lives anywhere else. Which job's view carries which history: `JobView.changes`
(resize start times, from the daemon's journal or the simulator) and `JobView.started_at`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from slurm_liquid.loop.place import Shape
from slurm_liquid.views import ClusterView, Decision, JobView, Policy

if TYPE_CHECKING:
    from slurm_liquid.config import ElasticConfig

RULES = ("reference", "daemon")
HOUR_S = 3600.0


@dataclass(frozen=True)
class Rules:
    """How a policy's counts become changes (see the module's table)."""

    name: str = "reference"
    shape: Shape = Shape.FREE
    suspends: bool = True
    payback: float | None = 0.0        # None: the policy's own guard (`guard`)
    weigh_placed: bool = False
    starts_by_pass: bool = False       # waiting jobs start in the placement pass, not by the policy
    start_wider: bool = False
    slot_s: float | None = None        # None: the policy decides every round
    min_change_interval_s: float = 0.0
    max_changes_per_hour: int | None = None
    restart_penalty_s: float | None = None   # None: the back end's

    @classmethod
    def reference(cls) -> "Rules":
        return cls()

    @classmethod
    def daemon(cls, elastic: "ElasticConfig") -> "Rules":
        """The daemon's rules under an `[elastic]` section (`config.ElasticConfig`)."""
        return cls("daemon", Shape.SUBMITTED, suspends=False, payback=elastic.payback, weigh_placed=True,
                   starts_by_pass=True, start_wider=elastic.start_wider, slot_s=elastic.slot_s,
                   min_change_interval_s=elastic.min_change_interval_s,
                   max_changes_per_hour=elastic.max_changes_per_hour, restart_penalty_s=elastic.restart_penalty_s)

    @classmethod
    def named(cls, name: str, elastic: "ElasticConfig | None" = None) -> "Rules":
        from slurm_liquid.errors import UsageError

        if name == "reference":
            return cls.reference()
        if name == "daemon":
            from slurm_liquid.config import ElasticConfig

            return cls.daemon(elastic or ElasticConfig())
        raise UsageError(f"unknown rules {name!r} (known: {', '.join(RULES)})")

    def guard(self, policy: Policy) -> float:
        """The restart guard a policy runs under: the rules' `payback` when set, else the policy's own
        (`payback` on the policy: DRF and Optimus 2.0; DL2, which prices every restart itself, 0)."""
        if self.payback is not None:
            return float(self.payback)
        return float(getattr(policy, "payback", 0.0))

    def change_refused(self, job: JobView, now: float) -> str | None:
        """Why the running `job` may not be resized now (None: it may): it started, or last changed,
        under `min_change_interval_s` ago, or it changed `max_changes_per_hour` times in the last hour."""
        recent = [t for t in job.changes if t > now - HOUR_S]
        if recent and now - recent[-1] < self.min_change_interval_s:
            return "changed too recently"
        if self.max_changes_per_hour is not None and len(recent) >= self.max_changes_per_hour:
            return "hourly change limit"
        if job.started_at is not None and now - job.started_at < self.min_change_interval_s:
            return "started too recently"
        return None

    def wrap(self, policy: Policy, paced: bool = True) -> Policy:
        """The policy as these rules call it: itself, or, where the placement pass starts jobs and the
        policy decides every `slot_s`, a `SlotPolicy` around it. `paced` False: the caller calls once a
        slot (the daemon's main loop), so the policy decides at every call."""
        if not (self.starts_by_pass or self.slot_s):
            return policy
        return SlotPolicy(policy, self if paced else replace(self, slot_s=None))

    def told(self, view: ClusterView) -> ClusterView:
        """The view with the restart penalty the policy is told (the daemon's configured one)."""
        if self.restart_penalty_s is None or view.restart_penalty_s == self.restart_penalty_s:
            return view
        return replace(view, restart_penalty_s=self.restart_penalty_s)


def narrower_counts(ask: int, low: int, free: int) -> range:
    """The counts an elastic job that cannot start at its `ask` tries instead, largest first, down to
    its minimum `low` (`free`: the GPUs free where it may run): set before it ever runs, the count costs
    no restart, and the slot grows it later when that pays."""
    return range(min(ask - 1, free), low - 1, -1)


def wider_start(ask: int, high: int, widest: int, most_free: int) -> int | None:
    """The count an elastic job that waits alone, asked for less than a node and fits, starts at
    instead of its ask (`start_wider`): the largest of its range, up to one node's GPUs (`widest`),
    that one node has free (`most_free`); None: no wider count. GPUs nobody waits for would idle, and
    growing the job later costs a requeue where this costs nothing; one node only, no cross-node sync
    it did not ask for."""
    if ask >= widest:
        return None
    count = min(high, widest, most_free)
    return count if count > ask else None


class SlotPolicy:
    """A policy as the daemon's rules call it (`Rules.wrap`), for a back end that is not the daemon:

    - every round, each waiting job starts at the count the placement pass starts it at (its ask;
      wider, by `wider_start`, when it is the only one waiting; the place stage goes narrower when only
      that fits), as the daemon's `Admitter` and Slurm do within about a second of GPUs freeing;
    - every `slot_s` (on the clock from the first round), the policy decides the running jobs' counts.
    The loop then applies the change limits (`Rules.change_refused`) and the guard."""

    def __init__(self, policy: Policy, rules: Rules) -> None:
        self.policy = policy
        self.rules = rules
        self.name = policy.name
        self.speed = getattr(policy, "speed", None)   # the loop bounds unmeasured widths for speed policies
        self.payback = getattr(policy, "payback", 0.0)
        self.next_slot = 0.0

    def reset(self) -> None:
        self.policy.reset()
        self.next_slot = 0.0

    def decide(self, view: ClusterView) -> Decision:
        moves = [(j.id, self.start_count(view, j)) for j in view.jobs if not j.allocation]
        running = [j for j in view.jobs if j.allocation]
        slot = self.rules.slot_s
        if not running or (slot and view.now + 1e-9 < self.next_slot):
            return Decision(tuple(moves))
        if slot:
            self.next_slot = (view.now // slot + 1) * slot
        wanted = self.policy.decide(view).counts
        moves += [(j.id, wanted[j.id]) for j in running if j.id in wanted]
        return Decision(tuple(moves))

    def start_count(self, view: ClusterView, job: JobView) -> int:
        if not self.rules.start_wider or not job.elastic or sum(1 for j in view.jobs if not j.allocation) != 1:
            return job.gpus
        widest = max((n.gpus for n in view.nodes), default=1)
        most = max((n.gpus_free for n in view.free_state().nodes.values()), default=0)
        return wider_start(job.gpus, job.upper, widest, most) or job.gpus

