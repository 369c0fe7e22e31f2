"""One pass of the daemon's placement loop: held liquid jobs -> placement -> Slurm -> record.

Each pass reads the truth from Slurm (jobs, nodes); the daemon keeps no state of its own between
passes, so a restart loses nothing. Which jobs it may touch, and what it does with them later, is
decided by the trusted tag in the AdminComment (slurm_liquid.ledger.Tag), never by anything a user
can write.

- held job that fits now: node list (and node count) set, tag and record written, started;
- held job that does not fit: stays held; its lease is renewed, but never beyond [daemon] max_hold_s,
  after which it goes to Slurm's own scheduler with a note;
- placed job that Slurm has not started within a lease of becoming eligible: unpinned and handed to
  Slurm with a note (the daemon never leaves a job pinned where it cannot run);
- shadow mode: the record says where the job would have gone; nothing else changes.

Nothing a job carries can stop the pass: every job's work runs under `_guard`, which catches any
error, counts it, and leaves the job alone for a growing while (its lease runs out and Slurm starts it
as asked), while the other jobs of the pass are placed.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Callable, Mapping

import hostlist

from slurm_liquid.config import Config
from slurm_liquid.daemon.free import free_state, stranded, take_shards, taken_by
from slurm_liquid.daemon.pins import pin_lapsed
from slurm_liquid.daemon.quarantine import PassReport, Quarantine, renew_leases
from slurm_liquid.errors import LiquidError
from slurm_liquid.gcpause import gc_paused
from slurm_liquid.ledger import Placed, Record, Tag, TagState, TrustedSpec, comment_spec, with_tag
from slurm_liquid.ledger.placed import format_placed
from slurm_liquid.loop.place import slurm_shapes
from slurm_liquid.loop.rules import narrower_counts, wider_start
from slurm_liquid.placement import Placement, PlacementRequest
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.placement.index import TreeIndex
from slurm_liquid.placement.slurm_rules import JobViews
from slurm_liquid.slurm import Job, Node, SlurmClient, SlurmError
from slurm_liquid.staging.predict import StagingHints
from slurm_liquid.topology import Topology

log = logging.getLogger(__name__)


class Admitter:
    """Places the jobs job_submit.lua held. `now` is injectable for tests; `promised` names GPUs that
    resizes in flight will take (node -> GPUs), so that a pass does not give them away."""

    def __init__(self, client: SlurmClient, config: Config, topology: Topology | None = None,
                 now: Callable[[], float] = time.time,
                 promised: Callable[[], Mapping[str, int]] = lambda: {}):
        self.client = client
        self.config = config
        self.topology = topology or client.topology()
        self.now = now
        self.promised = promised
        self.quarantine = Quarantine(now)
        self._records: dict[int, Record] = {}
        self._stranded: set[int] = set()
        self._total_gpus = 0
        self._widest = 1
        self._pending_gpu_jobs = 0
        # staging (slurm_liquid/staging): predicted nodes of waiting jobs, data holders as a tie-breaker
        self.staging = StagingHints(config, client, self.topology, now)

    # ------------------------------------------------------------ one pass

    def run_pass(self) -> PassReport:
        with gc_paused():   # 20,000 jobs are many objects and no cycles (slurm_liquid/gcpause.py)
            return self._run_pass()

    def _run_pass(self) -> PassReport:
        report = PassReport()
        self._renewals: dict[int, list[int]] = {}   # lease seconds -> jobs to renew, written at the end
        jobs = self.client.jobs()
        nodes = {n.name: n for n in self.client.nodes()}
        self._total_gpus = sum(n.gpus for n in nodes.values())
        self._widest = max((n.gpus for n in nodes.values()), default=1)
        # every GPU job waiting, held by us or not (plain jobs, requeued ones waiting for their restart)
        self._pending_gpu_jobs = sum(1 for j in jobs if j.is_pending and (j.gpus > 0 or j.shards > 0))
        state = free_state(nodes.values(), jobs, self.now(), self.config, self.promised())
        # each job's view of the nodes (Slurm's rules as a filter), kept current as the pass takes GPUs
        views = JobViews(nodes, state, TreeIndex.of(self.topology))
        tagged = [(j, t) for j in jobs for t in [Tag.parse(j.admin_comment)] if t is not None]
        self._stranded = {j.job_id for j, t in tagged if t.state == TagState.PLACED and j.is_pending
                          and not j.held and stranded(j, nodes)}
        held = []
        for job, tag in tagged:
            why = self.quarantine.why(job.job_id)
            if why:
                report.skipped[job.job_id] = f"left alone after an error: {why}"
                continue
            if job.is_pending and (tag.state == TagState.HELD or job.job_id in self._stranded):
                held.append(job)
            else:
                self._guard(job, report, self._follow_up, job, tag, views, report)
        held.sort(key=lambda j: (j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id))
        if self.config.daemon.mode == "enforce":
            self._place_held(held, views, nodes, report)
        renew_leases(self.client, self._renewals, report)
        try:   # staging: hints for the jobs left waiting (a failure costs the hints, never the pass)
            self.staging.after_pass(jobs, state, report)
        except Exception as exc:  # noqa: BLE001
            report.errors.append(f"staging hints failed: {type(exc).__name__}: {exc}")
        return report

    def _guard(self, job: Job, report: PassReport, action: Callable, *args) -> object:
        """Run one job's work; any error is caught, counted and the job left alone for a while."""
        try:
            return action(*args)
        except Exception as exc:  # noqa: BLE001 -- a job's data must never stop the loop
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            report.failed[job.job_id] = reason
            self.quarantine.add(job.job_id, reason)
            log.warning("job %s: skipped after an error (%s)", job.job_id, reason, exc_info=not isinstance(exc, LiquidError))
            return None

    def _follow_up(self, job: Job, tag: Tag, views: JobViews, report: PassReport) -> None:
        """Jobs the daemon handed on: lapsed holds, shadow records, placements Slurm did not start."""
        if job.is_finished:
            return
        if tag.state == TagState.HELD and not job.is_pending:
            # the lease ran out (daemon down or slow): Slurm started it as asked
            self._write(job, tag.to(TagState.RELEASED, extra={"why": "lease"}),
                        self._record(job).with_fields(note="lease-ran-out:-started-by-Slurm-as-asked"), report)
            report.annotated.append(job.job_id)
        elif tag.state == TagState.SHADOW:
            self._shadow(job, tag, views, report)
        elif tag.state == TagState.PLACED and job.is_pending and not job.held and self.config.daemon.mode == "enforce":
            self._unpin_if_stale(job, tag, report)

    def _unpin_if_stale(self, job: Job, tag: Tag, report: PassReport) -> None:
        """A job pinned by the daemon that Slurm has not started within a lease of becoming eligible is
        blocked by something the daemon did not see: unpin it, so that Slurm places it as it would."""
        if not job.required_nodes:
            return
        if not pin_lapsed(job, tag, self.now(), self.config):   # longer after a resize (daemon/pins.py)
            return
        note = f"not-started-within-{int(self.config.daemon.lease_s)}s-of-placement:-unpinned-for-Slurm"
        self._write(job, tag.to(TagState.RELEASED, extra={"why": "unpinned"}),
                    self._record(job).with_fields(note=note), report, ReqNodeList="")
        report.annotated.append(job.job_id)

    def _place_held(self, held: list[Job], views: JobViews, nodes: Mapping[str, Node], report: PassReport) -> None:
        cfg = self.config.daemon
        requests: list[tuple[Job, PlacementRequest]] = []
        for job in held:
            age = self._age(job)
            # A stranded job is not held by us: handing it to Slurm unplaced would leave it pinned.
            if age >= cfg.max_hold_s and job.job_id not in self._stranded:
                self._guard(job, report, self._start, job, None, f"not-placed-within-{int(cfg.max_hold_s)}s:-given-to-Slurm", report)
                report.released.append(job.job_id)
            elif job.shards:
                self._guard(job, report, self._place_shards, job, nodes, views, age, report)
            elif job.gpus <= 0:
                self._guard(job, report, self._start, job, None, "no-GPUs-asked", report)
            else:
                request = self._guard(job, report, self._request, job)
                if request is not None:
                    requests.append((job, request))
        if requests:
            self._place_gpu_jobs(requests, views, report)

    def _request(self, job: Job) -> PlacementRequest:
        per_node = job.gpus_per_node if job.gpus_per_node and job.gpus % job.gpus_per_node == 0 else None
        return PlacementRequest(str(job.job_id), job.gpus, per_node, job.gpu_type,
                                prefer=self.staging.prefer(job))   # staging: data holders break ties

    def _place_shards(self, job: Job, nodes: Mapping[str, Node], views: JobViews, age: float,
                      report: PassReport) -> None:
        view = views.view(job)
        where = view.shard_node(job.shards) if not view.unreadable else None
        if where:
            self._start(job, {where: 0}, None, report, shards=job.shards)
            views.update(take_shards(views.state, nodes, where, job.shards), [where])
        elif view.unreadable:
            self._start(job, None, view.reason, report)
            report.released.append(job.job_id)
        else:
            self._wait(job, age, report)

    def _place_gpu_jobs(self, requests: list[tuple[Job, PlacementRequest]], views: JobViews,
                        report: PassReport) -> None:
        """A batch placer (the GA) proposes for the batch (the first `batch_max` jobs, in submission
        order) on the common state; each proposal is then checked against what Slurm would accept
        for that job, in submission order, and any that fails, as every job beyond the batch, is
        placed alone on the nodes that job may use."""
        cfg = self.config.daemon
        batch = cfg.placer == "ga" or (cfg.placer == "auto" and len(requests) >= cfg.batch_min)
        proposals: dict[str, Placement] = {}
        if batch:
            try:
                proposals = {p.job: p for p in make_placer("ga", self.topology).place_all(
                    [r for _, r in requests[:cfg.batch_max]], views.state)}
            except Exception as exc:  # noqa: BLE001 -- then every job is placed alone below
                report.errors.append(f"batch placement failed, placing one by one: {type(exc).__name__}: {exc}")
        single = make_placer("liquid", self.topology)
        for job, request in requests:
            self._guard(job, report, self._place_one, job, request, proposals.get(request.job), single, views, report)

    def _place_one(self, job: Job, request: PlacementRequest, proposal: Placement | None, placer,
                   views: JobViews, report: PassReport) -> None:
        age = self._age(job)
        view = views.view(job)
        if view.unreadable:
            self._start(job, None, view.reason, report)
            report.released.append(job.job_id)
            return
        if proposal is None or not proposal.placed or not view.fits(proposal.nodes):
            proposal = placer.place_on(view.snapshot(), request) if view.usable else Placement(request.job, None, view.reason)
        if proposal.placed and age < self.config.daemon.spread_after_s and self._spans_leaves(proposal) \
                and (view.leaf_capacity(request.gpu_type, request.gpus_per_node) >= request.gpus).any():
            # It fits under one leaf switch once that leaf's jobs end: wait for it rather than cross switches.
            proposal = Placement(request.job, None, "waiting for room under one leaf switch")
        if not proposal.placed and view.usable:
            proposal = self._narrower(job, request, view, placer, age) or proposal
        elif proposal.placed and self._pending_gpu_jobs == 1:
            proposal = self._wider(job, request, view, placer) or proposal
        if not proposal.placed:
            self._wait(job, age, report)
            return
        self._start(job, dict(proposal.nodes), None, report)
        views.update(taken_by(views.state, job, proposal.nodes), proposal.nodes)

    def _narrower(self, job: Job, request: PlacementRequest, view, placer, age: float) -> Placement | None:
        """An elastic job (`#LIQUID elastic=MIN:MAX`, from the spec it is placed with) that cannot start
        at the GPUs it asked starts now at the largest count down to MIN that Slurm can express and
        that fits, rather than wait: set before it ever runs, the count costs no restart, and the slot
        grows it later when that pays for its requeue. Under one leaf switch while the job is young,
        as at its asked count. None: the job is rigid, or no count of its range fits now."""
        free = view.cap     # GPUs free on each node the job may use: a bound that skips hopeless shapes
        if not free.size or free.max() < 1:
            return None
        trusted = self._trusted(self._record(job))
        if not trusted.elastic or trusted.low >= request.gpus:
            return None
        young = age < self.config.daemon.spread_after_s
        for count in narrower_counts(request.gpus, trusted.low, int(free.sum())):   # the loop's rule
            for nodes, per_node in slurm_shapes(count, self._widest):
                if int((free >= per_node).sum()) < nodes:
                    continue
                placement = placer.place_on(view.snapshot(), replace(request, gpus=count, gpus_per_node=per_node))
                if placement.placed and not (young and self._spans_leaves(placement)):
                    return placement
        return None

    def _wider(self, job: Job, request: PlacementRequest, view, placer) -> Placement | None:
        """An elastic job that fits its ask and is the only GPU job waiting starts at the largest count
        of its range, up to one node's GPUs, that one node has free (`[elastic] start_wider`): GPUs
        nobody waits for would idle, and growing the job later costs a requeue where this costs
        nothing. One node only: no cross-node sync it did not ask for. Jobs that arrive later start at
        what is left (`_narrower`), and the slot shrinks this one where that pays. None: not such a job,
        or no wider count fits."""
        if not self.config.elastic.start_wider:
            return None
        if request.gpus_per_node not in (None, request.gpus):   # asked for several nodes
            return None
        trusted = self._trusted(self._record(job))
        free = view.cap
        if not trusted.elastic or not free.size:
            return None
        top = wider_start(request.gpus, trusted.high, self._widest, int(free.max()))   # the loop's rule
        for count in range(top or request.gpus, request.gpus, -1):
            placement = placer.place_on(view.snapshot(), replace(request, gpus=count, gpus_per_node=count))
            if placement.placed and len(placement.nodes) == 1:
                return placement
        return None

    def _age(self, job: Job) -> float:
        return self.now() - job.submit_time.timestamp() if job.submit_time else 0.0

    def _spans_leaves(self, placement: Placement) -> bool:
        return len({self.topology.leaf_of(n) for n in placement.nodes or {}}) > 1

    # ------------------------------------------------------------ actions

    def _start(self, job: Job, nodes: dict[str, int] | None, note: str | None, report: PassReport,
               shards: int = 0) -> None:
        """Set the node list, write the tag and record and start the job, in one scontrol update."""
        fields: dict[str, str | int] = {"StartTime": "now"}
        record = self._record(job)
        tag = Tag.parse(job.admin_comment) or Tag(TagState.HELD)
        if nodes and not shards and sum(nodes.values()) != job.gpus:
            # An elastic job started inside its range at another count (`_narrower`): Slurm's GPU count
            # first. If that fails nothing else is written: the job is left alone for a while and, when
            # its lease ends, Slurm starts it as asked.
            self.client.resize(job.job_id, next(iter(nodes.values())), num_nodes=len(nodes),
                               nodes=sorted(nodes), gpu_type=job.gpu_type)
            record = record.with_fields(started=f"{sum(nodes.values())}of{job.gpus}")
        if nodes:
            placed = Placed(nodes, shards).render()
            fields["ReqNodeList"] = hostlist.collect_hostlist(list(nodes))
            fields["NumNodes"] = len(nodes)
            leaves = {self.topology.leaf_of(n) for n in nodes}
            record = record.with_fields(placed=placed, note=f"{len(leaves)}-switch" if len(leaves) > 1 else None)
            # What the daemon will act on later is copied now, from the spec the job was placed with.
            trusted = tag.trusted if tag.state == TagState.PLACED and tag.trusted else self._trusted(record)
            new = tag.to(TagState.PLACED, placed=placed, at=int(self.now()), trusted=trusted)
            report.placed[job.job_id] = placed
        else:
            record = record.with_fields(note=note)
            new = tag.to(TagState.RELEASED, extra={"why": note or "none"})
        self._write(job, new, record, report, **fields)

    def _trusted(self, record: Record) -> TrustedSpec:
        from slurm_liquid.jobspec import JobSpec

        try:
            spec = record.job_spec() if record.spec else JobSpec()
            text = record.spec
        except LiquidError:
            spec, text = JobSpec(), ""
        return TrustedSpec.of(spec, text, self.config.elastic.max_grace_s, max(self._total_gpus, 1))

    def _wait(self, job: Job, age: float, report: PassReport) -> None:
        cfg = self.config.daemon
        report.waiting.append(job.job_id)
        if job.job_id in self._stranded:  # pinned to a dead node: no lease of ours to renew
            return
        ends_in = job.eligible_time.timestamp() - self.now() if job.eligible_time else 0.0
        if ends_in < cfg.lease_s / 2:
            # The daemon's own release at max_hold_s must come before the lease runs out.
            lease = max(min(cfg.lease_s, cfg.max_hold_s - age + 2 * cfg.poll_s), 1)
            self._renewals.setdefault(int(math.ceil(lease)), []).append(job.job_id)

    def _write(self, job: Job, tag: Tag, record: Record, report: PassReport, **fields: str | int) -> None:
        try:
            self.client.update_job(job.job_id, AdminComment=with_tag(job.admin_comment, tag),
                                   Comment=record.render(), **fields)
            log.info("job %s: %s %s", job.job_id, tag.state, record.render(200))
        except SlurmError as exc:
            # The job keeps its lease: it starts as the user asked when the lease ends.
            report.errors.append(f"job {job.job_id}: {exc}")
            log.warning("job %s: update failed: %s", job.job_id, exc)

    def _shadow(self, job: Job, tag: Tag, views: JobViews, report: PassReport) -> None:
        returned = None
        if job.is_running and job.nodes and job.gpus:  # judge it as if its own GPUs were still free
            per_node = max(job.gpus // len(job.nodes), 1)
            returned = dict.fromkeys(job.nodes, per_node)
        view = views.view(job, returned)
        if job.shards:
            where = view.shard_node(job.shards)
            would = Placed({where: 0}, job.shards).render() if where else "wait"
        elif job.gpus and view.usable:
            placement = make_placer("liquid", self.topology).place_on(view.snapshot(), self._request(job))
            would = format_placed(placement.nodes) if placement.placed else "wait"
        else:
            would = "any" if not job.gpus else "wait"
        slurm_put = f"{hostlist.collect_hostlist(list(job.nodes))}" if job.nodes else None
        record = self._record(job).with_fields(would=would, slurm=slurm_put)
        self._write(job, tag.to(TagState.SHADOWED, extra={"would": would}), record, report)
        report.annotated.append(job.job_id)

    # ------------------------------------------------------------ records

    def _record(self, job: Job) -> Record:
        """The job's record: cli_filter's, else one built here from its spec (first time only). The
        user's own Comment text is kept in it."""
        record = Record.parse(job.comment)
        if record is not None:
            return record
        if job.job_id in self._records:
            return self._records[job.job_id]
        from slurm_liquid.admission.filter import Asked, field_of, spec_from, spec_text  # as at submission

        record = Record.of_comment(job.comment).with_fields(mode="server", asked=Asked.of_job(job).describe())
        try:
            from slurm_liquid.asuser import reading_as
            from slurm_liquid.estimate.api import estimate

            script = "" if comment_spec(job.comment) is not None else self.client.batch_script(job.job_id)
            spec = spec_from(script, job.comment)
            record = replace(record, spec=spec_text(spec))
            with reading_as(job.user):          # files the spec names (hf-config): as the job's user
                est = estimate(spec, gpu_type=job.gpu_type, **self.config.estimate.kwargs())
            record = record.with_fields(est=est.summary())
        except (LiquidError, SlurmError) as exc:
            record = record.with_fields(err=field_of(exc))
        if len(self._records) > 10_000:
            self._records.clear()
        self._records[job.job_id] = record
        return record
