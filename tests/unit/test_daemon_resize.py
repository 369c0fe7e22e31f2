"""Resizing one running job: signal, checkpoint, requeue-hold, update, release, and what a failure leaves.

Slurm is a mock with the client's own signatures (a wrong keyword fails the test) that keeps the job's
state (`SlurmJob`): requeuehold holds it, release lets it go. The clock is injected; a resize is a state
machine advanced by `step()`, so a test moves the clock and steps, and nothing ever waits.
"""

from __future__ import annotations

from unittest.mock import call, create_autospec

import pytest

from slurm_liquid.daemon.journal import PHASES, Journal
from slurm_liquid.daemon.resize import Checkpointing, Resizer, current_allocation
from slurm_liquid.loop import slurm_shapes
from slurm_liquid.ledger import Record, Tag
from slurm_liquid.slurm import Job, SlurmClient, SlurmError

T0 = 1_700_000_000.0
SPEC = "model=bert-base batch-size=64 elastic=1:8"
OLD = {"gpu01": 2}
NEW = {"gpu01": 4, "gpu02": 4}
SLURM_CALLS = ("signal", "requeue_hold", "resize", "update_job", "release")


class Clock:
    def __init__(self) -> None:
        self.t = T0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.slept.append(seconds)
        self.t += seconds


def running(**changes) -> Job:
    fields = dict(nodes=("gpu01",), num_nodes=1, gpus=2, gpus_per_node=2, gpu_type="h100",
                  comment=f"liquid/1 placed=gpu01:2 resized=1to2 | {SPEC}",
                  admin_comment="liquid/1 state=placed placed=gpu01:2 at=1; agent ok")
    fields.update(changes)
    return Job(7, "train", "alice", fields.pop("state", "RUNNING"), **fields)


def held() -> Job:
    return running(state="PENDING", held=True, nodes=(), num_nodes=2)


def pending() -> Job:
    return running(state="PENDING", nodes=(), num_nodes=2)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def client():
    return create_autospec(SlurmClient, instance=True)


@pytest.fixture
def journal(clock: Clock) -> Journal:
    return Journal(":memory:", now=clock.now)


class SlurmJob:
    """The job as the mock Slurm reports it, moved by the resizer's own commands."""

    def __init__(self, client, job: Job | None) -> None:
        self.job = job
        client.job.side_effect = lambda job_id: self.job
        client.requeue_hold.side_effect = lambda job_id: self._set(held())
        client.release.side_effect = lambda job_id: self._set(pending())

    def _set(self, job: Job) -> None:
        self.job = job


@pytest.fixture
def slurm(client) -> SlurmJob:
    return SlurmJob(client, running())


def resizer(client, journal: Journal, clock: Clock, checkpoint_time=None) -> Resizer:
    # By default the job reports its checkpoint the moment it is asked.
    return Resizer(client, journal, checkpoint_time or (lambda job: clock.now()), now=clock.now)


def drive(work: Resizer, clock: Clock, change, turn_s: float = 1.0, turns: int = 1000):
    """The daemon's loop: a step every `turn_s` until the change is final."""
    for _ in range(turns):
        change = work.journal.get(change.id)
        if change.finished:
            return change
        work.step()
        clock.sleep(turn_s)
    return work.journal.get(change.id)


def slurm_calls(client) -> list[str]:
    return [name for name, _, _ in client.mock_calls if name in SLURM_CALLS]


# ---------------------------------------------------------------- the happy path

