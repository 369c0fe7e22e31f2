"""The daemon's own memory of resizes, in SQLite (WAL mode): what it is doing and what it did.

Every resize is written down before its first step and after each step, so that a daemon killed in the
middle finds the half-done change on restart and finishes or rolls it back (`Resizer.reconcile`), and
so that the limits (minimum time between changes of a job, changes per hour) survive restarts.

A write is its own transaction (one fsync), but for those inside `batch()`: the elastic slot writes
all the resizes it plans in one transaction before it sends any signal, and their marks after the
signals in another (at 4,096 nodes a slot started ~860 resizes: two fsyncs each were 0.4-0.5 s).
A daemon killed between the two leaves "planned" rows, which the next step closes as failed.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

# requeuing: `requeuehold` was sent but its effect is not known yet (it timed out, or Slurm did not
# answer the check): never final, the next step looks at the job again.
PHASES = ("planned", "signalled", "requeuing", "requeued", "updated", "released")
FINAL = ("done", "failed", "rolled-back")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id   INTEGER NOT NULL,
    old      TEXT NOT NULL,       -- placement before, e.g. gpu01:2
    new      TEXT NOT NULL,       -- placement wanted, e.g. gpu[01-02]:4
    phase    TEXT NOT NULL,
    started  REAL NOT NULL,
    updated  REAL NOT NULL,
    note     TEXT NOT NULL DEFAULT '',
    deadline REAL NOT NULL DEFAULT 0,  -- the checkpoint grace ends: requeue then, reported or not
    signal   TEXT NOT NULL DEFAULT 'USR1',
    why      TEXT NOT NULL DEFAULT '',
    tries    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS changes_job ON changes (job_id, started);
"""


_ADDED = (("deadline", "REAL NOT NULL DEFAULT 0"), ("signal", "TEXT NOT NULL DEFAULT 'USR1'"),
          ("why", "TEXT NOT NULL DEFAULT ''"), ("tries", "INTEGER NOT NULL DEFAULT 0"))
_COLUMNS = "id, job_id, old, new, phase, started, updated, note, deadline, signal, why, tries"


@dataclass(frozen=True)
class Change:
    id: int
    job_id: int
    old: str
    new: str
    phase: str
    started: float
    updated: float
    note: str = ""
    deadline: float = 0.0
    signal: str = "USR1"
    why: str = ""
    tries: int = 0

    @property
    def finished(self) -> bool:
        return self.phase in FINAL


class Journal:
    def __init__(self, path: str | Path, now=time.time):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # One writer (the daemon); autocommit so that every step is on disk before the next Slurm command.
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)
        have = {row[1] for row in self.db.execute("PRAGMA table_info(changes)")}
        for column, kind in _ADDED:   # a journal written by an older daemon
            if column not in have:
                self.db.execute(f"ALTER TABLE changes ADD COLUMN {column} {kind}")
        self.now = now
        self.batches = 0          # transactions committed by batch(): the benchmark reports them
        self._batched = False

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The writes inside go to disk together, in one transaction committed when the block ends,
        also when it ends by an exception: what was written then records Slurm commands already sent.
        Nested, it joins the outer batch."""
        if self._batched:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._batched = True
        try:
            yield
        finally:
            self._batched = False
            self._commit()

    @contextmanager
    def unbatched(self) -> Iterator[None]:
        """Inside a batch: what was written so far is committed now, and every write inside this block
        is its own transaction again (a resize step that sends more Slurm commands needs each of its
        steps on disk before the next command); the batch goes on after it."""
        if not self._batched:
            yield
            return
        self._batched = False
        self._commit()
        try:
            yield
        finally:
            self.db.execute("BEGIN IMMEDIATE")
            self._batched = True

    def _commit(self) -> None:
        self.db.execute("COMMIT")
        self.batches += 1

    def begin(self, job_id: int, old: str, new: str, grace_s: float = 0.0, signal: str = "USR1",
              why: str = "") -> Change:
        t = self.now()
        cur = self.db.execute("INSERT INTO changes (job_id, old, new, phase, started, updated, deadline, signal, why) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                              (int(job_id), old, new, "planned", t, t, t + grace_s, signal, why))
        return self.get(int(cur.lastrowid))

    def advance(self, change: Change, phase: str, note: str = "", tried: bool = False) -> Change:
        if phase not in PHASES + FINAL:
            raise ValueError(f"unknown phase {phase!r}")
        self.db.execute("UPDATE changes SET phase = ?, updated = ?, note = ?, tries = tries + ? WHERE id = ?",
                        (phase, self.now(), note or change.note, int(tried), change.id))
        return self.get(change.id)

    def get(self, change_id: int) -> Change:
        row = self.db.execute(f"SELECT {_COLUMNS} FROM changes WHERE id = ?",
                              (change_id,)).fetchone()
        return Change(*row)

    def unfinished(self) -> list[Change]:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM changes WHERE phase NOT IN (?, ?, ?) ORDER BY id",
                               FINAL).fetchall()
        return [Change(*r) for r in rows]

    def recent(self, job_id: int, since: float) -> list[Change]:
        """Changes of `job_id` started after `since` that did change the job (done ones)."""
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM changes WHERE job_id = ? AND started >= ? "
                               "AND phase = 'done' ORDER BY id",
                               (int(job_id), since)).fetchall()
        return [Change(*r) for r in rows]

    def count_since(self, since: float) -> int:
        return self.db.execute("SELECT COUNT(*) FROM changes WHERE started >= ? AND phase = 'done'",
                               (since,)).fetchone()[0]
