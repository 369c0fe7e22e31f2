"""What one placement pass did (`PassReport`), the jobs whose handling failed (`Quarantine`), and the
pass's lease renewals (`renew_leases`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from slurm_liquid.slurm import SlurmClient, SlurmError

QUARANTINE_S = (30.0, 600.0)       # a job whose handling failed is left alone this long, doubling
RENEW_BATCH = 500                  # lease renewals per scontrol command (one RPC per job inside it)


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


def renew_leases(client: SlurmClient, renewals: dict[int, list[int]], report: PassReport) -> None:
    """The pass's lease renewals (lease seconds -> jobs), one scontrol command per lease length (and
    RENEW_BATCH jobs) instead of one per job; a command that fails (a job ended since the read) is done
    again job by job."""
    for lease, job_ids in sorted(renewals.items()):
        for start in range(0, len(job_ids), RENEW_BATCH):
            chunk = job_ids[start:start + RENEW_BATCH]
            try:
                client.update_jobs(chunk, StartTime=f"now+{lease}")
                report.renewed.extend(chunk)
                continue
            except SlurmError:
                pass
            for job_id in chunk:
                try:
                    client.update_job(job_id, StartTime=f"now+{lease}")
                    report.renewed.append(job_id)
                except SlurmError as exc:
                    report.errors.append(f"job {job_id}: renewing its hold failed: {exc}")