def test_a_resize_signals_requeues_updates_notes_and_releases_in_that_order(client, journal, clock, slurm) -> None:
    change = resizer(client, journal, clock).start(running(), NEW, Checkpointing("USR2", 30), why="drf-slot")
    assert change.phase == "signalled" and slurm_calls(client) == ["signal"]   # returns at once: no wait
    change = drive(resizer(client, journal, clock), clock, change)
    assert change.phase == "done" and (change.old, change.new) == ("gpu01:2", "gpu[01-02]:4")
    assert slurm_calls(client) == ["signal", "requeue_hold", "resize", "update_job", "release"]
    client.signal.assert_called_once_with(7, "USR2")
    client.resize.assert_called_once_with(7, 4, num_nodes=2, nodes=["gpu01", "gpu02"], gpu_type="h100")
    fields = client.update_job.call_args.kwargs
    record = Record.parse(fields["Comment"])
    assert record.get("placed") == "gpu[01-02]:4" and record.get("resized") == "1to2,2to8"
    assert record.get("note") == "drf-slot" and record.spec == SPEC
    assert fields["AdminComment"].endswith("; agent ok")                   # other segments kept
    assert journal.unfinished() == []


def test_it_waits_for_a_checkpoint_newer_than_the_signal_a_turn_at_a_time(client, journal, clock, slurm) -> None:
    reports = []

    def checkpoint_time(job: Job) -> float:
        reports.append(clock.now())
        return T0 - 100 if len(reports) <= 3 else clock.now()   # an old checkpoint first, then a new one

    work = resizer(client, journal, clock, checkpoint_time)
    change = drive(work, clock, work.start(running(), NEW, Checkpointing("USR1", 60)))
    assert change.phase == "done" and len(reports) == 4
    assert clock.now() < T0 + 60                                # did not sit out the grace time


def test_a_report_at_the_very_moment_of_the_signal_counts(client, journal, clock, slurm) -> None:
    work = resizer(client, journal, clock, lambda job: T0)
    work.start(running(), NEW, Checkpointing("USR1", 60))
    (closed,) = work.step()
    assert closed.phase == "done" and clock.now() == T0


def test_without_a_report_it_requeues_when_the_grace_ends_and_not_before(client, journal, clock, slurm) -> None:
    requeued_at = []
    client.requeue_hold.side_effect = lambda job_id: (requeued_at.append(clock.now()), slurm._set(held()))
    work = resizer(client, journal, clock, lambda job: None)
    change = drive(work, clock, work.start(running(), NEW, Checkpointing("USR1", 3)), turn_s=0.5)
    assert change.phase == "done" and requeued_at == [T0 + 3]


def test_a_long_grace_costs_other_work_nothing(client, journal, clock, slurm) -> None:
    """The grace a user asks for is spent between turns of the loop, not inside any call."""
    work = resizer(client, journal, clock, lambda job: None)
    change = work.start(running(), NEW, Checkpointing("USR1", 86400))
    for _ in range(10):
        assert work.step() == [] and clock.now() < T0 + 86400
        clock.sleep(60)
    assert journal.get(change.id).phase == "signalled" and client.requeue_hold.called is False
    assert work.busy() == {7} and work.in_flight() == {"gpu01": 2, "gpu02": 4}


# ---------------------------------------------------------------- failures

@pytest.mark.parametrize("failing", ["signal", "requeue_hold"])
def test_a_failure_before_the_requeue_leaves_the_job_running_and_the_change_failed(client, journal, clock, slurm,
                                                                                   failing: str) -> None:
    getattr(client, failing).side_effect = SlurmError("scontrol: error")
    work = resizer(client, journal, clock)
    change = drive(work, clock, work.start(running(), NEW, Checkpointing()))
    assert change.phase == "failed" and slurm.job.is_running
    client.resize.assert_not_called()
    client.release.assert_not_called()


def test_a_requeue_that_timed_out_but_happened_is_carried_through(client, journal, clock, slurm) -> None:
    def timed_out(job_id):
        slurm._set(held())
        raise SlurmError("did not answer within 10 s")
    client.requeue_hold.side_effect = timed_out
    work = resizer(client, journal, clock)
    change = drive(work, clock, work.start(running(), NEW, Checkpointing()))
    assert change.phase == "done" and client.resize.called and client.release.called


