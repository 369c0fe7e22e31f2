"""The node's staging area, root side: where copies live, which are ready, quota and LRU eviction.

    <dir>/                 root, 0755: the index (.index.json, root only)
    <dir>/u<uid>/          the user's, 0700: nobody else can even look inside
    <dir>/u<uid>/<key>-<digest>/{data/,manifest.json}    one staged copy, read-only
    <dir>/u<uid>/.tmp-...  a copy in progress (never visible as staged; removed at start)

Everything that touches a dataset runs in a worker as the job's user (worker.py): the user can make
the agent read only what they can read, and the copy is theirs. Root here only makes u<uid>/,
measures and removes copies (fsroot.py: through descriptors, never following links, iteratively).

A worker's answer is the user's claim (they may debug their own worker): its digest must be hex, its
counts numbers within the bounds sent; the copy's name is built from root's key and that checked
digest only, and what the copy takes is measured by root, not taken from the answer. Each user's
copies and transfers in progress together get at most `user_share` of the quota.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from slurm_liquid.asuser import User, run_as
from slurm_liquid.config import StagingConfig
from slurm_liquid.staging import fsroot
from slurm_liquid.staging.worker import OVERHEAD_INODES

log = logging.getLogger(__name__)
INDEX = ".index.json"
WORKER_GRACE_S = 30.0          # a scan walks the shared file system: bounded, but not by the copy's timeout
MAX_ANSWER = 64 << 10          # a worker's answer is one short JSON object
HEX = re.compile(r"[0-9a-f]{64}")
ENTRY_NAME = re.compile(r"[0-9a-f]{16}-[0-9a-f]{12}")

__all__ = ["Entry", "Outcome", "Store", "User", "key_of", "run_worker"]


@dataclass
class Entry:
    name: str                  # <key>-<digest12>: u<uid>/<name>
    uid: int
    source: str
    mode: str
    digest: str
    nbytes: int
    files: int
    took_s: float
    ready_at: float
    last_used: float
    file: str = ""             # a single copied file: its name under data/


@dataclass(frozen=True)
class Outcome:
    status: str                # ok | hit | missing | unreadable | over-quota | no-room | changed | ...
    entry: Entry | None = None
    detail: str = ""


def key_of(uid: int, source: str, mode: str) -> str:
    return hashlib.sha256(f"{uid}\0{source}\0{mode}".encode()).hexdigest()[:16]


def run_worker(user: User, request: dict[str, Any], timeout: float, python: str = sys.executable,
               stall_s: float | None = None) -> dict[str, Any]:
    """worker.py as `user` (setgroups, setgid, setuid before it runs): killed at `timeout` or after
    `stall_s` without progress; its answer read up to MAX_ANSWER bytes."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    request = {**request, "parent": os.getpid()}
    done = run_as(user, [python, "-m", "slurm_liquid.staging.worker"], json.dumps(request).encode(), timeout,
                  MAX_ANSWER, stall_s=stall_s, env=env)
    if done.status == "timeout":
        return {"status": "timeout", "detail": f"more than {timeout:.0f} s"}
    if done.status == "stalled":
        return {"status": "stalled", "detail": f"no progress for {stall_s:.0f} s"}
    try:
        answer = json.loads(done.out or b"{}") if done.status == "ok" else {}
    except ValueError:
        answer = {}
    if not isinstance(answer, dict) or not isinstance(answer.get("status"), str):
        return {"status": "failed", "detail": f"worker {done.status}, exit {done.returncode}: {done.err_tail[-200:]}"}
    return answer


def _count(answer: dict[str, Any], key: str, bound: int) -> int:
    """A number from a worker's answer, within 0..bound, else ValueError (a forged or broken answer)."""
    value = answer.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound:
        raise ValueError(f"the worker's {key} {value!r:.40} is not a count within 0..{bound}")
    return value


