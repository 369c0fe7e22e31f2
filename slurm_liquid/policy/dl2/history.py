"""Warm-up from what a site's scheduler actually did: `sacct --json` records replayed as DL2 slots.

A site starts DL2 from its own scheduler's behaviour (DL2 paper section 5.1) by saving its
accounting, `sacct --json --allocations --duplicates -S <start> > history.json` (--duplicates: every
run of a requeued job, not only its last), and running
`slurm-liquid policy train --supervised --teacher sacct --history history.json`.

Every run Slurm recorded (a requeued or resized job's earlier runs included) held its GPUs
from its start to its end. Replaying the records at the simulator's slot length gives, per
slot, the jobs that were waiting or running (a `ClusterView` with what each held in the
previous slot) and what each held in this one: the scheduler's decision, which
`imitation_steps` turns into DL2's "+1 GPU" sequence like any simulated teacher's.

What accounting does not say is approximated: a node's GPU count is the most GPUs its jobs
held at once; a job's progress is the share of its total run time behind it (known in
hindsight, where it finished); a job is elastic only if its liquid record says so
(`elastic=MIN:MAX`); the application and batch come from the record's model and batch size.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from slurm_liquid.errors import LiquidError, UsageError
from slurm_liquid.views import REFERENCE_RESTART_PENALTY_S, ClusterView, JobView, NodeView
from slurm_liquid.slurm.models import FINISHED_STATES, Job

PROGRESS_STEPS = 100  # progress is reported to the network as epoch / epochs


@dataclass(frozen=True)
class HistoryJob:
    """One job id's runs: when it was submitted, what it asked for, and each run's GPUs and times."""

    job_id: str
    submit: float
    gpus: int
    runs: tuple[tuple[float, float, tuple[tuple[str, int], ...]], ...]  # (start, end, allocation)
    min_gpus: int = 1
    max_gpus: int | None = None
    app: str | None = None
    batch_size: int | None = None
    left: float | None = None  # when it finished or was cancelled; None: still there when the history ends

    def held(self, t: float) -> tuple[tuple[str, int], ...]:
        for start, end, allocation in self.runs:
            if start <= t < end:
                return allocation
        return ()

    def attained(self, t: float) -> float:
        return sum(max(0.0, min(t, end) - start) * sum(g for _, g in alloc) for start, end, alloc in self.runs)

    def ran(self, t: float) -> float:
        return sum(max(0.0, min(t, end) - start) for start, end, _ in self.runs)


def load_history(path: str | Path) -> list[Job]:
    """Every run in a saved `sacct --json` document (any supported Slurm version)."""
    from slurm_liquid.slurm.parse import runs_from_document

    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read accounting history {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a `sacct --json` document ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise UsageError(f"{path}: not a `sacct --json` document (no \"jobs\" list)")
    try:
        return runs_from_document(doc, f"sacct history {path.name}")
    except LiquidError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _split(gpus: int, nodes: Sequence[str]) -> tuple[tuple[str, int], ...]:
    if not nodes:
        return (("?", gpus),)
    share, extra = divmod(gpus, len(nodes))
    return tuple((n, share + (i < extra)) for i, n in enumerate(nodes) if share + (i < extra))


def _declared(job: Job) -> tuple[int, int | None, str | None, int | None]:
    """(min GPUs, max GPUs or None if rigid, application, batch): from the trusted tag the daemon
    wrote at placement, else (jobs it never placed) from the liquid record's spec."""
    from slurm_liquid.speed import trace_app
    from slurm_liquid.ledger import Record, Tag

    tag = Tag.parse(job.admin_comment)
    if tag and tag.trusted:
        trusted = tag.trusted
        low, high = (trusted.low, trusted.high) if trusted.elastic else (1, None)
        return low or 1, high, trace_app(trusted.model), trusted.batch
    record = Record.parse(job.comment)
    if not (record and record.spec):
        return 1, None, None, None
    try:
        spec = record.job_spec()
    except LiquidError:
        return 1, None, None, None
    low, high = (spec.min_gpus or 1, spec.max_gpus) if spec.elastic else (1, None)
    return low, high, trace_app(spec.model), spec.batch_size


