"""One pass of the daemon's placement loop: held liquid jobs -> placement -> Slurm -> record.

Each pass reads the truth from Slurm (jobs, nodes); the daemon keeps no state of its own between
passes, so a restart loses nothing. Which jobs it may touch is decided by the trusted tag in the
AdminComment (written inside slurmctld by job_submit.lua), never by anything a user can write.

- held job that fits now: node list (and node count) set, record written, started (StartTime=now);
- held job that does not fit: stays held; its lease is renewed, but never beyond [daemon] max_hold_s,
  after which it goes to Slurm's own scheduler with a note;
- shadow mode: the record says where the job would have gone; nothing else changes.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

import hostlist

from slurm_liquid.config import Config
from slurm_liquid.errors import LiquidError
from slurm_liquid.placement import ClusterState, Placement, PlacementRequest
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.record import Record, Tag, with_tag
from slurm_liquid.slurm import Job, Node, SlurmClient, SlurmError
from slurm_liquid.staging.predict import StagingHints
from slurm_liquid.topology import Topology

log = logging.getLogger(__name__)


def format_placed(nodes: Mapping[str, int]) -> str:
    """{gpu01: 4, gpu02: 4, gpu03: 1} -> 'gpu[01-02]:4+gpu03:1' (one word, for the records)."""
    by_count: dict[int, list[str]] = {}
    for name, gpus in nodes.items():
        by_count.setdefault(gpus, []).append(name)
    return "+".join(f"{hostlist.collect_hostlist(names)}:{count}" for count, names in sorted(by_count.items(), reverse=True))


def parse_placed(text: str) -> dict[str, int]:
    nodes: dict[str, int] = {}
    for group in filter(None, (text or "").split("+")):
        names, _, count = group.rpartition(":")
        if names and count.isdigit():
            for name in hostlist.expand_hostlist(names):
                nodes[name] = int(count)
    return nodes


@dataclass
class PassReport:
    placed: dict[int, str] = field(default_factory=dict)      # job -> where
    waiting: list[int] = field(default_factory=list)
    renewed: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)         # held too long: Slurm's scheduler takes it
    annotated: list[int] = field(default_factory=list)        # shadow records, lapsed holds
    errors: list[str] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return bool(self.placed or self.released or self.annotated)


class Admitter:
    """Places the jobs job_submit.lua held. `now` is injectable for tests."""

    def __init__(self, client: SlurmClient, config: Config, topology: Topology | None = None,
                 now: Callable[[], float] = time.time):
        self.client = client
        self.config = config
        self.topology = topology or client.topology()
        self.now = now
        self._records: dict[int, Record] = {}
        self._stranded: set[int] = set()
        # staging (slurm_liquid/staging): predicted nodes of waiting jobs, data holders as a tie-breaker
        self.staging = StagingHints(config, client, self.topology, now)

    # ------------------------------------------------------------ one pass

    def run_pass(self) -> PassReport:
        report = PassReport()
        jobs = self.client.jobs()
        nodes = {n.name: n for n in self.client.nodes()}
        state = self._free_state(nodes.values(), jobs)
        tagged = [(j, Tag.parse(j.admin_comment)) for j in jobs]
        # Held for placement; or placed earlier and requeued (node failure) onto a node that is gone now.
        self._stranded = {j.job_id for j, t in tagged if t and t.state == "placed" and j.is_pending
                          and not j.held and _stranded(j, nodes)}
        held = sorted((j for j, t in tagged if t and j.is_pending and (t.state == "held" or j.job_id in self._stranded)),
                      key=lambda j: (j.submit_time.timestamp() if j.submit_time else 0.0, j.job_id))
        for job, tag in tagged:
            if tag and tag.state == "held" and not job.is_pending and not job.is_finished:
                # the lease ran out (daemon down or slow): Slurm started it as asked
                self._write(job, Tag("released", extra={"why": "lease"}),
                            self._record(job).with_fields(note="lease-ran-out:-started-by-Slurm-as-asked"), report)
                report.annotated.append(job.job_id)
            elif tag and tag.state == "shadow" and not job.is_finished:
                self._shadow(job, state, nodes, report)
        if self.config.daemon.mode == "enforce":
            self._place_held(held, state, nodes, report)
        self.staging.after_pass(jobs, state, report)   # staging: hints for the jobs left waiting
        return report

    def _place_held(self, held: list[Job], state: ClusterState, nodes: Mapping[str, Node],
                    report: PassReport) -> None:
        cfg = self.config.daemon
        requests: list[PlacementRequest] = []
        for job in held:
            age = self.now() - job.submit_time.timestamp() if job.submit_time else 0.0
            # A stranded job is not held by us: handing it to Slurm unplaced would leave it pinned.
            if age >= cfg.max_hold_s and job.job_id not in self._stranded:
                self._start(job, None, f"not-placed-within-{int(cfg.max_hold_s)}s:-given-to-Slurm", report)
                report.released.append(job.job_id)
            elif job.shards:
                where = self._shard_node(job, nodes, state)
                if where:
                    state = self._take_shards(state, nodes, where, job.shards)
                    self._start(job, {where: 0}, None, report, shards=job.shards)
                else:
                    self._wait(job, age, report)
            elif job.gpus <= 0:
                self._start(job, None, "no-GPUs-asked", report)
            else:
                per_node = job.gpus_per_node if job.gpus_per_node and job.gpus % job.gpus_per_node == 0 else None
                requests.append(PlacementRequest(str(job.job_id), job.gpus, per_node, job.gpu_type,
                                                 prefer=self.staging.prefer(job)))   # staging: data holders
        if not requests:
            return
        batch = cfg.placer == "ga" or (cfg.placer == "auto" and len(requests) >= cfg.batch_min)
        placer = make_placer("ga" if batch else "liquid", self.topology)
        by_id = {str(j.job_id): j for j in held}
        ages = {str(j.job_id): self.now() - j.submit_time.timestamp() if j.submit_time else 0.0 for j in held}
        placements: list[Placement] = []
        # A job that fits under one leaf switch waits (up to spread_after_s) rather than cross switches:
        # drop such placements and place the others again without them.
        while requests:
            try:
                attempt = placer.place_all(requests, state)
            except (ValueError, KeyError) as exc:  # e.g. a GPU type no node has
                report.errors.append(f"placement failed: {exc}")
                attempt = [Placement(r.job, None, str(exc)) for r in requests]
            spread = {p.job for p, r in zip(attempt, requests)
                      if p.placed and ages[p.job] < cfg.spread_after_s and self._spans_leaves(p)
                      and self._fits_one_leaf(r, state)}
            if not spread:
                placements += attempt
                break
            placements += [Placement(job, None, "waiting for room under one leaf switch") for job in sorted(spread)]
            requests = [r for r in requests if r.job not in spread]
        for placement in placements:
            job = by_id[placement.job]
            if placement.placed:
                self._start(job, dict(placement.nodes), None, report)
            else:
                self._wait(job, ages[placement.job], report)

    def _spans_leaves(self, placement: Placement) -> bool:
        return len({self.topology.leaf_of(n) for n in placement.nodes or {}}) > 1

    def _fits_one_leaf(self, request: PlacementRequest, state: ClusterState) -> bool:
        """Could the job run under one leaf switch once that leaf's jobs end (its total GPUs)?"""
        for switch in self.topology.switches:
            under = [state.nodes[n] for n in self.topology.nodes_under(switch)
                     if n in state.nodes and self.topology.leaf_of(n) == switch]
            if request.gpu_type:
                under = [n for n in under if n.gpu_type == request.gpu_type]
            if request.gpus_per_node:
                if sum(n.gpus >= request.gpus_per_node for n in under) * request.gpus_per_node >= request.gpus:
                    return True
            elif sum(n.gpus for n in under) >= request.gpus:
                return True
        return False

    # ------------------------------------------------------------ actions

    def _start(self, job: Job, nodes: dict[str, int] | None, note: str | None, report: PassReport,
               shards: int = 0) -> None:
        """Set the node list, write the records and start the job, in one scontrol update."""
        fields: dict[str, str | int] = {"StartTime": "now"}
        record = self._record(job)
        if nodes:
            placed = f"{next(iter(nodes))}:shard{shards}" if shards else format_placed(nodes)
            fields["ReqNodeList"] = hostlist.collect_hostlist(list(nodes))
            fields["NumNodes"] = len(nodes)
            leaves = {self.topology.leaf_of(n) for n in nodes}
            record = record.with_fields(placed=placed, note=f"{len(leaves)}-switch" if len(leaves) > 1 else None)
            tag = Tag("placed", placed, {"at": str(int(self.now()))})
            report.placed[job.job_id] = placed
        else:
            record = record.with_fields(note=note)
            tag = Tag("released", extra={"why": note or "none"})
        self._write(job, tag, record, report, **fields)

    def _wait(self, job: Job, age: float, report: PassReport) -> None:
        cfg = self.config.daemon
        report.waiting.append(job.job_id)
        if job.job_id in self._stranded:  # pinned to a dead node: no lease of ours to renew
            return
        ends_in = job.eligible_time.timestamp() - self.now() if job.eligible_time else 0.0
        if ends_in < cfg.lease_s / 2:
            # The daemon's own release at max_hold_s must come before the lease runs out.
            lease = max(min(cfg.lease_s, cfg.max_hold_s - age + 2 * cfg.poll_s), 1)
            try:
                self.client.update_job(job.job_id, StartTime=f"now+{int(math.ceil(lease))}")
                report.renewed.append(job.job_id)
            except SlurmError as exc:
                report.errors.append(f"job {job.job_id}: renewing its hold failed: {exc}")

    def _write(self, job: Job, tag: Tag, record: Record, report: PassReport, **fields: str | int) -> None:
        try:
            self.client.update_job(job.job_id, AdminComment=with_tag(job.admin_comment, tag),
                                   Comment=record.render(), **fields)
            log.info("job %s: %s %s", job.job_id, tag.state, record.render(200))
        except SlurmError as exc:
            # The job keeps its lease: it starts as the user asked when the lease ends.
            report.errors.append(f"job {job.job_id}: {exc}")
            log.warning("job %s: update failed: %s", job.job_id, exc)

    def _shadow(self, job: Job, state: ClusterState, nodes: Mapping[str, Node], report: PassReport) -> None:
        if job.is_running and job.nodes and job.gpus:  # judge it as if its own GPUs were still free
            per_node = max(job.gpus // len(job.nodes), 1)
            state = ClusterState({name: replace(n, gpus_free=min(n.gpus, n.gpus_free + per_node))
                                  if name in job.nodes else n for name, n in state.nodes.items()})
        if job.shards:
            where = self._shard_node(job, nodes, state)
            would = f"{where}:shard{job.shards}" if where else "wait"
        elif job.gpus:
            per_node = job.gpus_per_node if job.gpus_per_node and job.gpus % job.gpus_per_node == 0 else None
            placement = make_placer("liquid", self.topology).place(
                PlacementRequest(str(job.job_id), job.gpus, per_node, job.gpu_type), state)
            would = format_placed(placement.nodes) if placement.placed else "wait"
        else:
            would = "any"
        slurm_put = f"{hostlist.collect_hostlist(list(job.nodes))}" if job.nodes else None
        record = self._record(job).with_fields(would=would, slurm=slurm_put)
        self._write(job, Tag("shadowed", extra={"would": would}), record, report)
        report.annotated.append(job.job_id)

    # ------------------------------------------------------------ what is free

    def _free_state(self, nodes: Iterable[Node], jobs: Iterable[Job]) -> ClusterState:
        """Free GPUs, less those promised to jobs this daemon started that Slurm has not run yet.

        A promise lapses after one lease: a job Slurm could not start by then is blocked by something
        else (memory, a node going down), and its GPUs should not stay reserved for it.
        """
        nodes = list(nodes)
        state = ClusterState.from_nodes(nodes)
        by_name = {n.name: n for n in nodes}
        promised: dict[str, int] = {}
        for job in jobs:
            tag = Tag.parse(job.admin_comment)
            if not (job.is_pending and tag and tag.state == "placed"):
                continue
            at = tag.extra.get("at", "")
            if at.isdigit() and self.now() - int(at) > self.config.daemon.lease_s:
                continue
            for name, gpus in parse_placed(tag.placed).items():
                promised[name] = promised.get(name, 0) + gpus
            node_name, _, shards = tag.placed.partition(":shard")
            if shards.isdigit() and node_name in by_name and not by_name[node_name].shards_alloc:
                promised[node_name] = promised.get(node_name, 0) + 1   # a share opens one GPU
        if not promised:
            return state
        return ClusterState({name: replace(n, gpus_free=max(n.gpus_free - promised.get(name, 0), 0))
                             for name, n in state.nodes.items()})

    def _shard_node(self, job: Job, nodes: Mapping[str, Node], state: ClusterState) -> str | None:
        """Pack shard jobs: a node that already shares a GPU first, then the one with fewest free GPUs."""
        best = None
        for name, node in nodes.items():
            free = state.nodes.get(name)
            if not node.available or node.shards - node.shards_alloc < job.shards or free is None:
                continue
            shares = node.shards_alloc > 0
            if not shares and free.gpus_free == 0:
                continue
            key = (not shares, free.gpus_free, name)
            if best is None or key < best[0]:
                best = (key, name)
        return best[1] if best else None

    def _take_shards(self, state: ClusterState, nodes: Mapping[str, Node], name: str, shards: int) -> ClusterState:
        node = nodes[name]
        per_gpu = node.shards // node.gpus if node.gpus else 1   # Slurm spreads shards evenly over GPUs
        before = math.ceil(node.shards_alloc / per_gpu)
        after = math.ceil((node.shards_alloc + shards) / per_gpu)
        current = state.nodes[name]
        return ClusterState({**state.nodes, name: replace(current, gpus_free=max(current.gpus_free - (after - before), 0))})

    # ------------------------------------------------------------ records

    def _record(self, job: Job) -> Record:
        """The job's record: cli_filter's, else one built here from its spec (first time only)."""
        record = Record.parse(job.comment)
        if record is not None:
            return record
        if job.job_id in self._records:
            return self._records[job.job_id]
        from slurm_liquid.admission.filter import Asked, field_of, spec_from, spec_text  # as at submission

        record = Record().with_fields(mode="server", asked=Asked.of_job(job).describe())
        try:
            from slurm_liquid.estimate.api import estimate

            script = "" if job.comment.strip().lower().startswith("liquid:") else self.client.batch_script(job.job_id)
            spec = spec_from(script, job.comment)
            record = Record(spec=spec_text(spec)).with_fields(**record.fields)
            est = estimate(spec, gpu_type=job.gpu_type, **self.config.estimate.kwargs())
            record = record.with_fields(est=est.summary())
        except (LiquidError, SlurmError) as exc:
            record = record.with_fields(err=field_of(exc))
        self._records[job.job_id] = record
        return record


def _stranded(job: Job, nodes: Mapping[str, Node]) -> bool:
    """A pending job pinned (ReqNodeList) to a node that cannot take work now."""
    return any(name in nodes and not nodes[name].available for name in job.required_nodes)


