"""The daemon's side of staging: where jobs that wait for GPUs are expected to run (so the agents copy
their data there meanwhile: Liquid's pre-scheduling), and which nodes already hold a job's data (the
placer's tie-breaker after switches).

Prediction: free the GPUs of running jobs in the order Slurm expects them to end (start + time limit),
until the job fits, and place it there with the same Liquid best fit the daemon uses. The prediction
goes into the job's AdminComment (`liquid-stage/1 nodes=...`, root only) when it changes.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Callable, Iterable

from slurm_liquid.config import Config
from slurm_liquid.placement import ClusterState, PlacementRequest
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.ledger import Placed, Record
from slurm_liquid.slurm import Job, SlurmError
from slurm_liquid.ledger.staging import Hint, parse_staged, wanted, with_hint
from slurm_liquid.topology import Topology

log = logging.getLogger(__name__)
MAX_REMEMBERED = 10_000


def predict(request: PlacementRequest, state: ClusterState, running: Iterable[Job], topology: Topology,
            now: float) -> dict[str, int] | None:
    """Nodes `request` would get once enough running jobs end, earliest expected end first."""
    placer = make_placer("liquid", topology)
    nodes = dict(state.nodes)
    order = sorted((j for j in running if j.nodes and j.gpus),
                   key=lambda j: (j.end_time.timestamp() if j.end_time else float("inf"), j.job_id))
    for job in order:
        per_node = max(job.gpus // len(job.nodes), 1)
        for name in job.nodes:
            if name in nodes:
                n = nodes[name]
                nodes[name] = replace(n, gpus_free=min(n.gpus, n.gpus_free + per_node))
        placement = placer.place(request, ClusterState(nodes))
        if placement.placed:
            return dict(placement.nodes)
    return None


class StagingHints:
    """Held by the daemon's Admitter; does nothing unless [staging] enabled."""

    def __init__(self, config: Config, client: Any, topology: Topology, now: Callable[[], float]):
        self.enabled = config.staging.enabled
        self.predicting = config.staging.enabled and config.staging.predict
        self.client = client
        self.topology = topology
        self.now = now
        # (user, dataset) -> nodes that staged it (the jobs' records) or were asked to (hints)
        self.holders: OrderedDict[tuple[str, str], set[str]] = OrderedDict()

    def prefer(self, job: Job) -> frozenset[str]:
        """Nodes that hold every dataset of the job (a tie-breaker: never a reason to wait or spread)."""
        want = wanted(job.comment) if self.enabled else None
        if want is None:
            return frozenset()
        sets = [self.holders.get((job.user, path), set()) for path in want.paths]
        return frozenset(set.intersection(*sets)) if sets else frozenset()

    def observe(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            want = wanted(job.comment)
            if want is None:
                continue
            record = Record.parse(job.comment)
            parts = parse_staged(record.get("staged")) if record else {}
            have = {node for node, part in parts.items() if not part.endswith(":late")}
            hint = Hint.parse(job.admin_comment)
            if hint and job.is_pending:
                have |= set(hint.nodes)
            for path in want.paths if have else ():
                key = (job.user, path)
                self.holders.setdefault(key, set()).update(have)
                self.holders.move_to_end(key)
        while len(self.holders) > MAX_REMEMBERED:
            self.holders.popitem(last=False)

    def after_pass(self, jobs: list[Job], state: ClusterState, report: Any) -> None:
        """Learn who holds what; name the predicted nodes of the jobs this pass left waiting."""
        if not self.enabled:
            return
        self.observe(jobs)
        if not self.predicting or not report.waiting:
            return
        taken = {}                      # GPUs this pass just gave to other jobs
        for placed in report.placed.values():
            for name, gpus in Placed.parse(placed).nodes.items():
                taken[name] = taken.get(name, 0) + gpus
        state = ClusterState({name: replace(n, gpus_free=max(n.gpus_free - taken.get(name, 0), 0))
                              for name, n in state.nodes.items()})
        running = [j for j in jobs if j.is_running]
        by_id = {j.job_id: j for j in jobs}
        for job_id in report.waiting:
            job = by_id.get(job_id)
            if job is None or job.shards or job.gpus <= 0 or wanted(job.comment) is None:
                continue
            per_node = job.gpus_per_node if job.gpus_per_node and job.gpus % job.gpus_per_node == 0 else None
            try:
                nodes = predict(PlacementRequest(str(job.job_id), job.gpus, per_node, job.gpu_type), state,
                                running, self.topology, self.now())
            except (ValueError, KeyError) as exc:
                log.debug("job %d: no prediction: %s", job_id, exc)
                continue
            old = Hint.parse(job.admin_comment)
            if not nodes or (old is not None and set(old.nodes) == set(nodes)):
                continue
            hint = Hint(tuple(sorted(nodes)), int(self.now()))
            try:
                self.client.update_job(job.job_id, AdminComment=with_hint(job.admin_comment, hint))
                log.info("job %d: waiting; its data is staged on %s meanwhile", job.job_id, ",".join(hint.nodes))
            except SlurmError as exc:
                report.errors.append(f"job {job.job_id}: writing its staging hint failed: {exc}")
