"""The daemon's adjustment slot: the live cluster as the Slurm back end of the one scheduling loop.

Every slot (`[elastic] slot_s`) the loop the simulator runs (`slurm_liquid.loop`: observe, admit,
allocate, place, apply) runs once here, with the same policy objects (DL2 by default; Optimus, DRF, or
static = no changes). They see every GPU job Slurm knows: running ones with their allocation, pending
ones as demand, and each job's speed from the speed room (`slurm_liquid.speed`), fitted on the job's own
progress reports (its prior until it reports; a width it was never measured at is tried a step at a
time). Only running jobs that opted in (`#LIQUID elastic=MIN:MAX`) and that this
daemon placed are ever changed, and everything about them comes from the trusted tag in AdminComment
(range, checkpoint signal and capped grace, model and batch for the speed prior), copied there at
placement: editing the Comment afterwards changes nothing. A job's progress report is its own claim,
read through `progress.Progress` (bounded, checked). The rules are the loop's (`Rules.daemon`, the
same the simulator runs with `--rules daemon`): changes stay inside the range, at most once per
`min_change_interval_s` and `max_changes_per_hour` times an hour, only when the new GPU count can
be placed as Slurm can express it (the same GPUs on each node, Liquid's placer) and, for a policy that
does not price restarts, when the change pays back its restart (`Rules.guard`). A resize
started in a slot goes on in later turns of the daemon's loop (daemon/resize.py): a slot never waits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from slurm_liquid.config import Config
from slurm_liquid.daemon.journal import Change, Journal
from slurm_liquid.daemon.pins import promised
from slurm_liquid.daemon.resize import Checkpointing, Resizer, current_allocation
from slurm_liquid.errors import LiquidError
from slurm_liquid.gcpause import gc_paused
from slurm_liquid.ledger import Record, Tag, TagState, TrustedSpec
from slurm_liquid.ledger.placed import format_placed
from slurm_liquid.loop import Loop, Report, Round, Rules
from slurm_liquid.placement import ClusterState
from slurm_liquid.placement.base import NodeState
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.placement.slurm_rules import JobViews
from slurm_liquid.views import Action, ClusterView, JobView, NodeView
from slurm_liquid.progress import Progress
from slurm_liquid.speed import MeasuredSpeedModel, Observation, trace_app
from slurm_liquid.slurm import Job, Node, SlurmClient
from slurm_liquid.topology import Topology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElasticJob:
    job: Job
    trusted: TrustedSpec
    low: int
    high: int
    checkpointing: Checkpointing


@dataclass
class SlotReport:
    decided: dict[int, int] = field(default_factory=dict)       # job -> GPU count the policy wants
    resized: dict[int, str] = field(default_factory=dict)       # job -> old->new placement
    skipped: dict[int, str] = field(default_factory=dict)       # job -> why not now
    started: dict[int, str] = field(default_factory=dict)       # job -> resize begun (checkpoint signalled)
    failed: dict[int, str] = field(default_factory=dict)        # job -> the error its handling raised
    bounded: dict[int, int] = field(default_factory=dict)       # job -> widest width its measured speed allows now
    reconciled: list[int] = field(default_factory=list)
    seconds: float = 0.0


def elastic_jobs(jobs: list[Job]) -> dict[int, ElasticJob]:
    """Running jobs this daemon placed whose trusted tag says they are elastic (never the Comment)."""
    found = {}
    for job in jobs:
        tag = Tag.parse(job.admin_comment)
        if not (job.is_running and tag and tag.state == TagState.PLACED and tag.trusted and tag.trusted.elastic):
            continue
        trusted = tag.trusted
        found[job.job_id] = ElasticJob(job, trusted, trusted.low, trusted.high,
                                       Checkpointing(trusted.signal, float(trusted.grace_s)))
    return found


class Adjuster:
    """The live cluster as a back end of the one scheduling loop (`slurm_liquid.loop`), and its slot.

    observe: every GPU job Slurm knows becomes a `JobView` (elastic ones with their trusted range and
    model), and each elastic job's progress report becomes a measured observation for the speed room.
    apply: only running elastic jobs this daemon placed are resized, through the journaled `Resizer`,
    within the change limits; every other action is Slurm's to carry out (it starts pending jobs)."""

    def __init__(self, client: SlurmClient, config: Config, topology: Topology, journal: Journal,
                 progress: Callable[[Job], dict | None] = lambda job: None, now: Callable[[], float] = time.time,
                 speed: MeasuredSpeedModel | None = None):
        self.client = client
        self.config = config
        self.topology = topology
        self.journal = journal
        self.report_of = progress
        self.now = now
        self.resizer = Resizer(client, journal, self._checkpoint_time, now)
        self.placer = make_placer("liquid", topology)
        self.speed = speed if speed is not None else MeasuredSpeedModel(1)
        self._loop: Loop | None = None
        self._jobs: dict[str, Job] = {}
        self._nodes: dict[str, Node] = {}
        self._elastic: dict[int, ElasticJob] = {}
        self._reports: list[Report] = []
        self._measured: set[str] = set()
        self._views: JobViews | None = None
        self._state = ClusterState({})
        self._report: SlotReport | None = None

    def progress(self, job: Job) -> Progress:
        """The job's report as bounded claims; a report that cannot be read is no report."""
        try:
            return Progress.of(self.report_of(job))
        except Exception as exc:  # noqa: BLE001 -- a user's file must not stop the slot
            log.warning("job %s: progress report unreadable: %s", job.job_id, exc)
            return Progress()

    def _checkpoint_time(self, job: Job) -> float | None:
        return self.progress(job).checkpoint_time

    @property
    def loop(self) -> Loop:
        if self._loop is None:
            from slurm_liquid import policy

            made = policy.make_policy(self.config.elastic.policy, self.speed, self.config.elastic.policy_file or None,
                                      world="daemon")
            # the daemon's rules, as the simulator runs them (`loop.rules`); the daemon's own loop paces the
            # slot; its placement pass starts the waiting jobs, which the slot places first (not applied)
            self._loop = Loop.under(Rules.daemon(self.config.elastic), made, self.placer, self.speed,
                                    applies=self._applies, usable=self._usable, paced=False)
        return self._loop

    @property
    def policy(self):
        return None if self.config.elastic.policy == "static" else self.loop.policy

    def run_slot(self) -> SlotReport:
        started = time.monotonic()
        report = SlotReport(reconciled=[c.job_id for c in self.resizer.step()])
        if self.config.elastic.policy == "static" or self.config.daemon.mode == "off":
            return report
        self._report = report
        try:
            with gc_paused():   # as for the pass: many objects, no cycles (slurm_liquid/gcpause.py)
                done = self.loop.turn(self)
        finally:
            self._report = None
        if done is not None:
            report.bounded = {int(k): v for k, v in done.bounded.items() if k.isdigit()}
        report.seconds = time.monotonic() - started
        return report

    # -- the loop's back end -------------------------------------------------------------
    def observe(self) -> ClusterView | None:
        """The cluster now; None when no elastic job runs (nothing this daemon may change)."""
        jobs = self.client.jobs()
        nodes = self.client.nodes()
        self._elastic = elastic_jobs(jobs)
        if not self._elastic:
            return None
        self.speed.gpus_per_node = max((n.gpus for n in nodes), default=1)
        self._nodes = {n.name: n for n in nodes}
        self._views = None
        view = self._view(jobs, nodes)
        # A job being resized is pending for a while: its observations stay until it has ended.
        alive = {str(j.job_id) for j in jobs if not j.is_finished}
        for gone in self._measured - alive:
            self.speed.forget(gone)
        # Every job the policy sees may be asked about (Optimus asks of each): all of them are forgotten
        # when they end, so the speed room never grows with the cluster's history.
        self._measured = (self._measured & alive) | {j.id for j in view.jobs}
        return view

    def reports(self) -> Iterable[Report]:
        reports, self._reports = self._reports, []
        return reports

    def apply(self, done: Round) -> None:
        report = self._report if self._report is not None else SlotReport()
        counts = done.held_back | done.decision.counts   # what the policy wants, limits or not
        placed = {a.job: a for a in done.actions}
        busy = self.resizer.busy()
        plans: list[_Planned] = []
        for job_id, item in self._elastic.items():
            key = str(job_id)
            held = sum(current_allocation(item.job).values())
            report.decided[job_id] = counts.get(key, held)
            if job_id in busy:
                report.skipped[job_id] = "a resize is in progress"
                continue
            if key in done.kept:
                report.skipped[job_id] = done.kept[key]
                continue
            if key not in done.decision.counts:
                continue
            try:
                plan = self._change(item, held, done.decision.counts[key], placed.get(key), report)
            except Exception as exc:  # noqa: BLE001 -- one job must not stop the slot
                self._failed(job_id, exc, report)
                continue
            if plan is not None:
                plans.append(plan)
        if plans:
            self._start(plans, report)

    def _applies(self, job_id: str) -> bool:
        """Only running elastic jobs this daemon placed are moved; the placement pass and Slurm start the others."""
        return job_id.isdigit() and int(job_id) in self._elastic

    def _usable(self, job: JobView) -> frozenset[str] | None:
        """The nodes Slurm would start `job` on (up, partition, GPU type, features): worked out once per
        slot for each set of rules jobs ask (`JobViews`); None when every node of the slot is one."""
        live = self._jobs.get(job.id)
        if live is None:
            return None
        if self._views is None:
            self._views = JobViews(self._nodes, self._state)
        usable = self._views.usable(live)
        # both hold this slot's node names, `usable` a subset: equal sizes mean every node
        return None if len(usable) == len(self._state.nodes) else usable

    def _view(self, jobs: list[Job], nodes: list[Node]) -> ClusterView:
        now = self.now()
        views = []
        self._jobs = {}
        for job in sorted(jobs, key=lambda j: (j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id)):
            if not (job.is_running or job.is_pending) or job.gpus <= 0:
                continue
            item = self._elastic.get(job.job_id)
            trusted = item.trusted if item else None
            progress = self.progress(job) if item else Progress()
            allocation = tuple(current_allocation(job).items()) if job.is_running else ()
            changes: tuple[float, ...] = ()
            if item:
                self._observe(job, trusted, allocation, progress, now)
                changes = tuple(c.started for c in self.journal.recent(job.job_id, now - 3600))
            started = job.start_time.timestamp() if job.start_time and job.is_running else None
            self._jobs[str(job.job_id)] = job
            views.append(JobView(
                id=str(job.job_id), submit_time=job.submit_time.timestamp() if job.submit_time else now,
                gpus=job.gpus, allocation=allocation,
                min_gpus=item.low if item else 1, max_gpus=item.high if item else None,
                attained_gpu_seconds=(now - started) * job.gpus if started else 0.0, restarts=job.restarts,
                app=trace_app(trusted.model) if trusted else None,
                batch_size=trusted.batch if trusted else None,
                epoch=progress.epoch, time_limit_s=job.time_limit_s, started_at=started, gpu_type=job.gpu_type,
                changes=changes))
        # A node's GPUs that no listed job holds (shards, jobs without a GPU count) are not free, nor
        # those pinned jobs and resizes in flight are about to take (daemon/pins.py): a resize planned
        # onto GPUs a requeued job is about to restart on would wait behind it.
        held: dict[str, int] = {}
        for view in views:
            for name, gpus in view.allocation:
                held[name] = held.get(name, 0) + gpus
        taken = promised(jobs, {n.name: n for n in nodes}, now, self.config, self.resizer.in_flight())
        node_views = tuple(NodeView(n.name, max(n.gpus - max(n.gpus_alloc - held.get(n.name, 0), 0)
                                                - taken.get(n.name, 0), 0),
                                    self.topology.leaf_of(n.name) if n.name in self.topology else "s0", n.gpu_type)
                           for n in nodes if n.available)
        # the slot's nodes for the node filter, which reads their names only (JobViews.usable)
        self._state = ClusterState({v.name: NodeState(v.name, v.gpus, 0, v.gpu_type) for v in node_views})
        return ClusterView(now, node_views, tuple(views), self.config.elastic.restart_penalty_s)

    def _observe(self, job: Job, trusted: TrustedSpec, allocation, progress: Progress, now: float) -> None:
        """The job's report as an observation of its speed on what it holds now (a claim: the speed room
        bounds it, and the policy only ever moves the job inside its trusted range). It counts only when
        written on this allocation since it started; the batch is the trusted one. Otherwise only the
        steps count."""
        observation = None
        gpus, nodes = sum(g for _, g in allocation), len(allocation)
        since = job.start_time.timestamp() if job.start_time else None
        if allocation and trusted.batch and progress.measured_on(gpus, nodes, since):
            observation = Observation(job=str(job.job_id), gpus=gpus, nodes=nodes, batch=int(trusted.batch),
                                      samples_per_s=float(progress.samples_per_s), at=now)
        if observation is not None or progress.step is not None:
            self._reports.append(Report(str(job.job_id), observation, progress.step, progress.total, trusted.model))

    def _change(self, item: ElasticJob, held: int, target: int, action: Action | None,
                report: SlotReport) -> "_Planned | None":
        """The resize to start for one job, or None (the reason in `report`)."""
        job = item.job
        if action is None or not action.allocation or action.gpus == held:
            report.skipped[job.job_id] = f"{target} GPUs cannot be placed now"
            return
        target = action.gpus     # the count as placed: the largest below the policy's that Slurm can express
        if not item.low <= target <= item.high:
            report.skipped[job.job_id] = f"{target} GPUs is outside the job's range {item.low}:{item.high}"
            return
        # the change limits are the loop's (`Rules.change_refused`, reasons in `Round.kept`)
        new = dict(action.allocation)
        step = f"{format_placed(current_allocation(job))}->{format_placed(new)}"
        if self.config.daemon.mode != "enforce":
            record = Record.of_comment(job.comment).with_fields(would_resize=f"{held}to{target}")
            try:
                self.client.update_job(job.job_id, Comment=record.render())
            except LiquidError as exc:
                log.warning("job %s: shadow note failed: %s", job.job_id, exc)
            report.skipped[job.job_id] = f"shadow: would resize {step}"
            return
        # The record says what the decision knew of the job's speed: measured, or which prior.
        source = self.speed.source(str(job.job_id))
        known = "measured" if source.startswith("measured") else source
        return _Planned(item, new, step, f"{self.config.elastic.policy}-slot/speed:{known}")

    def _start(self, plans: list["_Planned"], report: SlotReport) -> None:
        """Every planned resize in the journal in one transaction, then the signals in the slot's order
        (each with its steps as `Resizer.start` sends them) and their marks in another transaction."""
        changes: list[tuple[_Planned, Change]] = []
        with self.journal.batch():
            for plan in plans:
                job = plan.item.job
                try:
                    changes.append((plan, self.resizer.plan(job, plan.new, plan.item.checkpointing, plan.why)))
                except Exception as exc:  # noqa: BLE001 -- one job must not stop the slot
                    self._failed(job.job_id, exc, report)
        with self.journal.batch():
            for plan, change in changes:
                job = plan.item.job
                try:
                    change = self.resizer.signal(job, change, plan.item.checkpointing)
                except Exception as exc:  # noqa: BLE001 -- its row stays planned: the next step closes it
                    self._failed(job.job_id, exc, report)
                    continue
                if change.phase == "done":
                    report.resized[job.job_id] = plan.step
                elif change.finished:
                    report.skipped[job.job_id] = f"{change.phase}: {change.note}"
                else:
                    report.started[job.job_id] = f"{plan.step}, {change.phase}"

    @staticmethod
    def _failed(job_id: int, exc: Exception, report: SlotReport) -> None:
        report.failed[job_id] = f"{type(exc).__name__}: {str(exc)[:200]}"
        log.warning("job %s: skipped in this slot after an error: %s", job_id, exc,
                    exc_info=not isinstance(exc, LiquidError))


@dataclass(frozen=True)
class _Planned:
    """A resize the slot will start: checked against the job's range and the change limits."""

    item: ElasticJob
    new: dict[str, int]
    step: str       # old->new placement, for the report
    why: str
