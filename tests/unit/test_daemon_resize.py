"""Resizing one running job: signal, checkpoint, requeue-hold, update, release, and what a failure leaves.

Slurm is a mock with the client's own signatures (a wrong keyword fails the test); the clock is
injected and sleeping only moves it, so nothing really waits.
"""

from __future__ import annotations

from unittest.mock import call, create_autospec

import pytest

from slurm_liquid.daemon.journal import PHASES, Journal
from slurm_liquid.daemon.resize import (Checkpointing, Resizer, current_allocation,
                                        uniform_placement_sizes)
from slurm_liquid.record import Record, Tag
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


def resizer(client, journal: Journal, clock: Clock, checkpoint_time=None) -> Resizer:
    # By default the job reports its checkpoint the moment it is asked.
    return Resizer(client, journal, checkpoint_time or (lambda job: clock.now()), now=clock.now, sleep=clock.sleep)


def slurm_calls(client) -> list[str]:
    return [name for name, _, _ in client.mock_calls if name in SLURM_CALLS]


# ---------------------------------------------------------------- the happy path

def test_a_resize_signals_requeues_updates_notes_and_releases_in_that_order(client, journal, clock) -> None:
    change = resizer(client, journal, clock).resize(running(), NEW, Checkpointing("USR2", 30), why="drf-slot")
    assert slurm_calls(client) == list(SLURM_CALLS)
    client.signal.assert_called_once_with(7, "USR2")
    client.requeue_hold.assert_called_once_with(7)
    client.resize.assert_called_once_with(7, 4, num_nodes=2, nodes=["gpu01", "gpu02"], gpu_type="h100")
    client.release.assert_called_once_with(7)
    client.update_job.assert_called_once()
    fields = client.update_job.call_args.kwargs
    record = Record.parse(fields["Comment"])
    assert record.get("placed") == "gpu[01-02]:4"
    assert record.get("resized") == "1to2,2to8"          # 2 GPUs before, 8 after; the history kept
    assert record.get("note") == "drf-slot" and record.spec == SPEC
    assert fields["AdminComment"] == f"liquid/1 state=placed placed=gpu[01-02]:4 at={int(T0)} change={change.id}; agent ok"
    assert (change.phase, change.old, change.new) == ("done", "gpu01:2", "gpu[01-02]:4")
    assert journal.unfinished() == []


def test_it_waits_for_a_checkpoint_newer_than_the_signal(client, journal, clock) -> None:
    polls = []

    def checkpoint_time(job: Job) -> float:
        polls.append(clock.now())
        # An old checkpoint (before the signal) for three polls, then a fresh one.
        return T0 - 100 if len(polls) <= 3 else clock.now()

    client.requeue_hold.side_effect = lambda job_id: polls.append("requeue")
    change = resizer(client, journal, clock, checkpoint_time).resize(running(), NEW, Checkpointing("USR1", 60))
    assert polls[-1] == "requeue" and len(polls) == 5       # requeued right after the fourth, fresh, report
    assert clock.now() < T0 + 60                            # did not sit out the grace time
    assert change.phase == "done"


def test_a_report_at_the_very_moment_of_the_signal_counts(client, journal, clock) -> None:
    change = resizer(client, journal, clock, lambda job: T0).resize(running(), NEW, Checkpointing("USR1", 60))
    assert clock.slept == [] and change.phase == "done"


def test_without_a_report_it_gives_up_after_the_grace_time_and_resizes_anyway(client, journal, clock) -> None:
    requeued_at = []
    client.requeue_hold.side_effect = lambda job_id: requeued_at.append(clock.now())
    change = resizer(client, journal, clock, lambda job: None).resize(running(), NEW, Checkpointing("USR1", 3))
    assert requeued_at == [pytest.approx(T0 + 3)]
    assert change.phase == "done"


# ---------------------------------------------------------------- failures

@pytest.mark.parametrize("step", ["signal", "requeue_hold"])
def test_a_failure_before_the_requeue_leaves_the_job_running_and_the_change_failed(client, journal, clock,
                                                                                     step: str) -> None:
    getattr(client, step).side_effect = SlurmError(f"{step} refused")
    client.job.return_value = running()          # Slurm says the job still runs
    change = resizer(client, journal, clock).resize(running(), NEW, Checkpointing())
    assert slurm_calls(client) == list(SLURM_CALLS[:SLURM_CALLS.index(step) + 1])
    assert change.phase == "failed" and f"{step} refused" in change.note
    assert journal.unfinished() == []


