"""The node agent's staging thread: the datasets of jobs placed, running or predicted on this node,
copied to local disk before they start (store.py, as the job's user), and what the TaskProlog exports.

Every [staging] poll_s it asks Slurm for the jobs (one squeue). A job is this node's business when
it runs here, when the daemon placed it here (its tag), or when the daemon predicts it here while it
waits for GPUs (the `liquid-stage/1` hint): all three are in root-only fields. Its datasets are the
job's claim, read from its record and checked by the worker as its user.

For each such job: /run/slurm-liquid-agent/staged/<job> holds `export LIQUID_DATA=...` lines, the
local copy when it is complete and checked for this job, else the shared path (the TaskProlog prints
it; the job never waits). When the job starts, the agent writes its node's part of `staged=` (or
`err=dataset:<why>`) into the job's record.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from slurm_liquid.config import StagingConfig
from slurm_liquid.ledger import Record, Tag, TagState
from slurm_liquid.slurm import Job, SlurmError
from slurm_liquid.ledger.staging import ERR_PREFIX, Hint, Part, Wanted, env_lines, merge_staged, wanted
from slurm_liquid.staging.store import Entry, Store, User

log = logging.getLogger(__name__)
NO_ROOM_RETRY_S = 20.0
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")

Key = tuple[int, str, str]        # uid, source, mode


@dataclass
class KeyState:
    status: str = "queued"        # queued | running | ready | failed | no-room
    entry: Entry | None = None
    reason: str = ""
    at: float = 0.0               # last change
    hit: bool = False


@dataclass
class JobWant:
    job_id: int
    user: User
    keys: list[Key]
    sources: list[str]
    first_seen: float
    size_hint: int | None = None
    ready_at: dict[Key, float] = field(default_factory=dict)   # when each copy was checked for this job
    recorded: bool = False        # staged= written with the job running
    noted_ready: bool = False     # staged= written with the time the data was ready (job still pending)
    errors_written: set[str] = field(default_factory=set)


def mode_for(path: str, mode: str) -> str:
    """untar applies to archives; everything else is copied as it is."""
    return "untar" if mode == "untar" and path.endswith(ARCHIVE_SUFFIXES) else "copy"


def nodes_of(job: Job) -> tuple[str, ...]:
    """Where a job runs, was placed or is predicted, from fields users cannot write."""
    if job.is_running or job.nodes:
        return tuple(job.nodes)
    tag = Tag.parse(job.admin_comment)
    placement = tag.placement() if tag and tag.state == TagState.PLACED else None
    if placement is not None:
        return tuple(placement.nodes)
    hint = Hint.parse(job.admin_comment)
    return hint.nodes if hint else ()


class Stager:
    def __init__(self, cfg: StagingConfig, client: Any, node: str, spool_dir: str = "/run/slurm-liquid-agent",
                 store: Store | None = None, users: Callable[[str], User] = User.of,
                 clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.client = client
        self.node = node
        self.store = store or Store(cfg, clock=clock)
        self.users = users
        self.clock = clock
        self.env_dir = Path(spool_dir) / "staged"
        self.jobs: dict[int, JobWant] = {}
        self.keys: dict[Key, KeyState] = {}
        self.work: queue.Queue[tuple[Key, User, int | None] | None] = queue.Queue()
        self.metrics = _Metrics()
        self._lock = threading.RLock()
        self._errors: set[str] = set()
        self._busy: dict[int, int] = {}          # uid -> transfers running
        self._parked: list[tuple[Key, User, int | None]] = []

    # ------------------------------------------------------------ start

    def start(self, threads: bool = True) -> None:
        self.store.prepare()
        self.env_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(self.env_dir, 0o755)              # the TaskProlog (the job's user) reads; only root writes
        for stale in self.env_dir.iterdir():
            stale.unlink(missing_ok=True)
        if threads:
            for i in range(self.cfg.transfers):
                threading.Thread(target=self.transfer_forever, name=f"staging-{i}", daemon=True).start()
            threading.Thread(target=self.poll_forever, name="staging-poll", daemon=True).start()

    def poll_forever(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.poll(self.client.jobs())
            except SlurmError as exc:
                self._once(f"asking Slurm for jobs failed: {exc}")
            except Exception:  # noqa: BLE001 -- staging must never stop the agent
                log.exception("staging: poll failed")
            time.sleep(max(self.cfg.poll_s - (time.monotonic() - started), 0.2))

    def transfer_forever(self) -> None:
        """One transfer thread. A user holds at most half the threads (at least one): a user whose
        datasets hang (until the worker's stall or timeout bound) never blocks everyone else's."""
        while True:
            item = self.work.get()
            if item is None:
                return
            uid = item[0][0]
            with self._lock:
                if self._busy.get(uid, 0) >= max(1, self.cfg.transfers // 2):
                    self._parked.append(item)        # taken up again when one of theirs ends
                    continue
                self._busy[uid] = self._busy.get(uid, 0) + 1
            try:
                self.transfer(*item)
            finally:
                with self._lock:
                    self._busy[uid] -= 1
                    mine = [i for i in self._parked if i[0][0] == uid]
                    if mine:
                        self._parked.remove(mine[0])
                        self.work.put(mine[0])

    # ------------------------------------------------------------ one poll

    def poll(self, jobs: list[Job]) -> None:
        now = self.clock()
        seen: set[int] = set()
        for job in jobs:
            if job.is_finished or not (job.is_pending or job.is_running):
                continue
            if self.node not in nodes_of(job):
                continue
            jw = self.jobs.get(job.job_id)
            if jw is None:              # once known, a job stays (a later record may cut its spec short)
                want = wanted(job.comment)
                jw = self._job(job, want, now) if want is not None else None
            if jw is None:
                continue
            seen.add(job.job_id)
            for key in jw.keys:
                self._schedule(key, jw)
            self._write_env(jw)
            self._record(job, jw)
        with self._lock:
            for job_id in set(self.jobs) - seen:
                del self.jobs[job_id]
                (self.env_dir / str(job_id)).unlink(missing_ok=True)
        self.store.touch(self.in_use())
        self.metrics.update(self)

    def _job(self, job: Job, want: Wanted, now: float) -> JobWant | None:
        with self._lock:
            jw = self.jobs.get(job.job_id)
            if jw is not None:
                return jw
            try:
                user = self.users(job.user)
            except KeyError:
                self._write_err(job, "unknown-user")
                return None
            keys = [(user.uid, path, mode_for(path, want.mode)) for path in want.paths]
            jw = self.jobs[job.job_id] = JobWant(job.job_id, user, keys, list(want.paths), now, want.size_hint)
            return jw

    def _schedule(self, key: Key, jw: JobWant) -> None:
        """Queue a transfer (or a check that an earlier copy still matches the source) when needed."""
        now = self.clock()
        with self._lock:
            state = self.keys.get(key)
            if state is not None and state.status in ("queued", "running"):
                return
            if state is not None and state.status == "ready":
                if key in jw.ready_at:
                    return
                if state.at >= jw.first_seen and state.entry is not None:   # checked since this job came
                    jw.ready_at[key] = state.at
                    return
            if state is not None and state.status == "failed" and now - state.at < self.cfg.retry_s:
                return
            if state is not None and state.status == "no-room" and now - state.at < NO_ROOM_RETRY_S:
                return
            self.keys[key] = KeyState("queued", state.entry if state else None, at=now)
        self.work.put((key, jw.user, jw.size_hint))

    # ------------------------------------------------------------ one transfer

    def transfer(self, key: Key, user: User, size_hint: int | None) -> None:
        uid, source, mode = key
        with self._lock:
            self.keys[key].status = "running"
        bandwidth = self.cfg.bandwidth_mb_s * 1e6 / self.cfg.transfers
        evicted = self.store.evictions
        try:
            outcome = self.store.stage(user, source, mode, self.in_use(), bandwidth, size_hint)
        except Exception as exc:  # noqa: BLE001 -- one dataset must not end the thread
            log.exception("staging: %s for uid %d failed", source, uid)
            outcome = None
            status, detail = "failed", str(exc)
        else:
            status, detail = outcome.status, outcome.detail
        now = self.clock()
        with self._lock:
            state = self.keys[key]
            state.at = now
            if status in ("ok", "hit") and outcome is not None:
                state.status, state.entry, state.hit, state.reason = "ready", outcome.entry, status == "hit", ""
                for jw in self.jobs.values():
                    if key in jw.keys:
                        jw.ready_at[key] = now
            elif status in ("no-room", "busy"):
                state.status, state.reason = "no-room", detail
            else:
                state.status, state.entry, state.reason = "failed", None, status
        self.metrics.count(status, outcome.entry.nbytes if outcome and outcome.entry and status == "ok" else 0,
                           self.store.evictions - evicted)
        log.info("staging: %s (uid %d, %s): %s%s", source, uid, mode, status, f" ({detail})" if detail else "")
        with self._lock:
            wants = [jw for jw in self.jobs.values() if key in jw.keys]
        for jw in wants:
            self._write_env(jw)

    # ------------------------------------------------------------ what jobs see and records say

    def in_use(self) -> set[str]:
        with self._lock:
            return {s.entry.name for k, s in self.keys.items() if s.entry is not None
                    and any(k in jw.keys for jw in self.jobs.values())}

    def local_paths(self, jw: JobWant) -> list[str]:
        """Per dataset: the local copy when it is ready and checked for this job, else the shared path."""
        out = []
        with self._lock:
            for key, source in zip(jw.keys, jw.sources):
                state = self.keys.get(key)
                ok = state is not None and state.status == "ready" and state.entry is not None and key in jw.ready_at
                out.append(self.store.local_path(state.entry) if ok else source)
        return out

    def _write_env(self, jw: JobWant) -> None:
        text = env_lines(self.local_paths(jw))
        path = self.env_dir / str(jw.job_id)
        try:
            if path.exists() and path.read_text() == text:
                return
            tmp = self.env_dir / f".{jw.job_id}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            # root's file, readable by the job's group (the TaskProlog runs as the user); not theirs to edit
            os.chown(tmp, 0 if os.geteuid() == 0 else -1, jw.user.gid)
            os.chmod(tmp, 0o640)
            os.replace(tmp, path)
        except OSError as exc:
            self._once(f"cannot write {path}: {exc}")

    def _record(self, job: Job, jw: JobWant) -> None:
        with self._lock:
            states = [self.keys.get(k) for k in jw.keys]
            failed = sorted({s.reason for s in states if s is not None and s.status == "failed"})
        for reason in failed:
            if reason not in jw.errors_written:
                jw.errors_written.add(reason)
                self._write_err(job, reason)
        if jw.recorded or failed or not (job.is_running or job.is_pending):
            return
        start = job.start_time.timestamp() if job.is_running and job.start_time else None
        with self._lock:
            ready = [(s, jw.ready_at.get(k)) for k, s in zip(jw.keys, states)]
        complete = all(s is not None and s.status == "ready" and s.entry and at is not None
                       and (start is None or at <= start + 1) for s, at in ready)
        if job.is_pending and (not complete or jw.noted_ready):
            return
        entries = [s.entry for s, _ in ready if s is not None and s.entry is not None]
        if not complete:
            took = "-"
        elif all(s.hit for s, _ in ready):
            took = "hit"
        else:
            took = f"{round(max(e.took_s for e in entries))}s"
        at = max((a for _, a in ready if a is not None), default=0.0)
        # pending: when it was ready (a job may end before the agent sees it run); running: the lead
        part = Part(self.node, sum(e.nbytes for e in entries) if complete else None, took,
                    None if not complete else (round(start - at) if start is not None else None),
                    ready_at=round(at) if complete and start is None else None)
        jw.noted_ready = True
        jw.recorded = job.is_running
        self._update_record(job.job_id, lambda r: r.with_fields(staged=merge_staged(r.get("staged"), part)))

    def _write_err(self, job: Job, reason: str) -> None:
        self._update_record(job.job_id, lambda r: r.with_fields(err=ERR_PREFIX + reason))

    def _update_record(self, job_id: int, change: Callable[[Record], Record]) -> None:
        """Read the job's record fresh, change it, write it back (nodes of one job merge their parts)."""
        for _ in range(2):
            try:
                fresh = self.client.jobs([job_id])
                if not fresh:
                    return
                record = Record.parse(fresh[0].comment)
                if record is None:
                    log.info("staging: job %d has no record to note staging in", job_id)
                    return
                line = change(record).render()
                if line == fresh[0].comment:
                    return
                self.client.update_job(job_id, Comment=line)
                after = self.client.jobs([job_id])
                if after and Record.parse(after[0].comment) == Record.parse(line):
                    return
            except SlurmError as exc:
                self._once(f"job {job_id}: writing its record failed: {exc}")
                return

    def _once(self, message: str) -> None:
        if message not in self._errors:
            self._errors.add(message)
            log.warning("staging: %s (said once)", message)


_COLLECTORS: dict[str, Any] = {}


class _Metrics:
    """Prometheus counters (one set per process), served by the agent's metrics port when it has one."""

    def __init__(self) -> None:
        try:
            from prometheus_client import Counter, Gauge
        except ImportError:  # pragma: no cover
            self.ok = False
            return
        self.ok = True
        if not _COLLECTORS:
            _COLLECTORS.update(
                bytes=Counter("liquid_staging_bytes", "bytes copied to this node's staging area"),
                hits=Counter("liquid_staging_hits", "datasets found already staged (reused)"),
                copies=Counter("liquid_staging_copies", "datasets copied"),
                evictions=Counter("liquid_staging_evictions", "staged copies evicted (least recently used)"),
                failures=Counter("liquid_staging_failures", "datasets not staged", ["reason"]),
                used=Gauge("liquid_staging_used_bytes", "bytes in this node's staging area"),
                jobs=Gauge("liquid_staging_jobs", "jobs with datasets for this node"))
        self.__dict__.update(_COLLECTORS)

    def count(self, status: str, nbytes: int, evicted: int) -> None:
        if not self.ok:
            return
        if status == "ok":
            self.copies.inc()
            self.bytes.inc(nbytes)
        elif status == "hit":
            self.hits.inc()
        elif status not in ("no-room", "busy"):
            self.failures.labels(status).inc()
        if evicted > 0:
            self.evictions.inc(evicted)

    def update(self, stager: "Stager") -> None:
        if self.ok:
            self.used.set(stager.store.used())
            self.jobs.set(len(stager.jobs))


def start(cfg: StagingConfig, client: Any, node: str, spool_dir: str) -> Stager | None:
    """The staging threads of `slurm-liquid agent`; None (logged) when the area cannot be used."""
    stager = Stager(cfg, client, node, spool_dir)
    try:
        stager.start()
    except OSError as exc:
        log.warning("staging: off on this node: %s", exc)
        return None
    log.info("staging: datasets into %s (quota %g GB, %d transfers)", cfg.dir, cfg.quota_gb, cfg.transfers)
    return stager
