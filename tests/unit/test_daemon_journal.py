"""The resize journal: every step on disk, unfinished changes found again after a crash, limits' counts."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from slurm_liquid.daemon.journal import FINAL, PHASES, Journal

T0 = 1_700_000_000.0


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def journal(clock: Clock) -> Journal:
    return Journal(":memory:", now=clock)


def test_begin_writes_a_planned_change_with_both_placements(journal: Journal) -> None:
    change = journal.begin(7, "gpu01:2", "gpu[01-02]:4")
    assert (change.job_id, change.old, change.new, change.phase) == (7, "gpu01:2", "gpu[01-02]:4", "planned")
    assert change.started == change.updated == T0
    assert not change.finished
    assert journal.get(change.id) == change


def test_advance_moves_the_phase_keeps_the_start_and_keeps_a_note_until_replaced(journal: Journal,
                                                                                clock: Clock) -> None:
    change = journal.begin(7, "gpu01:2", "gpu01:4")
    clock.t += 5
    change = journal.advance(change, "signalled", "waiting for checkpoint")
    assert (change.phase, change.started, change.updated) == ("signalled", T0, T0 + 5)
    change = journal.advance(change, "requeued")
    assert change.note == "waiting for checkpoint"
    change = journal.advance(change, "done", "resized")
    assert change.finished and change.note == "resized"


@pytest.mark.parametrize("phase", ["", "finished", "DONE", "rolled_back"])
def test_an_unknown_phase_is_refused_and_nothing_changes(journal: Journal, phase: str) -> None:
    change = journal.begin(7, "gpu01:2", "gpu01:4")
    with pytest.raises(ValueError, match="unknown phase"):
        journal.advance(change, phase)
    assert journal.get(change.id).phase == "planned"


def test_unfinished_lists_every_change_not_in_a_final_phase_in_order(journal: Journal) -> None:
    ids = {}
    for job_id, phase in enumerate(PHASES + FINAL, start=1):
        change = journal.begin(job_id, "gpu01:1", "gpu01:2")
        ids[phase] = journal.advance(change, phase).id
    assert [c.id for c in journal.unfinished()] == [ids[p] for p in PHASES]


def test_recent_and_count_since_count_only_done_changes_started_since(journal: Journal, clock: Clock) -> None:
    def change(job_id: int, phase: str, at: float) -> None:
        clock.t = at
        journal.advance(journal.begin(job_id, "gpu01:1", "gpu01:2"), phase)

    change(1, "done", T0 - 100)          # too old
    change(1, "done", T0 - 10)
    change(1, "failed", T0 - 5)           # changed nothing
    change(1, "rolled-back", T0 - 4)
    change(1, "requeued", T0 - 3)         # not (yet) a change
    change(2, "done", T0 - 2)             # another job
    change(1, "done", T0)
    clock.t = T0 + 1
    assert [c.started for c in journal.recent(1, T0 - 10)] == [T0 - 10, T0]
    assert [c.job_id for c in journal.recent(2, T0 - 10)] == [2]
    assert journal.recent(3, T0 - 1000) == []
    assert journal.count_since(T0 - 10) == 3
    assert journal.count_since(T0 - 1000) == 4


def test_a_reopened_journal_still_has_the_half_done_change(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "state" / "journal.sqlite"      # the parent folder is made on first use
    first = Journal(path, now=clock)
    done = first.advance(first.begin(1, "gpu01:1", "gpu01:2"), "done")
    half = first.advance(first.begin(2, "gpu01:2", "gpu[01-02]:2"), "requeued")
    # No close(): a killed daemon does not close its database either.
    again = Journal(path, now=clock)
    assert again.unfinished() == [half]
    assert again.recent(1, T0 - 1) == [done]
    first.close()
    again.close()


def test_the_journal_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    Journal(path).close()
    # WAL is a property of the file: a fresh connection sees it too.
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def rows_on_disk(path: Path) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT job_id, phase FROM changes ORDER BY id").fetchall()


def test_a_batch_is_one_transaction_on_disk_at_its_end_even_when_it_ends_by_an_error(tmp_path: Path,
                                                                                      clock: Clock) -> None:
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, now=clock)
    with journal.batch():
        first = journal.begin(1, "gpu01:1", "gpu01:2")
        with journal.batch():                       # nested: joins the outer one
            journal.begin(2, "gpu01:1", "gpu01:2")
        assert journal.get(first.id).phase == "planned"   # its own writes are read back inside
        assert rows_on_disk(path) == []             # another process sees nothing yet
    assert rows_on_disk(path) == [(1, "planned"), (2, "planned")] and journal.batches == 1
    with pytest.raises(RuntimeError):
        with journal.batch():
            journal.advance(first, "signalled")
            raise RuntimeError("the slot failed after its signal was sent")
    assert rows_on_disk(path)[0] == (1, "signalled")   # what was sent stays written


def test_unbatched_writes_each_step_at_once_and_the_batch_goes_on(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, now=clock)
    with journal.batch():
        change = journal.begin(1, "gpu01:1", "gpu01:2")
        with journal.unbatched():
            assert rows_on_disk(path) == [(1, "planned")]      # committed on the way in
            journal.advance(change, "requeued")
            assert rows_on_disk(path) == [(1, "requeued")]     # its own transaction
        journal.begin(2, "gpu01:1", "gpu01:2")
        assert rows_on_disk(path) == [(1, "requeued")]
    assert rows_on_disk(path) == [(1, "requeued"), (2, "planned")]
    with journal.unbatched():                       # outside a batch: nothing to do
        journal.begin(3, "gpu01:1", "gpu01:2")
    assert len(rows_on_disk(path)) == 3
