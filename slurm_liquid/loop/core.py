"""The round loop: observe -> admit -> allocate -> place -> apply, the same for both back ends."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import AbstractSet, Callable, Iterable, Protocol

from slurm_liquid.loop.place import PlaceStage
from slurm_liquid.loop.rules import Rules
from slurm_liquid.placement.base import Placer
from slurm_liquid.views import Action, ClusterView, Decision, JobView, Policy, SpeedModel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Report:
    """One job's progress report as the back end read it: its measured speed on its current allocation
    (`slurm_liquid.speed.Observation`; None when it reported no speed), steps done and in all when it
    said, and the model it trains (for the speed prior) when the back end knows it."""

    job: str
    observation: object | None = None
    step: int | None = None
    total: int | None = None
    model: str | None = None


class Backend(Protocol):
    """A cluster the loop drives: the simulator or the live Slurm cluster."""

    def observe(self) -> ClusterView | None:
        """The cluster now; None when there is nothing more to schedule (a simulation that ended)."""
        ...

    def reports(self) -> Iterable[Report]:
        """Progress reports that arrived since the last round."""
        ...

    def apply(self, done: "Round") -> None:
        """Make the round's actions so (start, resize, suspend), as far as this back end may."""
        ...


@dataclass
class Round:
    """What one round saw and did, for logs, metrics and tests."""

    view: ClusterView
    decision: Decision
    actions: list[Action] = field(default_factory=list)
    bounded: dict[str, int] = field(default_factory=dict)   # job -> the width its speed is known up to
    kept: dict[str, str] = field(default_factory=dict)      # job -> why its move was not made (limits, placed shape)
    held_back: dict[str, int] = field(default_factory=dict)  # job -> the count its change limits held back