def test_a_lost_requeue_answer_and_a_failed_check_never_leave_the_job_held(client, journal, clock, slurm) -> None:
    """The requeue took effect, its answer was lost, and Slurm did not answer the next look either:
    the change stays open (not failed), and the next turn that can see the job finishes it."""
    def timed_out(job_id):
        slurm._set(held())
        raise SlurmError("did not answer within 10 s")
    client.requeue_hold.side_effect = timed_out
    work = resizer(client, journal, clock)
    change = work.start(running(), NEW, Checkpointing("USR1", 0))
    assert change.phase == "requeuing" and not change.finished
    client.job.side_effect = SlurmError("slurmctld not responding")
    assert work.step() == [] and journal.get(change.id).phase == "requeuing"
    client.job.side_effect = lambda job_id: slurm.job
    (closed,) = work.step()
    assert closed.phase == "done" and client.release.called and not slurm.job.held


def test_a_failed_update_releases_the_job_as_it_was(client, journal, clock, slurm) -> None:
    client.resize.side_effect = SlurmError("Requested node configuration is not available")
    work = resizer(client, journal, clock)
    change = drive(work, clock, work.start(running(), NEW, Checkpointing()))
    assert change.phase == "rolled-back" and client.release.called and not slurm.job.held


def test_a_failed_note_after_the_update_does_not_claim_a_rollback_of_a_resized_job(client, journal, clock, slurm) -> None:
    client.update_job.side_effect = SlurmError("comment too long")
    work = resizer(client, journal, clock)
    change = drive(work, clock, work.start(running(), NEW, Checkpointing()))
    assert change.phase == "done" and client.resize.called and client.release.called


def test_an_uneven_placement_is_never_asked_of_slurm_and_rolls_back(client, journal, clock, slurm) -> None:
    work = resizer(client, journal, clock)
    change = drive(work, clock, work.start(running(), {"gpu01": 4, "gpu02": 2}, Checkpointing()))
    assert change.phase == "rolled-back" and client.release.called
    client.resize.assert_not_called()


def test_a_failed_release_stays_unfinished_and_the_next_step_releases_the_held_job(client, journal, clock, slurm) -> None:
    client.release.side_effect = SlurmError("slurmctld not responding")
    work = resizer(client, journal, clock)
    change = work.start(running(), NEW, Checkpointing("USR1", 0))
    assert change.phase == "updated" and "release failed" in change.note and slurm.job.held
    client.release.side_effect = lambda job_id: slurm._set(pending())
    (closed,) = work.reconcile()
    assert closed.phase == "done" and not slurm.job.held
    assert journal.unfinished() == []


# ---------------------------------------------------------------- reconcile after a restart

JOB_STATES = {"running": running, "held": held, "pending": pending,
              "finished": lambda: running(state="COMPLETED"), "gone": lambda: None}

# (phase the daemon died in, what Slurm says now) -> (final phase, released?). Reasoning:
# ended -> failed. planned: the signal was never sent, the job is not held by us: failed, untouched.
# signalled, running: the grace is over, go on (requeue, update, release); held: requeued by a step
# whose answer was lost, go on; pending not held: Slurm requeued it itself, failed.
# requeuing: held -> go on; running -> requeue again; pending -> failed.
# requeued: held -> update and release; running -> failed (someone released it); pending -> rolled back.
# updated / released: done, releasing a job still held.
EXPECTED = {
    ("planned", "running"): ("failed", False), ("planned", "held"): ("failed", False),
    ("planned", "pending"): ("failed", False),
    ("signalled", "running"): ("done", True), ("signalled", "held"): ("done", True),
    ("signalled", "pending"): ("failed", False),
    ("requeuing", "running"): ("done", True), ("requeuing", "held"): ("done", True),
    ("requeuing", "pending"): ("failed", False),
    ("requeued", "running"): ("failed", False), ("requeued", "held"): ("done", True),
    ("requeued", "pending"): ("rolled-back", False),
    ("updated", "running"): ("done", False), ("updated", "held"): ("done", True),
    ("updated", "pending"): ("done", False),
    ("released", "running"): ("done", False), ("released", "held"): ("done", True),
    ("released", "pending"): ("done", False),
    **{(phase, state): ("failed", False) for phase in PHASES for state in ("finished", "gone")},
}


