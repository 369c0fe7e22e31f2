"""Changing the GPUs of a running job on Slurm, without losing it, running it twice or waiting for it.

The protocol (checked by hand on 24.11 and 22.05, docs/slurm.md): signal the job to checkpoint, give
it until its checkpoint report or the end of its grace, `scontrol requeuehold` (same job id, one more
restart), `scontrol update` of GPUs per node, node count and node list, `scontrol release`.

A resize is a journaled state machine that the daemon advances a step at a time, on every turn of its
loop (`step()`), never a wait inside one pass: the checkpoint grace a user asks for (capped by
`[elastic] max_grace_s`) delays that job's resize, never the placement of other jobs or the heartbeat.
Every step is written to the journal before the next Slurm command, and a change becomes final only
once the job is seen not held by it. The slot journals all its resizes as planned in one transaction,
signals them, then marks them signalled in another (`Journal.batch`): a daemon killed between leaves a
planned change whose signal may have been sent, which costs that job one checkpoint and nothing else:

    phase       job seen        next
    planned     any             the signal was never sent: failed (nothing to undo)
    signalled   running         grace over or checkpoint reported -> requeuehold -> requeued / requeuing
    requeuing   held            -> requeued;  running: requeuehold again (3 tries, then failed: still running)
    requeued    held            -> update -> updated (or release as it was: rolled-back) -> release -> done
    updated     held            -> release -> done
    any         ended / gone    failed (the job ended during the change)
    any         running, pending not held: the change is over (done if updated, else failed / rolled-back)
    Slurm does not answer: nothing moves; the next step asks again.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from slurm_liquid.daemon.journal import Change, Journal
from slurm_liquid.ledger import Record, Tag, TagState, with_tag
from slurm_liquid.ledger.placed import format_placed, parse_placed
from slurm_liquid.slurm import Job, SlurmClient, SlurmError

log = logging.getLogger(__name__)
FAILPOINT_ENV = "SLURM_LIQUID_FAILPOINT"
REQUEUE_TRIES = 3


@dataclass(frozen=True)
class Checkpointing:
    """How a job checkpoints: the signal it wants and how long it may take (from the trusted tag)."""

    signal: str = "USR1"
    grace_s: float = 60.0

    @classmethod
    def parse(cls, text: str | None) -> "Checkpointing":
        """sbatch --signal syntax: `USR1@60`, `B:SIGUSR2@30`."""
        if not text:
            return cls()
        name, _, grace = text.upper().removeprefix("B:").partition("@")
        return cls(name.removeprefix("SIG") or "USR1", float(grace) if grace.isdigit() else cls.grace_s)


def current_allocation(job: Job) -> dict[str, int]:
    """GPUs per node a running job holds (Slurm gives whole-job counts; per node is uniform)."""
    if not job.nodes:
        return {}
    per_node = job.gpus_per_node or max(job.gpus // len(job.nodes), 0)
    return {node: per_node for node in job.nodes}


class Resizer:
    def __init__(self, client: SlurmClient, journal: Journal,
                 checkpoint_time: Callable[[Job], float | None] = lambda job: None,
                 now: Callable[[], float] = time.time):
        self.client = client
        self.journal = journal
        self.checkpoint_time = checkpoint_time   # when the job last reported a checkpoint (progress API)
        self.now = now

    def start(self, job: Job, new: Mapping[str, int], how: Checkpointing, why: str = "") -> Change:
        """Begin moving `job` to `new` (GPUs per node, uniform): journal it and send the checkpoint
        signal. The rest happens in later `step()` calls; returns the change as it stands."""
        return self.signal(job, self.plan(job, new, how, why), how)

    def plan(self, job: Job, new: Mapping[str, int], how: Checkpointing, why: str = "") -> Change:
        """The first half of `start`: the change journaled as planned, nothing sent to Slurm yet (a
        slot plans all its resizes in one journal batch, then signals them: `Journal.batch`)."""
        old = current_allocation(job)
        return self.journal.begin(job.job_id, format_placed(old), format_placed(new), how.grace_s, how.signal, why)

    def signal(self, job: Job, change: Change, how: Checkpointing) -> Change:
        """The second half of `start`: send the checkpoint signal of a planned change and mark it; with
        no grace, the requeue and update follow at once, each step on disk before the next command."""
        try:
            self.client.signal(job.job_id, how.signal)
        except SlurmError as exc:   # a job that did not get the signal just keeps training
            return self.journal.advance(change, "failed", f"signal: {exc}")
        change = self.journal.advance(change, "signalled")
        if how.grace_s > 0:
            return change
        with self.journal.unbatched():
            return self._step(change)

    def in_flight(self) -> dict[str, int]:
        """GPUs that unfinished changes will take beyond what their jobs hold now (node -> GPUs)."""
        extra: dict[str, int] = {}
        for change in self.journal.unfinished():
            old, new = _placement(change.old), _placement(change.new)
            for name, gpus in new.items():
                if gpus > old.get(name, 0):
                    extra[name] = extra.get(name, 0) + gpus - old.get(name, 0)
        return extra

    def busy(self) -> set[int]:
        return {c.job_id for c in self.journal.unfinished()}

    def step(self) -> list[Change]:
        """Advance every unfinished change by what the job's state allows now; returns those that
        became final. Runs at every daemon start (a killed daemon's changes) and every loop turn."""
        closed = []
        for change in self.journal.unfinished():
            try:
                after = self._step(change)
            except Exception as exc:  # noqa: BLE001 -- one change must not stop the others
                log.warning("job %s: resize step failed (tried again next turn): %s", change.job_id, exc,
                            exc_info=not isinstance(exc, SlurmError))
                continue
            if after.finished:
                closed.append(after)
        return closed

    reconcile = step

    def _step(self, change: Change) -> Change:
        try:
            job = self.client.job(change.job_id)
        except SlurmError:
            return change   # Slurm does not answer: nothing is known, nothing moves
        if job is None or job.is_finished:
            return self.journal.advance(change, "failed", "the job ended during the change")
        held = job.is_pending and job.held
        if change.phase == "planned":
            return self.journal.advance(change, "failed", "the signal was never sent")
        if change.phase == "signalled":
            if held:   # requeued by a step whose answer was lost
                return self._finish(job, self.journal.advance(change, "requeued"))
            if not job.is_running:
                return self.journal.advance(change, "failed", "Slurm requeued the job itself")
            reported = self.checkpoint_time(job)
            if self.now() < change.deadline and not (reported is not None and reported >= change.started):
                return change   # still within the grace: look again next turn
            return self._requeue(job, change)
        if change.phase == "requeuing":
            if held:
                return self._finish(job, self.journal.advance(change, "requeued"))
            if job.is_running and change.tries < REQUEUE_TRIES:
                return self._requeue(job, change)
            return self.journal.advance(change, "failed", "the requeue did not take effect; the job runs as it was")
        if change.phase == "requeued":
            if held:
                return self._finish(job, change)
            final = "failed" if job.is_running else "rolled-back"
            return self.journal.advance(change, final, "found released before its update")
        if change.phase in ("updated", "released"):
            if held:
                return self._release(change, "done")
            return self.journal.advance(change, "done", "found released")
        return change

    def _requeue(self, job: Job, change: Change) -> Change:
        try:
            self.client.requeue_hold(job.job_id)
            if failpoint("requeue-answer-lost"):
                raise SlurmError("failpoint: the requeue took effect but its answer was lost")
        except SlurmError as exc:
            # It may have happened anyway (a timeout): the next step looks at the job before anything else.
            return self.journal.advance(change, "requeuing", f"requeue: {exc}", tried=True)
        change = self.journal.advance(change, "requeued", tried=True)
        failpoint("after-requeue")
        try:
            now = self.client.job(job.job_id)
        except SlurmError:
            return change
        return self._finish(now or job, change) if now and now.is_pending and now.held else change

    def _finish(self, job: Job, change: Change) -> Change:
        """From requeue-held: set the new request, note it, release; roll back if the update fails."""
        new = parse_placed(change.new)
        try:
            self._update(job, new, change)
            change = self.journal.advance(change, "updated")
        except SlurmError as exc:
            log.warning("job %s: resize update failed, releasing it as it was: %s", job.job_id, exc)
            return self._release(change, "rolled-back", f"update failed: {exc}")
        return self._release(change, "done")

    def _update(self, job: Job, new: Mapping[str, int], change: Change) -> None:
        per_node = set(new.values())
        if len(per_node) != 1:
            raise SlurmError(f"job {job.job_id}: uneven placement {change.new} cannot be asked of Slurm")
        record = Record.of_comment(job.comment)
        resizes = record.get("resized")
        step = f"{_count(change.old)}to{_count(change.new)}"
        record = record.with_fields(placed=change.new,
                                    resized=f"{resizes},{step}" if resizes else step, note=change.why or None)
        self.client.resize(job.job_id, per_node.pop(), num_nodes=len(new), nodes=sorted(new), gpu_type=job.gpu_type)
        tag = Tag.parse(job.admin_comment)
        try:  # the job is resized now; its record is the story of it, not the change itself
            fields = {"Comment": record.render()}
            if tag is not None and tag.state == TagState.PLACED:
                fields["AdminComment"] = with_tag(job.admin_comment, tag.to(
                    TagState.PLACED, placed=change.new, at=int(self.now()), extra={"change": str(change.id)}))
            self.client.update_job(job.job_id, **fields)
        except SlurmError as exc:
            log.warning("job %s: resized, but its record could not be written: %s", job.job_id, exc)

    def _release(self, change: Change, final: str, note: str = "") -> Change:
        try:
            self.client.release(change.job_id)
        except SlurmError as exc:
            log.warning("job %s: release failed (retried next turn): %s", change.job_id, exc)
            return self.journal.advance(change, change.phase, f"release failed: {exc}")
        return self.journal.advance(change, final, note)


def failpoint(name: str) -> bool:
    """Fault injection for tests, unset in production: `SLURM_LIQUID_FAILPOINT=after-requeue:30` stalls
    there for 30 s (so that a test can kill the daemon at exactly that step); a failpoint without
    seconds just answers True where it is named (`requeue-answer-lost`)."""
    point, _, seconds = os.environ.get(FAILPOINT_ENV, "").partition(":")
    if point != name:
        return False
    if seconds:
        log.warning("failpoint %s: stalling %s s", name, seconds)
        time.sleep(min(float(seconds), 600))
    return True


def _placement(text: str) -> dict[str, int]:
    try:
        return parse_placed(text) if text else {}
    except Exception:  # noqa: BLE001 -- a journal row from an older version: counts as nothing
        return {}


def _count(placed: str) -> int:
    return sum(_placement(placed).values())
