"""Changing the GPUs of a running job on Slurm, without losing it or running it twice.

The protocol (checked by hand on 24.11 and 22.05, docs/slurm.md): signal the job to checkpoint and
wait for its checkpoint report (at most the grace time), `scontrol requeuehold` (same job id, one more
restart), `scontrol update` of GPUs per node, node count and node list, `scontrol release`. Each step
is written to the journal before the next Slurm command, and a failure at any step leaves the job
running or pending as it was:

    fails before requeuehold -> the job keeps running as it is (nothing to undo)
    update fails             -> released with its old request (rolled back)
    release fails            -> retried by `reconcile` on the next pass (the job is held, not lost)

`reconcile()` runs at every daemon start and slot: it finishes or rolls back what a killed daemon
left half done, so that no job stays requeue-held.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from slurm_liquid.daemon.admit import format_placed, parse_placed
from slurm_liquid.daemon.journal import Change, Journal
from slurm_liquid.record import Record, Tag, with_tag
from slurm_liquid.slurm import Job, SlurmClient, SlurmError

log = logging.getLogger(__name__)
FAILPOINT_ENV = "SLURM_LIQUID_FAILPOINT"


@dataclass(frozen=True)
class Checkpointing:
    """How a job checkpoints: the signal it wants and how long it may take (`#LIQUID signal=USR1@60`)."""

    signal: str = "USR1"
    grace_s: float = 60.0

    @classmethod
    def parse(cls, text: str | None) -> "Checkpointing":
        if not text:
            return cls()
        name, _, grace = text.upper().removeprefix("B:").partition("@")
        return cls(name.removeprefix("SIG") or "USR1", float(grace) if grace else cls.grace_s)


def current_allocation(job: Job) -> dict[str, int]:
    """GPUs per node a running job holds (Slurm gives whole-job counts; per node is uniform)."""
    if not job.nodes:
        return {}
    per_node = job.gpus_per_node or max(job.gpus // len(job.nodes), 0)
    return {node: per_node for node in job.nodes}


class Resizer:
    def __init__(self, client: SlurmClient, journal: Journal,
                 checkpoint_time: Callable[[Job], float | None] = lambda job: None,
                 now: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep):
        self.client = client
        self.journal = journal
        self.checkpoint_time = checkpoint_time   # when the job last reported a checkpoint (progress API)
        self.now = now
        self.sleep = sleep

    def resize(self, job: Job, new: Mapping[str, int], how: Checkpointing, why: str = "") -> Change:
        """Move `job` to `new` (GPUs per node, uniform). Returns the journal's final word."""
        old = current_allocation(job)
        change = self.journal.begin(job.job_id, format_placed(old), format_placed(new))
        try:
            signalled = self.now()
            self.client.signal(job.job_id, how.signal)
            change = self.journal.advance(change, "signalled")
            self._wait_for_checkpoint(job, signalled, how.grace_s)
            self.client.requeue_hold(job.job_id)
        except SlurmError as exc:
            # A requeue that timed out may still have happened: then carry on from requeue-held.
            if not self._held(job.job_id):
                # Still running as it was (a job that ignores the signal just keeps training).
                return self.journal.advance(change, "failed", f"before requeue: {exc}")
        change = self.journal.advance(change, "requeued")
        failpoint("after-requeue")
        return self._finish(job, change, why)

    def _held(self, job_id: int) -> bool:
        try:
            now = self.client.job(job_id)
        except SlurmError:
            return False
        return bool(now and now.is_pending and now.held)

    def _wait_for_checkpoint(self, job: Job, since: float, grace_s: float) -> None:
        deadline = since + grace_s
        while self.now() < deadline:
            reported = self.checkpoint_time(job)
            if reported is not None and reported >= since:
                return
            self.sleep(min(0.5, max(deadline - self.now(), 0)))

    def _finish(self, job: Job, change: Change, why: str) -> Change:
        """From requeue-held: set the new request, note it, release; roll back if the update fails."""
        new = parse_placed(change.new)
        try:
            self._update(job, new, change, why)
            change = self.journal.advance(change, "updated")
        except SlurmError as exc:
            log.warning("job %s: resize update failed, releasing it as it was: %s", job.job_id, exc)
            return self._release(change, "rolled-back", f"update failed: {exc}")
        return self._release(change, "done")

    def _update(self, job: Job, new: Mapping[str, int], change: Change, why: str) -> None:
        per_node = set(new.values())
        if len(per_node) != 1:
            raise SlurmError(f"job {job.job_id}: uneven placement {change.new} cannot be asked of Slurm")
        record = Record.parse(job.comment) or Record()
        resizes = record.get("resized")
        step = f"{_count(change.old)}to{_count(change.new)}"
        record = record.with_fields(placed=change.new,
                                    resized=f"{resizes},{step}" if resizes else step, note=why or None)
        self.client.resize(job.job_id, per_node.pop(), num_nodes=len(new), nodes=sorted(new), gpu_type=job.gpu_type)
        tag = Tag("placed", change.new, {"at": str(int(self.now())), "change": str(change.id)})
        try:  # the job is resized now; its record is the story of it, not the change itself
            self.client.update_job(job.job_id, Comment=record.render(), AdminComment=with_tag(job.admin_comment, tag))
        except SlurmError as exc:
            log.warning("job %s: resized, but its record could not be written: %s", job.job_id, exc)

    def _release(self, change: Change, final: str, note: str = "") -> Change:
        try:
            self.client.release(change.job_id)
        except SlurmError as exc:
            log.warning("job %s: release failed (retried next pass): %s", change.job_id, exc)
            return self.journal.advance(change, change.phase, f"release failed: {exc}")
        return self.journal.advance(change, final, note)

    def reconcile(self) -> list[Change]:
        """Finish or roll back what a killed daemon left half done; returns the changes it closed."""
        closed = []
        for change in self.journal.unfinished():
            job = self.client.job(change.job_id)
            if job is None or job.is_finished:
                closed.append(self.journal.advance(change, "failed", "the job ended during the change"))
            elif job.is_running:
                # Killed before requeue: the job never stopped. Killed after release: it restarted resized.
                final = "done" if change.phase in ("updated", "released") else "failed"
                closed.append(self.journal.advance(change, final, "found running at reconcile"))
            elif job.held and change.phase == "requeued":
                closed.append(self._finish(job, change, "resumed after a daemon restart"))
            elif job.held:
                # updated but not released, or requeue-held by a step we have no record of finishing
                final = "done" if change.phase in ("updated", "released") else "rolled-back"
                closed.append(self._release(change, final, "released at reconcile"))
            else:  # pending and not held: released already, resized or not
                final = "done" if change.phase in ("updated", "released") else "rolled-back"
                closed.append(self.journal.advance(change, final, "found released at reconcile"))
        return closed


def failpoint(name: str) -> None:
    """Fault injection for tests: `SLURM_LIQUID_FAILPOINT=after-requeue:30` stalls there for 30 s, so
    that a test can kill the daemon at exactly that step. Unset in production."""
    point, _, seconds = os.environ.get(FAILPOINT_ENV, "").partition(":")
    if point == name:
        log.warning("failpoint %s: stalling %s s", name, seconds or "60")
        time.sleep(float(seconds or 60))


def _count(placed: str) -> int:
    return sum(parse_placed(placed).values())


def uniform_placement_sizes(gpus: int, gpus_per_node: int) -> list[tuple[int, int]]:
    """(nodes, GPUs per node) shapes Slurm can express for `gpus` GPUs, fewest nodes first."""
    shapes = []
    for nodes in range(max(1, math.ceil(gpus / gpus_per_node)), gpus + 1):
        if gpus % nodes == 0 and gpus // nodes <= gpus_per_node:
            shapes.append((nodes, gpus // nodes))
    return shapes