def _cases():
    for (phase, state), expected in EXPECTED.items():
        yield pytest.param(phase, state, expected, id=f"{phase}-{state}")


def test_the_table_covers_every_phase_and_job_state() -> None:
    assert set(EXPECTED) == {(p, s) for p in PHASES for s in JOB_STATES}


@pytest.mark.parametrize("phase, state, expected", list(_cases()))
def test_reconcile_closes_what_a_killed_daemon_left(client, journal, clock, phase: str, state: str,
                                                   expected: tuple[str, bool]) -> None:
    slurm = SlurmJob(client, JOB_STATES[state]())
    change = journal.begin(7, "gpu01:2", "gpu[01-02]:4")
    if phase != "planned":
        journal.advance(change, phase)
    (closed,) = resizer(client, journal, clock).reconcile()
    final, released = expected
    assert closed.phase == final
    assert client.release.called == released
    assert client.signal.called is False
    if final == "done" and released:   # finished from where it stood: the update comes before the release
        assert slurm_calls(client)[-1] == "release"
        if phase in ("signalled", "requeuing", "requeued"):
            assert slurm_calls(client)[-3:] == ["resize", "update_job", "release"]
    else:
        client.resize.assert_not_called()
    assert journal.unfinished() == []
    if phase != "planned":   # a job held before any signal was held by someone else: not ours to release
        assert slurm.job is None or not slurm.job.held


def test_reconcile_leaves_finished_changes_alone(client, journal, clock) -> None:
    journal.advance(journal.begin(7, "gpu01:2", "gpu01:4"), "done")
    assert resizer(client, journal, clock).reconcile() == []
    client.job.assert_not_called()


# ---------------------------------------------------------------- small helpers

@pytest.mark.parametrize("text, expected", [
    ("B:USR2@30", Checkpointing("USR2", 30.0)),
    ("SIGTERM", Checkpointing("TERM", 60.0)),
    ("usr1@5", Checkpointing("USR1", 5.0)),
    ("", Checkpointing("USR1", 60.0)),
    (None, Checkpointing("USR1", 60.0)),
])
def test_checkpointing_parses_sbatch_signal_syntax(text, expected: Checkpointing) -> None:
    assert Checkpointing.parse(text) == expected


@pytest.mark.parametrize("gpus, per_node, expected", [
    (6, 4, [(2, 3), (3, 2), (6, 1)]),    # 1 node cannot hold 6; 4 and 5 nodes do not divide 6
    (8, 4, [(2, 4), (4, 2), (8, 1)]),
    (4, 4, [(1, 4), (2, 2), (4, 1)]),
    (5, 4, [(5, 1)]),                   # a prime above the node size: one GPU on each of 5 nodes
    (1, 4, [(1, 1)]),
    (7, 8, [(1, 7), (7, 1)]),
])
def test_slurm_shapes_list_every_even_shape_fewest_nodes_first(gpus: int, per_node: int,
                                                               expected: list[tuple[int, int]]) -> None:
    assert slurm_shapes(gpus, per_node) == expected


def test_current_allocation_spreads_the_job_count_evenly_when_slurm_gives_no_per_node_count() -> None:
    assert current_allocation(running()) == OLD
    assert current_allocation(running(nodes=("gpu01", "gpu02"), gpus=8, gpus_per_node=None)) == {"gpu01": 4, "gpu02": 4}
    assert current_allocation(pending()) == {}


def test_the_new_placement_is_recorded_with_its_change_id(client, journal, clock, slurm) -> None:
    work = resizer(client, journal, clock)
    change = drive(work, clock, work.start(running(), NEW, Checkpointing()))
    tag = Tag.parse(client.update_job.call_args.kwargs["AdminComment"])
    assert (tag.state, tag.placed, tag.extra["change"]) == ("placed", change.new, str(change.id))
