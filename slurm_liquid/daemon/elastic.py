"""The daemon's adjustment slot: the live cluster as a `ClusterView`, the policy's answer, resizes.

Every slot (`[elastic] slot_s`) the same policy objects the simulator drives (DL2 by default; Optimus,
DRF, or static = no changes) see every GPU job Slurm knows: running ones with their allocation,
pending ones as demand. Only running jobs that opted in (`#LIQUID elastic=MIN:MAX`) and that this
daemon placed are ever changed, and everything about them comes from the trusted tag in AdminComment
(range, checkpoint signal and capped grace, model and batch for the speed prior), copied there at
placement: editing the Comment afterwards changes nothing. A job's progress report is its own claim,
read through `progress.Progress` (bounded, checked). Changes stay inside the range, at most once per
`min_change_interval_s` and `max_changes_per_hour` times an hour, and only when the new GPU count can
be placed as Slurm can express it (the same GPUs on each node), with the Liquid placer. A resize
started in a slot goes on in later turns of the daemon's loop (daemon/resize.py): a slot never waits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from slurm_liquid.config import Config
from slurm_liquid.daemon.journal import Journal
from slurm_liquid.daemon.resize import Checkpointing, Resizer, current_allocation, uniform_placement_sizes
from slurm_liquid.errors import LiquidError
from slurm_liquid.ledger import Record, Tag, TagState, TrustedSpec
from slurm_liquid.ledger.placed import format_placed
from slurm_liquid.placement import ClusterState, PlacementRequest
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.policy.base import ClusterView, JobView, NodeView
from slurm_liquid.progress import Progress
from slurm_liquid.slurm import Job, Node, SlurmClient
from slurm_liquid.topology import Topology

log = logging.getLogger(__name__)
# Catalog models whose throughput the Pollux traces measured (the speed model the policies consult).
TRACE_APPS = {"resnet18": "cifar10", "resnet50": "imagenet", "bert-base": "bert", "deepspeech2": "deepspeech2",
              "ncf": "ncf", "yolov3": "yolov3"}


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


class LiveSpeedModel:
    """Step times from the measured traces where the job's model was measured, else linear scaling;
    remaining steps from the job's own progress reports."""

    def __init__(self, gpus_per_node: int, remaining: Mapping[str, float]):
        from slurm_liquid.sim.oracle import OracleSpeedModel

        self.oracle = OracleSpeedModel(gpus_per_node)
        self.remaining = remaining

    def iteration_time(self, job: JobView, gpus: int) -> float:
        if job.app and job.batch_size:
            # More GPUs than the batch can feed were never measured: a step is no faster than on the
            # widest measured width below.
            for width in range(max(gpus, 1), 0, -1):
                try:
                    return self.oracle.iteration_time(job, width)
                except (LiquidError, KeyError, ValueError, LookupError):
                    continue
        return 1.0 / max(gpus, 1)

    def remaining_iterations(self, job: JobView) -> float:
        if job.id in self.remaining:
            return self.remaining[job.id]
        if job.app and job.batch_size:
            return self.oracle.remaining_iterations(job)
        return 1000.0