def test_a_requeue_that_timed_out_but_happened_is_carried_through(client, journal, clock) -> None:
    client.requeue_hold.side_effect = SlurmError("`scontrol requeuehold 7` timed out after 30 s")
    client.job.return_value = held()             # ... yet the job is requeue-held
    change = resizer(client, journal, clock).resize(running(), NEW, Checkpointing())
    assert slurm_calls(client) == list(SLURM_CALLS)
    assert change.phase == "done"


def test_a_failed_update_releases_the_job_as_it_was(client, journal, clock) -> None:
    client.resize.side_effect = SlurmError("Requested node configuration is not available")
    change = resizer(client, journal, clock).resize(running(), NEW, Checkpointing())
    assert slurm_calls(client) == ["signal", "requeue_hold", "resize", "release"]
    assert change.phase == "rolled-back" and "not available" in change.note


def test_a_failed_note_after_the_update_does_not_claim_a_rollback_of_a_resized_job(client, journal, clock) -> None:
    client.update_job.side_effect = SlurmError("comment refused")
    change = resizer(client, journal, clock).resize(running(), NEW, Checkpointing())
    put_back = call(7, 2, num_nodes=1, nodes=["gpu01"], gpu_type="h100")
    assert change.phase == "done" or client.resize.call_args_list[-1] == put_back


def test_an_uneven_placement_is_never_asked_of_slurm_and_rolls_back(client, journal, clock) -> None:
    change = resizer(client, journal, clock).resize(running(), {"gpu01": 4, "gpu02": 2}, Checkpointing())
    assert slurm_calls(client) == ["signal", "requeue_hold", "release"]
    assert change.phase == "rolled-back" and "uneven" in change.note


def test_a_failed_release_stays_unfinished_and_reconcile_releases_the_held_job(client, journal, clock) -> None:
    client.release.side_effect = [SlurmError("slurmctld busy"), None]
    work = resizer(client, journal, clock)
    change = work.resize(running(), NEW, Checkpointing())
    assert change.phase == "updated" and "release failed" in change.note
    assert journal.unfinished() == [change]
    client.job.return_value = held()
    (closed,) = work.reconcile()
    assert (closed.id, closed.phase) == (change.id, "done")
    assert client.release.call_args_list == [call(7), call(7)]
    client.resize.assert_called_once()                    # the update is not repeated
    assert journal.unfinished() == []


# ---------------------------------------------------------------- reconcile after a restart

JOB_STATES = {"running": running, "held": held, "pending": pending,
              "finished": lambda: running(state="COMPLETED"), "gone": lambda: None}

# (phase the daemon died in, what Slurm says now) -> (final phase, released?). Reasoning:
# ended -> failed; running -> done only if the update was made, else the job never stopped (failed);
# held -> finish the change from requeued, else release it (done if updated, rolled back if not);
# pending, not held -> someone released it already: nothing to release.
EXPECTED = {
    ("planned", "running"): ("failed", False), ("planned", "held"): ("rolled-back", True),
    ("planned", "pending"): ("rolled-back", False),
    ("signalled", "running"): ("failed", False), ("signalled", "held"): ("rolled-back", True),
    ("signalled", "pending"): ("rolled-back", False),
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
    change = journal.begin(7, "gpu01:2", "gpu[01-02]:4")
    if phase != "planned":
        journal.advance(change, phase)
    client.job.return_value = JOB_STATES[state]()
    (closed,) = resizer(client, journal, clock).reconcile()
    final, released = expected
    assert closed.phase == final
    assert client.release.called == released
    assert client.signal.called is False and client.requeue_hold.called is False
    if (phase, state) == ("requeued", "held"):   # resumed: the update is made before the release
        assert slurm_calls(client) == ["resize", "update_job", "release"]
    else:
        client.resize.assert_not_called()
    assert journal.unfinished() == []


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
def test_uniform_placement_sizes_lists_every_even_shape_fewest_nodes_first(gpus: int, per_node: int,
                                                                           expected: list[tuple[int, int]]) -> None:
    assert uniform_placement_sizes(gpus, per_node) == expected


def test_current_allocation_spreads_the_job_count_evenly_when_slurm_gives_no_per_node_count() -> None:
    assert current_allocation(running()) == OLD
    assert current_allocation(running(nodes=("gpu01", "gpu02"), gpus=8, gpus_per_node=None)) == {"gpu01": 4, "gpu02": 4}
    assert current_allocation(pending()) == {}


def test_the_new_placement_is_recorded_with_its_change_id(client, journal, clock) -> None:
    change = resizer(client, journal, clock).resize(running(), NEW, Checkpointing())
    tag = Tag.parse(client.update_job.call_args.kwargs["AdminComment"])
    assert (tag.state, tag.placed, tag.extra["change"]) == ("placed", change.new, str(change.id))