def history_jobs(records: Iterable[Job], horizon: float) -> list[HistoryJob]:
    """Group the runs of each GPU job; a run still going counts as running until `horizon`."""
    by_id: dict[int, list[Job]] = defaultdict(list)
    for rec in records:
        if rec.submit_time is not None:
            by_id[rec.job_id].append(rec)
    jobs = []
    for job_id, recs in by_id.items():
        last = recs[-1]
        gpus = max(r.gpus for r in recs)
        if gpus <= 0:
            continue
        runs = []
        for r in recs:
            if r.start_time is None or r.gpus <= 0:
                continue
            start = r.start_time.timestamp()
            end = r.end_time.timestamp() if r.end_time else horizon
            if end > start:
                runs.append((start, end, _split(r.gpus, r.nodes)))
        low, high, app, batch = _declared(last)
        left = last.end_time.timestamp() if last.end_time and last.state in FINISHED_STATES else None
        jobs.append(HistoryJob(str(job_id), min(r.submit_time.timestamp() for r in recs), gpus, tuple(runs),
                               low, high, app, batch, left))
    return sorted(jobs, key=lambda j: (j.submit, int(j.job_id) if j.job_id.isdigit() else 0))


def node_capacity(jobs: Iterable[HistoryJob]) -> dict[str, int]:
    """Per node, the most GPUs its jobs held at once (a lower bound of what it has)."""
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for job in jobs:
        for start, end, allocation in job.runs:
            for node, gpus in allocation:
                events[node] += [(start, gpus), (end, -gpus)]
    capacity = {}
    for node, evs in events.items():
        level = peak = 0
        for _, delta in sorted(evs, key=lambda e: (e[0], e[1])):  # a release before a take at the same instant
            level += delta
            peak = max(peak, level)
        capacity[node] = peak
    return capacity


def history_slots(records: Sequence[Job], interval: float = 60.0,
                  restart_penalty: float = REFERENCE_RESTART_PENALTY_S) -> Iterator[tuple[ClusterView, list[int]]]:
    """Per slot of `interval` seconds: the view a policy would have had, and what each of its jobs
    then held (the site scheduler's decision), in the view's job order."""
    stamps = [t.timestamp() for r in records for t in (r.submit_time, r.start_time, r.end_time) if t is not None]
    if not stamps:
        return
    horizon = max(stamps)
    jobs = history_jobs(records, horizon)
    nodes = tuple(NodeView(n, g) for n, g in sorted(node_capacity(jobs).items()) if g > 0)
    if not jobs or not nodes:
        return
    t = jobs[0].submit + interval  # jobs are sorted by submission
    arrived, active = 0, []
    while t < horizon:  # one pass: a month of accounting is 43,200 slots
        before = t - interval
        while arrived < len(jobs) and jobs[arrived].submit <= t:
            active.append(jobs[arrived])
            arrived += 1
        active = [j for j in active if j.left is None or t < j.left]
        if active:
            views = tuple(_view(j, t, before) for j in active)
            yield (ClusterView(t, nodes, views, restart_penalty),
                   [sum(g for _, g in j.held(t)) for j in active])
        t += interval


def _view(job: HistoryJob, t: float, before: float) -> JobView:
    total = sum(end - start for start, end, _ in job.runs) if job.left is not None else 0.0
    return JobView(id=job.job_id, submit_time=job.submit, gpus=job.gpus, allocation=job.held(before),
                   min_gpus=job.min_gpus, max_gpus=job.max_gpus, attained_gpu_seconds=job.attained(before),
                   restarts=max(0, sum(1 for s, _, _ in job.runs if s < before) - 1), app=job.app,
                   batch_size=job.batch_size,
                   epoch=int(PROGRESS_STEPS * job.ran(before) / total) if total > 0 else 0,
                   epochs=PROGRESS_STEPS if total > 0 else None)