class Adjuster:
    def __init__(self, client: SlurmClient, config: Config, topology: Topology, journal: Journal,
                 progress: Callable[[Job], dict | None] = lambda job: None, now: Callable[[], float] = time.time):
        self.client = client
        self.config = config
        self.topology = topology
        self.journal = journal
        self.report_of = progress
        self.now = now
        self.resizer = Resizer(client, journal, self._checkpoint_time, now)
        self.placer = make_placer("liquid", topology)
        self._policy = None
        self._speed: LiveSpeedModel | None = None   # refreshed every slot from the progress reports

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
    def policy(self):
        if self._policy is None and self.config.elastic.policy != "static":
            from slurm_liquid.policy import make_policy

            self._policy = make_policy(self.config.elastic.policy, None, self._speed,
                                       self.config.elastic.policy_file or None)
        return self._policy

    def run_slot(self) -> SlotReport:
        started = time.monotonic()
        report = SlotReport(reconciled=[c.job_id for c in self.resizer.step()])
        if self.config.elastic.policy == "static" or self.config.daemon.mode == "off":
            return report
        jobs = self.client.jobs()
        nodes = self.client.nodes()
        elastic = elastic_jobs(jobs)
        if not elastic:
            return report
        view, progress = self._view(jobs, nodes, elastic)
        self._speed = LiveSpeedModel(max((n.gpus for n in nodes), default=1),
                                     {str(k): p.remaining for k, p in progress.items() if p.remaining is not None})
        if self._policy is not None and getattr(self._policy, "speed", None) is not None:
            self._policy.speed = self._speed   # fresh progress for a policy built in an earlier slot
        actions = self.policy.decide(view)
        wanted = {int(a.job): a.gpus for a in actions if str(a.job).isdigit()}
        busy = self.resizer.busy()
        for job_id, item in elastic.items():
            if job_id in busy:
                report.skipped[job_id] = "a resize is in progress"
                continue
            try:
                nodes = self._decide(item, wanted, nodes, report)
            except Exception as exc:  # noqa: BLE001 -- one job must not stop the slot
                report.failed[job_id] = f"{type(exc).__name__}: {str(exc)[:200]}"
                log.warning("job %s: skipped in this slot after an error: %s", job_id, exc,
                            exc_info=not isinstance(exc, LiquidError))
        report.seconds = time.monotonic() - started
        return report

    def _decide(self, item: ElasticJob, wanted: Mapping[int, int], nodes: list[Node],
                report: SlotReport) -> list[Node]:
        """One job's target within its trusted range; the nodes as the next job must see them."""
        job_id = item.job.job_id
        held = sum(current_allocation(item.job).values())
        target = min(max(int(wanted.get(job_id, held)), item.low), item.high)
        report.decided[job_id] = target
        if target == held:
            return nodes
        new = self._change(item, held, target, nodes, report)
        if new is None:
            return nodes
        old = current_allocation(item.job)   # the next job of this slot must see where this one goes
        return [replace(n, gpus_alloc=max(n.gpus_alloc - old.get(n.name, 0), 0) + new.get(n.name, 0)) for n in nodes]

    def _view(self, jobs: list[Job], nodes: list[Node], elastic: Mapping[int, ElasticJob]
              ) -> tuple[ClusterView, dict[int, Progress]]:
        now = self.now()
        views, reports = [], {}
        for job in sorted(jobs, key=lambda j: (j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id)):
            if not (job.is_running or job.is_pending) or job.gpus <= 0:
                continue
            item = elastic.get(job.job_id)
            trusted = item.trusted if item else None
            report = self.progress(job) if item else Progress()
            if item:
                reports[job.job_id] = report
            started = job.start_time.timestamp() if job.start_time and job.is_running else None
            views.append(JobView(
                id=str(job.job_id), submit_time=job.submit_time.timestamp() if job.submit_time else now,
                gpus=job.gpus, allocation=tuple(current_allocation(job).items()) if job.is_running else (),
                min_gpus=item.low if item else 1, max_gpus=item.high if item else None,
                attained_gpu_seconds=(now - started) * job.gpus if started else 0.0, restarts=job.restarts,
                app=TRACE_APPS.get(trusted.model) if trusted else None,
                batch_size=trusted.batch if trusted else None,
                epoch=report.epoch, time_limit_s=job.time_limit_s, started_at=started))
        node_views = tuple(NodeView(n.name, n.gpus, self.topology.leaf_of(n.name) if n.name in self.topology else "s0")
                           for n in nodes if n.available)
        return ClusterView(now, node_views, tuple(views), self.config.elastic.restart_penalty_s), reports

    def _change(self, item: ElasticJob, held: int, target: int, nodes: list[Node], report: SlotReport) -> dict[str, int] | None:
        job, cfg = item.job, self.config.elastic
        now = self.now()
        recent = self.journal.recent(job.job_id, now - 3600)
        if recent and now - recent[-1].started < cfg.min_change_interval_s:
            report.skipped[job.job_id] = "changed too recently"
            return None
        if len(recent) >= cfg.max_changes_per_hour:
            report.skipped[job.job_id] = "hourly change limit"
            return None
        if job.start_time and now - job.start_time.timestamp() < cfg.min_change_interval_s:
            report.skipped[job.job_id] = "started too recently"
            return None
        new = self._place(job, target, nodes)
        if new is None:
            report.skipped[job.job_id] = f"{target} GPUs cannot be placed now"
            return None
        step = f"{format_placed(current_allocation(job))}->{format_placed(new)}"
        if self.config.daemon.mode != "enforce":
            record = Record.of_comment(job.comment).with_fields(would_resize=f"{held}to{target}")
            try:
                self.client.update_job(job.job_id, Comment=record.render())
            except LiquidError as exc:
                log.warning("job %s: shadow note failed: %s", job.job_id, exc)
            report.skipped[job.job_id] = f"shadow: would resize {step}"
            return None
        change = self.resizer.start(job, new, item.checkpointing, why=f"{self.config.elastic.policy}-slot")
        if change.phase == "done":
            report.resized[job.job_id] = step
            return new
        if change.finished:
            report.skipped[job.job_id] = f"{change.phase}: {change.note}"
            return None
        report.started[job.job_id] = f"{step}, {change.phase}"
        return new

    def _place(self, job: Job, gpus: int, nodes: list[Node]) -> dict[str, int] | None:
        """A placement of `gpus` the same on every node, counting the job's own GPUs as free."""
        own = current_allocation(job)
        state = ClusterState.from_nodes(nodes)
        state = ClusterState({name: replace(n, gpus_free=min(n.gpus, n.gpus_free + own.get(name, 0)))
                              for name, n in state.nodes.items()})
        per_node_max = max((n.gpus for n in nodes), default=0)
        for count, per_node in uniform_placement_sizes(gpus, per_node_max):
            placement = self.placer.place(PlacementRequest(str(job.job_id), gpus, per_node, job.gpu_type), state)
            if placement.placed:
                return dict(placement.nodes)
        return None
