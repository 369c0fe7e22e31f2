"""The node's staging area, root side: where copies live, which are ready, quota and LRU eviction.

    <dir>/                 root, 0755: the index (.index.json, root only)
    <dir>/u<uid>/          the user's, 0700: nobody else can even look inside
    <dir>/u<uid>/<key>-<digest>/{data/,manifest.json}    one staged copy, read-only
    <dir>/u<uid>/.tmp-...  a copy in progress (never visible as staged; removed at start)

Everything that touches a dataset runs in a worker as the job's user (worker.py): the user can make
the agent read only what they can read, and the copy is theirs. Root here only makes u<uid>/,
measures copies without following links, and removes copies (shutil.rmtree, safe against links).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from slurm_liquid.config import StagingConfig

log = logging.getLogger(__name__)
INDEX = ".index.json"
WORKER_GRACE_S = 30.0          # a scan walks the shared file system: bounded, but not by the copy's timeout


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    @classmethod
    def of(cls, name: str) -> "User":
        """The job's user as this node knows them (KeyError when unknown)."""
        pw = pwd.getpwnam(name)
        return cls(name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(name, pw.pw_gid)))


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


def run_worker(user: User, request: dict[str, Any], timeout: float, python: str = sys.executable) -> dict[str, Any]:
    """worker.py as `user` (setgroups, setgid, setuid before it runs); killed at `timeout`."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    as_user: dict[str, Any] = {}
    if os.geteuid() == 0 or user.uid != os.geteuid():
        as_user = {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}
    request = {**request, "parent": os.getpid()}
    try:
        proc = subprocess.run([python, "-m", "slurm_liquid.staging.worker"], input=json.dumps(request),
                              capture_output=True, text=True, timeout=timeout, cwd="/", env=env, umask=0o077,
                              **as_user)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"more than {timeout:.0f} s"}
    except OSError as exc:
        return {"status": "failed", "detail": f"cannot start the worker: {exc}"}
    try:
        answer = json.loads(proc.stdout or "{}")
    except ValueError:
        answer = {}
    if not isinstance(answer, dict) or "status" not in answer:
        return {"status": "failed", "detail": f"worker exit {proc.returncode}: {proc.stderr.strip()[-200:]}"}
    return answer


def tree_bytes(path: Path) -> int:
    """Bytes under `path`, from lstat only (root measuring what the user's worker wrote)."""
    total = 0
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


class Store:
    def __init__(self, cfg: StagingConfig, worker: Callable[[User, dict, float], dict] = run_worker,
                 clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.root = Path(cfg.dir)
        self.worker = worker
        self.clock = clock
        self.quota = int(cfg.quota_gb * 1e9)
        self.entries: dict[str, Entry] = {}
        self.reserved: dict[str, int] = {}          # transfers in progress: name -> bytes
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
        known = {(f"u{e.uid}", e.name) for e in self.entries.values()}
        for user_dir in self.root.iterdir():
            if not user_dir.name.startswith("u") or not user_dir.name[1:].isdigit():
                continue
            for child in _children(user_dir):
                if (user_dir.name, child.name) not in known:
                    log.info("staging: removing %s (not a finished copy)", child)
                    _remove(child)
        for name, entry in list(self.entries.items()):
            if not (self.root / f"u{entry.uid}" / name).is_dir():
                del self.entries[name]
        self._save()

    def user_dir(self, user: User) -> Path:
        path = self.root / f"u{user.uid}"
        try:
            path.mkdir(mode=0o700)
            os.chown(path, user.uid, user.gid)
        except FileExistsError:
            pass
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != user.uid:
            raise OSError(f"{path} is not a directory owned by uid {user.uid}")
        os.chmod(path, 0o700)
        return path

    def path(self, entry: Entry) -> Path:
        return self.root / f"u{entry.uid}" / entry.name

    def local_path(self, entry: Entry) -> str:
        """What LIQUID_DATA names: the copied directory, the copied file, or the extracted archive."""
        data = self.path(entry) / "data"
        return str(data / entry.file) if entry.file else str(data)

    # ------------------------------------------------------------ the index

    def _load(self) -> None:
        try:
            path = self.root / INDEX
            st = os.lstat(path)
            if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file of the agent's user")
            self.entries = {e["name"]: Entry(**e) for e in json.loads(path.read_text())["entries"]}
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
            found = [e for e in self.entries.values() if e.name.startswith(key + "-")]
        return max(found, key=lambda e: e.ready_at) if found else None

    def used(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self.entries.values()) + sum(self.reserved.values())

    def touch(self, names: Iterable[str]) -> None:
        now = self.clock()
        with self._lock:
            for name in names:
                if name in self.entries:
                    self.entries[name].last_used = now

    def make_room(self, nbytes: int, in_use: set[str]) -> bool:
        """Evict least-recently-used copies no job here uses until `nbytes` more fit the quota."""
        with self._lock:
            victims = sorted((e for e in self.entries.values() if e.name not in in_use), key=lambda e: e.last_used)
            while self.used() + nbytes > self.quota and victims:
                self.drop(victims.pop(0), "evicted (least recently used)")
                self.evictions += 1
            return self.used() + nbytes <= self.quota

    def drop(self, entry: Entry, why: str) -> None:
        with self._lock:
            self.entries.pop(entry.name, None)
        log.info("staging: %s %s (%s, %d bytes): %s", "removed", entry.name, entry.source, entry.nbytes, why)
        _remove(self.path(entry))
        self._save()

    # ------------------------------------------------------------ staging one dataset

    def stage(self, user: User, source: str, mode: str, in_use: set[str], bandwidth: float = 0.0,
              size_hint: int | None = None) -> Outcome:
        """Make a verified copy of `source` for `user` (or find one): reads happen as the user."""
        if size_hint and size_hint > self.quota:
            return Outcome("over-quota", detail=f"size hint {size_hint} bytes > quota {self.quota}")
        current = self.current(user.uid, source, mode)
        limits = {"source": source, "mode": mode, "max_bytes": self.quota, "max_files": self.cfg.max_files}
        scan = self.worker(user, {"op": "scan", **limits,
                                  "existing": str(self.path(current)) if current else None}, WORKER_GRACE_S + 60)
        if scan.get("status") != "ok":
            return Outcome(str(scan.get("status")), detail=str(scan.get("detail", "")))
        if current is not None and scan.get("hit"):
            self.touch([current.name])
            self._save()
            return Outcome("hit", current)
        if current is not None and current.name not in in_use:
            self.drop(current, "its source changed")
        nbytes = int(scan["bytes"])
        name = f"{key_of(user.uid, source, mode)}-{scan['digest'][:12]}"
        with self._lock:
            if name in self.reserved:
                return Outcome("busy")
            if not self.make_room(nbytes, in_use | {name}):
                return Outcome("no-room", detail=f"{nbytes} bytes do not fit beside copies in use")
            self.reserved[name] = nbytes
        try:
            home = self.user_dir(user)
            final = home / name
            if final.exists() or final.is_symlink():
                _remove(final)                 # a copy the index lost: made again
            tmp = home / f".tmp-{name}-{os.getpid()}-{threading.get_ident()}"
            answer = self.worker(user, {"op": "copy", **limits, "digest": scan["digest"], "tmp": str(tmp),
                                        "final": str(final), "bandwidth": bandwidth}, self.cfg.timeout_s)
            if answer.get("status") != "ok":
                _remove(tmp)
                return Outcome(str(answer.get("status")), detail=str(answer.get("detail", "")))
            now = self.clock()
            entry = Entry(name, user.uid, source, mode, scan["digest"], tree_bytes(final), int(answer.get("files", 0)),
                          float(answer.get("seconds", 0.0)), now, now,
                          os.path.basename(source) if scan.get("kind") == "file" else "")
            with self._lock:
                self.entries[name] = entry
            self._save()
            return Outcome("ok", entry)
        except OSError as exc:
            return Outcome("failed", detail=str(exc))
        finally:
            with self._lock:
                self.reserved.pop(name, None)


def _children(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def _remove(path: Path) -> None:
    """Remove a copy as root without following links inside it (rmtree's fd-based walk)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError as exc:
        log.warning("staging: cannot remove %s: %s", path, exc)