class Store:
    def __init__(self, cfg: StagingConfig, worker: Callable[..., dict] = run_worker,
                 clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.root = Path(cfg.dir)
        self.worker = worker
        self.clock = clock
        self.quota = int(cfg.quota_gb * 1e9)
        self.share = int(self.quota * cfg.user_share)     # one user's copies and transfers together
        self.entries: dict[str, Entry] = {}
        self.reserved: dict[str, tuple[int, int]] = {}     # transfers in progress: name -> (uid, bytes)
        self.evictions = 0
        self._lock = threading.RLock()

    # ------------------------------------------------------------ layout

    def prepare(self) -> None:
        """The area (root-owned), the index, and no leftovers: copies the index does not know
        (cut short by a kill, or put there by a user) are removed."""
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        st = os.lstat(self.root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise OSError(f"{self.root} must be a directory owned by the agent's user and writable by it only")
        self._load()
        known = {(e.uid, e.name) for e in self.entries.values()}
        present: set[tuple[int, str]] = set()
        with self._root_fd() as root_fd:
            for name, _ in fsroot._names(root_fd):
                if not name.startswith("u") or not name[1:].isdigit():
                    continue
                uid = int(name[1:])
                try:
                    home = self._open_home(root_fd, uid)
                except OSError as exc:
                    log.warning("staging: skipping %s: %s", name, exc)
                    continue
                try:
                    for child, is_dir in fsroot._names(home):
                        if (uid, child) in known and is_dir:
                            present.add((uid, child))
                            continue
                        log.info("staging: removing u%d/%s (not a finished copy)", uid, child)
                        self._remove_at(home, child)
                finally:
                    os.close(home)
        for name, entry in list(self.entries.items()):
            if (entry.uid, name) not in present:
                del self.entries[name]
        self._save()

    def _root_fd(self):
        import contextlib

        @contextlib.contextmanager
        def opened():
            fd = fsroot.open_dir(str(self.root))
            try:
                yield fd
            finally:
                os.close(fd)
        return opened()

    @staticmethod
    def _open_home(root_fd: int, uid: int, gid: int | None = None) -> int:
        """A descriptor on u<uid>/ (made, for the user, when gid is given): a directory, not a link,
        owned by the user, 0700."""
        name = f"u{uid}"
        if gid is not None:
            try:
                os.mkdir(name, 0o700, dir_fd=root_fd)
                os.chown(name, uid, gid, dir_fd=root_fd, follow_symlinks=False)
            except FileExistsError:
                pass
        fd = fsroot.open_dir(name, root_fd)
        st = os.fstat(fd)
        if st.st_uid != uid:
            os.close(fd)
            raise OSError(f"u{uid} is not owned by uid {uid}")
        os.fchmod(fd, 0o700)
        return fd

    def user_dir(self, user: User) -> Path:
        with self._root_fd() as root_fd:
            os.close(self._open_home(root_fd, user.uid, user.gid))
        return self.root / f"u{user.uid}"

    def path(self, entry: Entry) -> Path:
        return self.root / f"u{entry.uid}" / entry.name

    def local_path(self, entry: Entry) -> str:
        """What LIQUID_DATA names: the copied directory, the copied file, or the extracted archive."""
        data = self.path(entry) / "data"
        return str(data / entry.file) if entry.file else str(data)

    @staticmethod
    def _remove_at(home: int, name: str) -> None:
        try:
            fsroot.remove(home, name)
        except OSError as exc:
            log.warning("staging: cannot remove %s: %s", name, exc)

    def _remove(self, uid: int, name: str) -> None:
        """Remove u<uid>/<name> as root: through descriptors, never following a link."""
        try:
            with self._root_fd() as root_fd:
                home = self._open_home(root_fd, uid)
                try:
                    self._remove_at(home, name)
                finally:
                    os.close(home)
        except OSError as exc:
            log.warning("staging: cannot remove u%d/%s: %s", uid, name, exc)

    # ------------------------------------------------------------ the index

    def _load(self) -> None:
        try:
            fd = os.open(self.root / INDEX, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                st = os.fstat(handle.fileno())
                if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
                    raise ValueError("not a regular file of the agent's user")
                entries = {e["name"]: Entry(**e) for e in json.loads(handle.read())["entries"]}
            self.entries = {n: e for n, e in entries.items() if ENTRY_NAME.fullmatch(n)}
        except FileNotFoundError:
            self.entries = {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("staging: ignoring the index %s: %s", self.root / INDEX, exc)
            self.entries = {}

    def _save(self) -> None:
        with self._lock:
            data = {"version": 1, "entries": [asdict(e) for e in self.entries.values()]}
        tmp = self.root / (INDEX + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, self.root / INDEX)

    # ------------------------------------------------------------ lookups

    def current(self, uid: int, source: str, mode: str) -> Entry | None:
        """The newest copy of this user's dataset (checked against the source when a job wants it)."""
        key = key_of(uid, source, mode)
        with self._lock:
            found = [e for e in self.entries.values() if e.name.startswith(key + "-") and e.uid == uid]
        return max(found, key=lambda e: e.ready_at) if found else None

    def used(self, uid: int | None = None) -> int:
        """Bytes of the copies and transfers in progress (of one user, when uid is given)."""
        with self._lock:
            return (sum(e.nbytes for e in self.entries.values() if uid is None or e.uid == uid)
                    + sum(n for u, n in self.reserved.values() if uid is None or u == uid))

    def touch(self, names: Iterable[str]) -> None:
        now = self.clock()
        with self._lock:
            for name in names:
                if name in self.entries:
                    self.entries[name].last_used = now

    def make_room(self, nbytes: int, in_use: set[str], uid: int | None = None) -> bool:
        """Evict least-recently-used copies no job here uses until `nbytes` more fit the quota, and
        the user's share: their own copies first, others' only for the quota as a whole."""
        with self._lock:
            unused = sorted((e for e in self.entries.values() if e.name not in in_use), key=lambda e: e.last_used)
            if uid is not None:
                for victim in [e for e in unused if e.uid == uid]:
                    if self.used(uid) + nbytes <= self.share:
                        break
                    self.drop(victim, "evicted (the user's share is full; least recently used)")
                    self.evictions += 1
                if self.used(uid) + nbytes > self.share:
                    return False
            victims = [e for e in unused if e.name in self.entries]
            while self.used() + nbytes > self.quota and victims:
                self.drop(victims.pop(0), "evicted (least recently used)")
                self.evictions += 1
            return self.used() + nbytes <= self.quota

    def drop(self, entry: Entry, why: str) -> None:
        with self._lock:
            self.entries.pop(entry.name, None)
        log.info("staging: %s %s (%s, %d bytes): %s", "removed", entry.name, entry.source, entry.nbytes, why)
        self._remove(entry.uid, entry.name)
        self._save()

    # ------------------------------------------------------------ staging one dataset

    def _ask(self, user: User, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.worker(user, request, timeout, stall_s=self.cfg.stall_s)

    def stage(self, user: User, source: str, mode: str, in_use: set[str], bandwidth: float = 0.0,
              size_hint: int | None = None) -> Outcome:
        """Make a verified copy of `source` for `user` (or find one): reads happen as the user."""
        if size_hint and size_hint > self.share:
            return Outcome("over-quota", detail=f"size hint {size_hint} bytes > a user's share {self.share}")
        current = self.current(user.uid, source, mode)
        limits = {"source": source, "mode": mode, "max_bytes": self.share, "max_files": self.cfg.max_files}
        scan = self._ask(user, {"op": "scan", **limits, "existing": str(self.path(current)) if current else None},
                         max(WORKER_GRACE_S + 60, self.cfg.timeout_s if mode == "untar" else 0))
        if scan.get("status") != "ok":
            return Outcome(str(scan.get("status"))[:40], detail=str(scan.get("detail", ""))[:300])
        try:                     # the user's claim: checked before anything is named or reserved from it
            if not isinstance(scan.get("digest"), str) or not HEX.fullmatch(scan["digest"]):
                raise ValueError(f"the worker's digest {scan.get('digest')!r:.80} is not a sha256")
            nbytes = _count(scan, "bytes", self.share)
            _count(scan, "files", self.cfg.max_files + OVERHEAD_INODES)
        except ValueError as exc:
            return Outcome("failed", detail=str(exc))
        if current is not None and scan.get("hit") is True:
            self.touch([current.name])
            self._save()
            return Outcome("hit", current)
        if current is not None and current.name not in in_use:
            self.drop(current, "its source changed")
        name = f"{key_of(user.uid, source, mode)}-{scan['digest'][:12]}"
        with self._lock:
            if name in self.reserved:
                return Outcome("busy")
            if not self.make_room(nbytes, in_use | {name}, user.uid):
                return Outcome("no-room", detail=f"{nbytes} bytes do not fit beside copies in use")
            self.reserved[name] = (user.uid, nbytes)
        tmp = f".tmp-{name}-{os.getpid()}-{threading.get_ident()}"
        try:
            home = self.user_dir(user)
            with self._lock:
                self.entries.pop(name, None)
            self._remove(user.uid, name)               # a copy the index lost (or a user's): made again
            answer = self._ask(user, {"op": "copy", **limits, "max_bytes": nbytes, "digest": scan["digest"],
                                      "tmp": str(home / tmp), "final": str(home / name), "bandwidth": bandwidth},
                               self.cfg.timeout_s)
            if answer.get("status") != "ok":
                self._remove(user.uid, tmp)
                return Outcome(str(answer.get("status"))[:40], detail=str(answer.get("detail", ""))[:300])
            measured = self._measure(user.uid, name, nbytes)
            if measured is None:
                self._remove(user.uid, name)
                return Outcome("changed", detail="the copy was not what the worker made when root measured it")
            now = self.clock()
            files = answer.get("files") if isinstance(answer.get("files"), int) else 0
            entry = Entry(name, user.uid, source, mode, scan["digest"], measured, max(files, 0), _seconds(answer), now, now,
                          os.path.basename(source) if scan.get("kind") == "file" else "")
            with self._lock:
                self.entries[name] = entry
            self._save()
            return Outcome("ok", entry)
        except (OSError, ValueError) as exc:
            return Outcome("failed", detail=str(exc))
        finally:
            with self._lock:
                self.reserved.pop(name, None)

    def _measure(self, uid: int, name: str, limit: int) -> int | None:
        """What the finished copy takes, measured by root through descriptors; None when it is not a
        directory (a link swapped in), or holds more than was reserved for it."""
        try:
            with self._root_fd() as root_fd:
                home = self._open_home(root_fd, uid)
                try:
                    nbytes, _ = fsroot.measure(home, name, limit, self.cfg.max_files + OVERHEAD_INODES)
                finally:
                    os.close(home)
            return nbytes
        except (OSError, fsroot.Exceeded) as exc:
            log.warning("staging: u%d/%s refused when measured: %s", uid, name, exc)
            return None


def _seconds(answer: dict[str, Any]) -> float:
    value = answer.get("seconds")
    return float(value) if isinstance(value, (int, float)) and 0 <= value < 1e7 else 0.0
