"""What one placement pass did (`PassReport`), and the jobs whose handling failed (`Quarantine`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

QUARANTINE_S = (30.0, 600.0)       # a job whose handling failed is left alone this long, doubling


@dataclass
class PassReport:
    placed: dict[int, str] = field(default_factory=dict)      # job -> where
    waiting: list[int] = field(default_factory=list)
    renewed: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)         # held too long: Slurm's scheduler takes it
    annotated: list[int] = field(default_factory=list)        # shadow records, lapsed holds, unpinned
    errors: list[str] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)      # job -> the error its handling raised
    skipped: dict[int, str] = field(default_factory=dict)     # job -> why it was left alone this pass

    @property
    def busy(self) -> bool:
        return bool(self.placed or self.released or self.annotated)


class Quarantine:
    """Jobs whose handling raised: skipped for a while that doubles with each failure (not retried hot)."""

    def __init__(self, now: Callable[[], float]):
        self.now = now
        self._until: dict[int, tuple[float, float, str]] = {}

    def why(self, job_id: int) -> str | None:
        entry = self._until.get(job_id)
        return entry[2] if entry and self.now() < entry[0] else None

    def add(self, job_id: int, reason: str) -> None:
        low, high = QUARANTINE_S
        previous = self._until.get(job_id)
        wait = min(previous[1] * 2, high) if previous else low
        self._until[job_id] = (self.now() + wait, wait, reason)
        if len(self._until) > 10_000:   # bounded: forget the oldest
            for key in sorted(self._until, key=lambda k: self._until[k][0])[:1000]:
                del self._until[key]