@dataclass
class Loop:
    """One policy, one place stage and one speed model driving a back end round by round."""

    policy: Policy
    place: PlaceStage
    speed: SpeedModel | None = None
    suspends: bool = True   # False: the back end cannot suspend a running job (Slurm, without requeue)
    # The jobs whose moves the back end carries out (None: all). The daemon resizes only its elastic
    # jobs; Slurm starts the others, so planning where they would go is work without an effect.
    applies: Callable[[str], bool] | None = None
    # A running job is resized (grown or shrunk) only when the speed model says the time the change
    # saves it on its remaining steps is at least `payback` x the restart penalty (0: no such check;
    # the reference runs of the simulator).
    payback: float = 0.0
    # Each resize of a running job is weighed again on the nodes the place stage found for it, not only
    # on the fewest nodes its count needs: a growth to 4 GPUs while no node has 4 free lands on 2 + 2,
    # which a job with a costly cross-node sync runs slower than the 2 on one node it holds. False: the
    # simulator's reference runs (the artifact's policies and placements as published).
    weigh_placed: bool = False
    # Dropping a move places the others again, which may put another on a shape that loses in turn:
    # after this many passes the round resizes no running job (it still starts new ones).
    placed_passes: int = 4
    # The rest of the world's rules (`loop.rules`): change limits, who starts waiting jobs, the restart
    # penalty the policy is told. None: none of them (the loop's own tests).
    rules: Rules | None = None
    report_errors: int = 0   # reports the speed model refused by raising (counted, logged, skipped)

    @classmethod
    def under(cls, rules: Rules, policy: Policy, placer: Placer, speed: SpeedModel | None = None,
              applies: Callable[[str], bool] | None = None,
              usable: Callable[[JobView], AbstractSet[str] | None] | None = None, paced: bool = True) -> "Loop":
        """The loop as `rules` say: the daemon's slot, the simulator and DL2's training all build it here.
        The guard and the weighing on placed nodes need a speed model; without one there are none.
        `paced` False: the back end calls the loop once a slot and starts waiting jobs itself (the
        daemon's main loop and placement pass): the policy decides at every call (`Rules.wrap`)."""
        return cls(rules.wrap(policy, paced), PlaceStage(placer, rules.shape, usable=usable), speed,
                   suspends=rules.suspends, applies=applies,
                   payback=rules.guard(policy) if speed is not None else 0.0,
                   weigh_placed=rules.weigh_placed and speed is not None, rules=rules)

    def observe(self, backend: Backend) -> ClusterView | None:
        """The back end's view; its progress reports go into the speed model (when it learns), which
        then fits every job that reported, at once."""
        view = backend.observe()
        if view is not None and self.rules is not None:
            view = self.rules.told(view)
        speed = self.speed
        if view is None or not hasattr(speed, "observe"):
            return view
        for report in backend.reports():
            try:    # a report is its job's claim: one that the model cannot take must not stop the round
                if report.observation is not None:
                    speed.observe(report.observation, report.step, report.total, model=report.model)
                else:
                    speed.record_progress(report.job, report.step, report.total)
            except Exception:  # noqa: BLE001
                self.report_errors += 1
                log.warning("job %s: progress report not taken", report.job, exc_info=True)
        speed.prepare([j for j in view.jobs if j.elastic])   # one batched fit of what may be resized
        return view

    def admit(self, view: ClusterView) -> tuple[ClusterView, dict[str, int]]:
        """Each elastic job bounded by `reach` when the policy decides by speed (Optimus, DL2): a width the
        speed model has not seen is tried one step at a time."""
        reach = getattr(self.speed, "reach", None)
        if reach is None or getattr(self.policy, "speed", None) is None:
            # An oracle knows every width; a policy that does not decide by speed (DRF, FIFO, Tiresias)
            # risks nothing on a width nobody measured.
            return view, {}
        bounded: dict[str, int] = {}
        jobs = []
        by_pass = self.rules is not None and self.rules.starts_by_pass
        for job in view.jobs:
            # a job the placement pass starts is not the policy's to bound
            if job.elastic and not (by_pass and not job.allocation):
                width = max(int(reach(job)), job.min_gpus, 1)
                if width < job.upper:
                    bounded[job.id] = width
                    job = replace(job, max_gpus=width)
            jobs.append(job)
        return (replace(view, jobs=tuple(jobs)) if bounded else view), bounded

    def allocate(self, view: ClusterView, refused: dict[str, str] | None = None,
                 held_back: dict[str, int] | None = None) -> Decision:
        """The policy's counts, each held to what the job allows: an elastic job inside its range, a
        rigid one at its request; where the back end cannot suspend, a 0 keeps a rigid job as it is
        and gives an elastic one its minimum. A count equal to what the job holds is no move. Under
        `rules`, a running job inside its change limits keeps what it holds (why, into `refused`)."""
        refused = {} if refused is None else refused
        held_back = {} if held_back is None else held_back
        jobs = {j.id: j for j in view.jobs}
        moves = []
        # GPUs no job holds: a bound on the starts that can be placed before any resize frees some
        spare = view.total_gpus - sum(j.allocated for j in view.jobs) if self.applies is not None else 0
        for job_id, count in self.policy.decide(view).moves:
            job = jobs.get(job_id)
            if job is None:
                continue
            if self.applies is not None and not self.applies(job_id):
                # A waiting job the back end does not start is still placed (not applied): the GPUs its
                # start takes (the daemon's placement pass, within a second) are not free for a resize.
                # Only while its least could fit: at 20,000 waiting jobs, placing each would cost seconds.
                if job.allocation or job.least > spare:
                    continue
                spare -= job.least
            if count > 0:
                count = min(max(count, job.min_gpus), job.upper) if job.elastic else job.gpus
            elif job.allocation and not self.suspends:
                if not job.elastic:
                    continue
                count = job.min_gpus
            if count and count == job.allocated:
                continue
            if job.allocation and self.rules is not None:
                why = self.rules.change_refused(job, view.now)
                if why is not None:
                    refused[job_id], held_back[job_id] = why, count
                    continue
            if self.payback and job.allocation and not self.pays_back(view, job, count):
                continue
            moves.append((job_id, count))
        return Decision(tuple(moves))

    def pays_back(self, view: ClusterView, job: JobView, count: int) -> bool:
        """Whether moving `job` to `count` GPUs saves it, on the steps it has left, `payback` times what
        the restart costs it (under Slurm every change is a requeue). A growth must speed it up that
        much; a shrink passes only where the job runs that much faster on fewer GPUs (it stopped
        scaling, or it leaves a cross-node sync): a shrink that slows a job costs it its restart and
        its speed, and the GPUs it would free serve jobs that start at what is free (elastic ones
        inside their range) without it. Without a speed model: yes."""
        speed = self.speed
        if speed is None:
            return True
        try:
            saved = speed.remaining_iterations(job) * (speed.iteration_time(job, job.allocated)
                                                       - speed.iteration_time(job, count))
        except Exception:  # noqa: BLE001 -- a model that cannot answer for this job does not block it
            log.warning("job %s: no speed estimate to weigh a resize; allowed", job.id, exc_info=True)
            return True
        return saved >= self.payback * view.restart_penalty_s

    def placed_losses(self, view: ClusterView, actions: Iterable[Action]) -> dict[str, str]:
        """The resizes of running jobs that lose on the nodes they were placed on, each with why: a
        growth the placed shape makes no faster than what the job holds, or (with `payback`) a change
        whose saving on the placed shape is under `payback` x the restart penalty. Only moves whose new
        or current shape spans more nodes than its count needs are weighed here; `allocate` priced the
        others. Needs a speed model that prices a shape (`placed_iteration_time`); otherwise none."""
        timed = getattr(self.speed, "placed_iteration_time", None)
        if timed is None:
            return {}
        jobs = {j.id: j for j in view.jobs}
        # the node size `allocate` priced a count at (a view's node may show fewer: what jobs leave)
        widest = getattr(self.speed, "gpus_per_node", None) or max((n.gpus for n in view.nodes), default=1)
        losses: dict[str, str] = {}
        for action in actions:
            job = jobs.get(action.job)
            if job is None or not job.allocation or not action.allocation:
                continue
            now = [g for _, g in job.allocation if g > 0]
            new = [g for _, g in action.allocation if g > 0]
            if len(new) <= -(-sum(new) // widest) and len(now) <= -(-sum(now) // widest):
                continue
            try:
                before, after = timed(job, now), timed(job, new)
                saved = self.speed.remaining_iterations(job) * (before - after) if self.payback else 0.0
            except Exception:  # noqa: BLE001 -- a model that cannot answer for this job does not block it
                log.warning("job %s: no speed estimate for its placed shape; allowed", job.id, exc_info=True)
                continue
            shape = f"{sum(new)} GPUs on {len(new)} node{'s' * (len(new) > 1)}"
            if sum(new) > sum(now) and after >= before:
                losses[job.id] = f"{shape} run no faster than {sum(now)} on {len(now)} now"
            elif self.payback and saved < self.payback * view.restart_penalty_s:
                losses[job.id] = f"{shape} save {saved:.0f} s, under {self.payback:g} x its restart"
        return losses

    def decide(self, view: ClusterView) -> Round:
        """admit -> allocate -> place on one observed view; applies nothing. With `weigh_placed`, the
        moves that lose on the nodes they were placed on are dropped and the rest placed again, at most
        `placed_passes` times; then, if some still lose, every resize of a running job is dropped."""
        bounded_view, bounded = self.admit(view)
        kept: dict[str, str] = {}
        held_back: dict[str, int] = {}
        decision = self.allocate(bounded_view, kept, held_back)
        actions = self.place.place(view, decision, self.suspends)
        passes = 0
        while self.weigh_placed and (lost := self.placed_losses(view, actions)):
            if passes == self.placed_passes:
                running = {j.id for j in view.jobs if j.allocation}
                lost = {job: f"placements did not settle in {passes} passes" for job, _ in decision.moves
                        if job in running and job not in lost} | lost
            kept.update(lost)
            decision = Decision(tuple(m for m in decision.moves if m[0] not in kept))
            actions = self.place.place(view, decision, self.suspends)
            passes += 1
        return Round(view, decision, actions, bounded, kept, held_back)

    def turn(self, backend: Backend) -> Round | None:
        """One round; None when the back end has nothing more to schedule."""
        view = self.observe(backend)
        if view is None:
            return None
        done = self.decide(view)
        backend.apply(done)
        return done

    def run(self, backend: Backend) -> int:
        """Rounds until the back end ends (a simulation); returns how many ran."""
        self.policy.reset()
        rounds = 0
        while self.turn(backend) is not None:
            rounds += 1
        return rounds
