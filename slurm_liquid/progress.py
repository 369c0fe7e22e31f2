"""Progress reports from elastic training jobs to the slurm-liquid daemon (standard library only).

A training loop calls `report(step, total, ...)` now and then and `checkpoint_requested()` once per
step; when the daemon wants to resize the job it sends SIGUSR1, the loop writes a checkpoint and
reports it, the daemon requeues the job with a new GPU count, and on restart `resume()` says which
checkpoint to load and how many GPUs the job now has. Outside a Slurm job every call is a no-op,
and no call ever raises into the training loop: a failed write is said once on stderr.

Each job's latest report is one JSON file, `<dir>/<job_id>.json`, replaced atomically (a temporary
file in the same directory, then `os.replace`), so the daemon never reads half a report. `<dir>` is
$SLURM_LIQUID_PROGRESS_DIR or DEFAULT_DIR. Slurm keeps a job's id across requeues, which is how a
restarted job finds its own last report.

Why reports cannot be forged for another user's job: the directory is world-writable with the
sticky bit (mode 1777, like /tmp; `ensure_directory` makes it, owned by root). Any user can create
files there, but a file's owner is whoever created it, and the daemon (`read_report`) accepts a
report only if it is a regular file, not a symlink, with one link, owned by the job's user. So
alice can write `<bob's job>.json` but the daemon ignores it. The sticky bit adds that only a
file's owner (or root, or the directory's owner) may delete or rename over it, so nobody can
replace bob's genuine report either. The job itself checks ownership of its own last report before
`resume()` trusts the checkpoint path in it, since loading a checkpoint may run code.

The weakness that remains: another user can create a victim's file name before the victim's job
writes it (job ids are predictable). The victim's `os.replace` onto it then fails (sticky bit), its
reports are lost with one warning, and the daemon ignores the squatted file (wrong owner): the job
runs on, it just cannot be resized with its progress known. Progress is lost, nothing else.
Reports are readable by everyone (mode 0644): they hold step counts and checkpoint paths, no secrets.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

DEFAULT_DIR = "/shared/slurm-liquid/progress"
DIR_ENV = "SLURM_LIQUID_PROGRESS_DIR"
VERSION = 1
MAX_REPORT_BYTES = 64 * 1024
MIN_INTERVAL_S = 5.0

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    # stderr, not `warnings`: under `python -W error` a warning would raise into the training loop.
    if key in _warned:
        return
    _warned.add(key)
    try:
        print(f"slurm-liquid progress: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed or gone: stay silent rather than raise
        pass


# -- where the report goes and what the job holds ----------------------------------------------

def progress_dir() -> Path:
    """The report directory: $SLURM_LIQUID_PROGRESS_DIR or DEFAULT_DIR."""
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


def current_job_id() -> int | None:
    """$SLURM_JOB_ID as an integer, None outside a Slurm job (or if it is not a plain number,
    which also keeps anything like '../x' out of the report's file name)."""
    value = os.environ.get("SLURM_JOB_ID", "").strip()
    return int(value) if value.isdigit() else None


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _visible_devices() -> int:
    # CUDA stops enumerating at the first invalid entry; Slurm writes NoDevFiles for none.
    count = 0
    for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(","):
        entry = entry.strip()
        if not entry or entry == "NoDevFiles" or entry.startswith("-"):
            break
        count += 1
    return count


def allocation() -> tuple[int, int]:
    """(gpus, nodes) of the current allocation, from the environment Slurm sets at each start.

    SLURM_GPUS_ON_NODE x SLURM_JOB_NUM_NODES (or SLURM_NNODES), which assumes the same GPU count
    on every node, as `--gres=gpu:N` gives. These are set when the job starts, so they follow a
    resize across a requeue (SLURM_GPUS, set at submission, would not). Without them, the count
    of CUDA_VISIBLE_DEVICES per node. (0, 1) outside Slurm on a machine without GPUs.
    """
    nodes = _env_int("SLURM_JOB_NUM_NODES", "SLURM_NNODES") or 1
    per_node = _env_int("SLURM_GPUS_ON_NODE")
    if per_node is None:
        per_node = _visible_devices()
    return per_node * nodes, nodes


# -- the checkpoint signal ----------------------------------------------------------------------

_requested = False
_installed: set[int] = set()
_lazy_tried = False


def _handler(previous: Any) -> Callable[[int, Any], None]:
    def handle(signum: int, frame: Any) -> None:
        global _requested
        _requested = True
        if callable(previous):  # keep a handler the job had installed itself
            previous(signum, frame)
    return handle


def install(signal_name: str = "USR1") -> bool:
    """Catch `signal_name` (USR1, SIGUSR1, TERM, ...) as the checkpoint request; False if it cannot
    (unknown name, or not called from the main thread, where Python allows signal handlers)."""
    try:
        signum = signal.Signals["SIG" + signal_name.upper().removeprefix("SIG")]
        if signum not in _installed:
            signal.signal(signum, _handler(signal.getsignal(signum)))
            if not _installed:
                atexit.register(_ignore_at_exit)
            _installed.add(signum)
    except (KeyError, ValueError, OSError) as err:
        _warn_once("install", f"cannot catch signal {signal_name!r} ({err}); checkpoint requests will be missed")
        return False
    return True


def _ignore_at_exit() -> None:
    """A checkpoint request that arrives while Python shuts down would meet the default action
    (Python restores it for signals it handled) and kill a job that finished its work: ignore it."""
    for signum in _installed:
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (ValueError, OSError):
            pass


def _install_lazily() -> None:
    global _lazy_tried
    if not _installed and not _lazy_tried:
        _lazy_tried = True
        install()


def checkpoint_requested() -> bool:
    """True once the job got the checkpoint signal (until `clear()`)."""
    _install_lazily()
    return _requested


def clear() -> None:
    """Forget the request: call it before writing the checkpoint, so that a new request arriving
    during the write is not lost."""
    global _requested
    _requested = False


# -- writing and reading reports ----------------------------------------------------------------

def atomic_write_json(path: str | os.PathLike[str], data: Any, mode: int = 0o644) -> None:
    """Write `data` as JSON to `path` so that readers see the old file or the new one, never part.
    Raises OSError; leaves no temporary file behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), mode)  # mkstemp makes 0600; the daemon may not run as root
            json.dump(data, fh, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_report(directory: str | os.PathLike[str], job_id: int | str, owner_uid: int) -> dict | None:
    """The daemon side: job `job_id`'s report if it is genuine, else None (see the module docstring).

    Genuine: a regular file (symlinks are not followed), with a single link, owned by `owner_uid`,
    at most MAX_REPORT_BYTES, holding a JSON object with version 1 and this job id.
    """
    try:
        want = int(job_id)
        path = os.path.join(os.fspath(directory), f"{want}.json")
        before = os.lstat(path)
        if not _trusted(before, owner_uid):
            return None
        # O_NOFOLLOW and O_NONBLOCK: a file swapped for a symlink or a FIFO after lstat is refused
        # instead of followed or waited on; fstat checks it is still the file lstat saw.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            now = os.fstat(fh.fileno())
            if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not _trusted(now, owner_uid):
                return None
            raw = fh.read(MAX_REPORT_BYTES + 1)
        if len(raw) > MAX_REPORT_BYTES:
            return None
        report = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # ValueError: bad id, bad UTF-8, bad JSON
        return None
    if not isinstance(report, dict) or not _is_int(report.get("version"), VERSION) \
            or not _is_int(report.get("job_id"), want):
        return None
    return report


def _trusted(st: os.stat_result, owner_uid: int) -> bool:
    # One link: a hard link to some other file of the owner is not a report they wrote here.
    return (stat.S_ISREG(st.st_mode) and st.st_uid == owner_uid and st.st_nlink == 1
            and st.st_size <= MAX_REPORT_BYTES)


def _is_int(value: Any, expected: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value == expected


def _checkpoint_of(report: dict | None) -> tuple[str, int, float] | None:
    """(path, step, time) of the checkpoint a report names, None if it names none."""
    if not report or not isinstance(report.get("checkpoint"), str):
        return None
    step, when = report.get("checkpoint_step"), report.get("checkpoint_time")
    valid_step = isinstance(step, int) and not isinstance(step, bool) and step >= 0
    return (report["checkpoint"], step if valid_step else 0,
            float(when) if isinstance(when, (int, float)) else 0.0)


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)  # numpy and torch scalars become plain floats
    return value if math.isfinite(value) else None


def ensure_directory(path: str | os.PathLike[str]) -> Path:
    """Create the report directory with mode 1777 (run as root by the daemon or the admin, so that the
    directory is root's and nobody can rename it away). Parents get the default mode.

    Every component is opened without following symlinks (O_NOFOLLOW, relative to its parent's
    descriptor) and the mode is set on the descriptor: a symlink planted anywhere on the path cannot
    make root change the mode of some other directory. A last component owned by another user (made
    before the admin's) is refused rather than adopted. Raises OSError."""
    path = Path(os.path.abspath(path))
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for part in path.parts[1:]:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if not _trusted_link(fd, part):
                    raise OSError(exc.errno, f"{path}: {part} is not a directory, or a symlink that "
                                  "someone other than this daemon's user could have made") from None
                child = os.open(part, flags & ~os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise OSError(f"{path} belongs to uid {st.st_uid}, not to this daemon's uid {os.geteuid()}: "
                          "remove it, the daemon makes it anew")
        if stat.S_IMODE(st.st_mode) != 0o1777:
            os.fchmod(fd, 0o1777)  # after mkdir: the umask would have cleared the write bits
    finally:
        os.close(fd)
    return path


def _trusted_link(parent_fd: int, name: str) -> bool:
    """A symlink (e.g. /shared -> /mnt/shared) made by this daemon's user in a directory only that user
    can write: an admin's own link, safe to follow."""
    try:
        link = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return False
    parent = os.fstat(parent_fd)
    return (stat.S_ISLNK(link.st_mode) and link.st_uid == os.geteuid() and parent.st_uid == os.geteuid()
            and not parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


MAX_CLAIM = 10 ** 15   # steps, totals, epochs: past this a report is not believed


@dataclass(frozen=True)
class Progress:
    """What the daemon takes from a job's report: each value bounded and checked, or None.

    A report is the job's own claim (its user writes the file): it may steer that job's resize only
    within the job's trusted range, and no value in it can make the daemon raise."""

    step: int | None = None
    total: int | None = None
    epoch: int = 0
    samples_per_s: float | None = None
    checkpoint_time: float | None = None
    gpus: int | None = None       # the allocation the job saw when it wrote the report
    nodes: int | None = None
    time: float | None = None     # when it wrote it

    @property
    def remaining(self) -> float | None:
        if self.step is None or self.total is None:
            return None
        return float(max(self.total - self.step, 1))

    @classmethod
    def of(cls, report: Any) -> "Progress":
        if not isinstance(report, dict):
            return cls()
        return cls(_count(report.get("step")), _count(report.get("total")), _count(report.get("epoch")) or 0,
                   _positive(report.get("samples_per_s")), _positive(report.get("checkpoint_time")),
                   _count(report.get("gpus")), _count(report.get("nodes")), _positive(report.get("time")))

    def measured_on(self, gpus: int, nodes: int, since: float | None) -> bool:
        """Whether the speed in this report was measured on `gpus` GPUs over `nodes` nodes, written
        after `since` (the allocation's start): a report from before a resize says nothing of the new
        width."""
        return (self.samples_per_s is not None and self.gpus == gpus and self.nodes == nodes
                and (since is None or (self.time is not None and self.time >= since)))


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if not 0 <= value <= MAX_CLAIM:
        return None
    return int(value)


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:   # a 400-digit int
        return None
    return value if math.isfinite(value) and 0 <= value <= MAX_CLAIM else None


@dataclass(frozen=True)
class Resume:
    """Where a (re)started job stands: its last reported checkpoint (None: start from scratch), the
    step at which that checkpoint was taken (0 without one), and the GPUs it has now."""

    checkpoint: str | None
    step: int
    gpus: int
    nodes: int


class Reporter:
    """The state behind `report` and `resume`: the rate limit and the last checkpoint, which every
    report repeats so that the daemon and a restarted job always know it. Tests inject `clock`."""

    def __init__(self, min_interval_s: float = MIN_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._last_attempt: float | None = None
        self._job: int | None = None
        self._checkpoint: tuple[str, int, float] | None = None  # path, step, time

    def _previous(self, job: int) -> dict | None:
        return read_report(progress_dir(), job, os.getuid())

    def _load_checkpoint(self, job: int) -> None:
        # A restarted process starts from its own last report, so that reports before its next
        # checkpoint still name the one it resumed from.
        if self._job == job:
            return
        self._job, self._checkpoint = job, _checkpoint_of(self._previous(job))

    def report(self, step: int, total: int | None = None, samples_per_s: float | None = None,
               checkpoint: str | os.PathLike[str] | None = None, epoch: int | None = None,
               *, force: bool = False) -> bool:
        """Write this job's report; True if it was written. At most one write per `min_interval_s`,
        except a checkpoint, the final step (step >= total) or `force`, which always write."""
        _install_lazily()
        try:
            return self._report(step, total, samples_per_s, checkpoint, epoch, force)
        except Exception as err:  # progress reports must never stop the training
            reason = getattr(err, "strerror", None) or err  # not the temporary file's name
            _warn_once("write", f"cannot report progress to {progress_dir()} ({reason}); "
                       "training goes on, without progress reports")
            return False

    def _report(self, step: int, total: int | None, samples_per_s: float | None,
                checkpoint: str | os.PathLike[str] | None, epoch: int | None, force: bool) -> bool:
        job = current_job_id()
        if job is None:
            return False
        step, total = int(step), None if total is None else int(total)
        now = self.clock()
        final = total is not None and step >= total
        if not (checkpoint is not None or final or force or self._last_attempt is None
                or now - self._last_attempt >= self.min_interval_s):
            return False
        # Failed attempts count too, so a broken file system is not retried on every step.
        self._last_attempt = now
        self._load_checkpoint(job)
        if checkpoint is not None:
            self._checkpoint = (os.fspath(checkpoint), step, time.time())
        gpus, nodes = allocation()
        data = {"version": VERSION, "job_id": job, "step": step, "total": total,
                "samples_per_s": _finite(samples_per_s), "epoch": None if epoch is None else int(epoch),
                "checkpoint": None, "checkpoint_step": None, "checkpoint_time": None,
                "gpus": gpus, "nodes": nodes, "time": time.time()}
        if self._checkpoint:
            data["checkpoint"], data["checkpoint_step"], data["checkpoint_time"] = self._checkpoint
        atomic_write_json(progress_dir() / f"{job}.json", data)
        return True

    def resume(self) -> Resume:
        """This job's last reported checkpoint and the allocation it has now."""
        gpus, nodes = allocation()
        job = current_job_id()
        found = _checkpoint_of(self._previous(job)) if job is not None else None
        if found is None:
            return Resume(None, 0, gpus, nodes)
        return Resume(found[0], found[1], gpus, nodes)


_default = Reporter()


def report(step: int, total: int | None = None, samples_per_s: float | None = None,
           checkpoint: str | os.PathLike[str] | None = None, epoch: int | None = None,
           *, force: bool = False) -> bool:
    """Report progress (see `Reporter.report`); never raises, False when nothing was written."""
    return _default.report(step, total, samples_per_s, checkpoint, epoch, force=force)


def resume() -> Resume:
    """Where this job resumes: its last reported checkpoint and its current GPUs (see `Resume`)."""
    return _default.resume()
