"""The staging worker: runs as the job's user (the agent starts it with setgroups/setgid/setuid), so it
reads only what that user can read, and writes the copy as that user.

One JSON request on stdin, one JSON answer on stdout:

    {"op": "scan", "source": ..., "mode": "copy"|"untar", "max_bytes": N, "max_files": N,
     "existing": DIR|null}
        -> {"status": "ok", "digest": ..., "bytes": N, "files": N, "hit": bool}
    {"op": "copy", ... as scan, "tmp": DIR, "final": DIR, "digest": D, "bandwidth": bytes/s (0: none)}
        -> {"status": "ok", "bytes": N, "files": N, "seconds": S}

A copy goes into `tmp`, is checked against the source's manifest (names, sizes, modification times;
for an archive, its members), the source is scanned again (it must not have changed meanwhile), and
only then is `tmp` renamed to `final` in one step: a copy cut short (killed agent, timeout) is never
at `final`. Symbolic links inside a dataset are copied as links, never followed; an archive's links,
devices and paths leaving the archive are skipped. Errors are answered with a status word:
missing, unreadable, over-quota, changed, not-archive, failed.

Everything is counted while it is read, never after (`Budget`): bytes, and every inode (file,
directory, link) at INODE_BYTES each, against the bounds root sent; an archive's members, also those
skipped; the tree's depth. A file is read to its listed size and no further, opened without blocking
and refused unless fstat says it is a regular file (a FIFO or device swapped in is never waited on).
Tar members are not kept (tarfile would hold every header it passed). The worker writes a byte on
stderr as it progresses: the agent kills a worker that goes silent (stopped, or on a hung file system).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
import time
from typing import Any, Iterator

CHUNK = 1 << 20
MANIFEST = "manifest.json"      # beside data/ in an entry: what the copy must hold, for reuse checks
INODE_BYTES = 4096              # what a file, directory or link costs the disk beyond its bytes
MAX_DEPTH = 128                 # directory levels in a dataset (and in what root walks after it)
OVERHEAD_INODES = 3             # an entry's own directory, data/ and manifest.json
_SILENT_S = 0.5                 # at most one progress byte per this
_last_progress = 0.0


class Refused(Exception):
    def __init__(self, status: str, detail: str = "") -> None:
        super().__init__(detail or status)
        self.status = status


def _oserror(exc: OSError) -> Refused:
    if exc.errno == errno.ENOENT or exc.errno == errno.ENOTDIR:
        return Refused("missing", exc.strerror or "")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Refused("unreadable", exc.strerror or "")
    return Refused("failed", f"{exc.strerror or exc}")


def progress() -> None:
    """A byte on stderr, now and then: the agent's sign that this worker is alive."""
    global _last_progress
    now = time.monotonic()
    if now - _last_progress >= _SILENT_S:
        _last_progress = now
        try:
            os.write(2, b".")
        except OSError:
            pass


def cost(st: os.stat_result) -> int:
    """What one inode costs the quota: its bytes if a regular file, and a block for the inode."""
    return (st.st_size if stat.S_ISREG(st.st_mode) else 0) + INODE_BYTES


class Budget:
    """Bytes and inodes, counted as they are met: over the bound is refused at once."""

    def __init__(self, max_bytes: int, max_files: int, what: str = "the dataset") -> None:
        self.max_bytes, self.max_files, self.what = int(max_bytes), int(max_files), what
        self.bytes = self.inodes = 0

    def take(self, nbytes: int = 0, inodes: int = 1) -> None:
        self.bytes += nbytes + INODE_BYTES * inodes
        self.inodes += inodes
        if self.bytes > self.max_bytes:
            raise Refused("over-quota", f"{self.what} takes more than {self.max_bytes} bytes")
        if self.inodes > self.max_files:
            raise Refused("over-quota", f"{self.what} has more than {self.max_files} files, directories and links")
        progress()


def open_regular(path: str, follow: bool = False, size: int | None = None) -> int:
    """A descriptor on a regular file (of `size` bytes when given), never blocking on what is not one."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("changed", f"{path}: became a link") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or size is not None and st.st_size != size:
        os.close(fd)
        raise Refused("changed", f"{path}: no longer the regular file of {size} bytes it was")
    return fd


def _read_small(path: str, limit: int = 512 << 20) -> bytes:
    """A regular file (a manifest) of at most `limit` bytes, not followed if a link."""
    with os.fdopen(open_regular(path), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise Refused("over-quota", f"{path}: {size} bytes")
        return handle.read(size + 1)


# ------------------------------------------------------------------ manifests

def _walk(top: str, budget: Budget | None = None) -> Iterator[tuple[str, os.stat_result, str | None]]:
    """(relative path, lstat, link target) of everything under `top`, never following a link; iterative,
    at most MAX_DEPTH levels, each inode counted in `budget` as it is met."""
    stack = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise Refused("over-quota", f"deeper than {MAX_DEPTH} levels")
        with os.scandir(os.path.join(top, rel) if rel else top) as entries:
            for entry in entries:
                path = os.path.join(rel, entry.name) if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                if budget is not None:
                    budget.take(st.st_size if stat.S_ISREG(st.st_mode) else 0)
                target = os.readlink(entry.path) if stat.S_ISLNK(st.st_mode) else None
                yield path, st, target
                if stat.S_ISDIR(st.st_mode):
                    stack.append((path, depth + 1))


def manifest(source: str, mode: str, max_bytes: int, max_files: int) -> dict[str, Any]:
    """What the source holds: {"kind", "entries": [[path, kind, size, mtime_ns], ...], "bytes", "files"}.
    A directory is listed; a file is itself (an archive in untar mode is extracted later). `bytes` and
    `files` are what the copy will cost (bytes with INODE_BYTES per inode, inodes)."""
    budget = Budget(max_bytes, max_files)
    try:
        st = os.stat(source)            # the dataset path itself may be a link (e.g. to the parallel fs)
        if not os.access(source, os.R_OK):
            raise Refused("unreadable", "no read permission")
        if stat.S_ISREG(st.st_mode):
            kind = "archive" if mode == "untar" else "file"
            if kind == "file":
                budget.take(st.st_size)
            elif st.st_size > max_bytes:
                raise Refused("over-quota", f"{st.st_size} bytes")
            return {"kind": kind, "entries": [[os.path.basename(source), "f", st.st_size, st.st_mtime_ns]],
                    "bytes": budget.bytes, "files": budget.inodes}
        if not stat.S_ISDIR(st.st_mode):
            raise Refused("failed", "neither a file nor a directory")
        entries = []
        for rel, est, target in _walk(source, budget):
            if stat.S_ISREG(est.st_mode):
                # as the user: a file they may not read is refused, also when a copy of it exists
                if not os.access(os.path.join(source, rel), os.R_OK):
                    raise Refused("unreadable", rel)
                entries.append([rel, "f", est.st_size, est.st_mtime_ns])
            elif stat.S_ISDIR(est.st_mode):
                entries.append([rel, "d", 0, 0])
            elif target is not None:
                entries.append([rel, "l:" + target, 0, 0])
        entries.sort()
        return {"kind": "dir", "entries": entries, "bytes": budget.bytes, "files": budget.inodes}
    except OSError as exc:
        raise _oserror(exc) from None


def digest(man: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([man["kind"], man["entries"]], separators=(",", ":")).encode()).hexdigest()


def _tree(data: str, budget: Budget | None = None) -> list[list[Any]]:
    """The copy's own listing, in manifest form (sizes always; times where the source had them)."""
    out = []
    for rel, st, target in _walk(data, budget):
        if stat.S_ISREG(st.st_mode):
            out.append([rel, "f", st.st_size, st.st_mtime_ns])
        elif stat.S_ISDIR(st.st_mode):
            out.append([rel, "d", 0, 0])
        elif target is not None:
            out.append([rel, "l:" + target, 0, 0])
    return sorted(out)


def verify(entry: str) -> bool:
    """Does the copy under entry/data still hold exactly what entry/manifest.json says?"""
    try:
        expected = json.loads(_read_small(os.path.join(entry, MANIFEST)))["entries"]
        # what the copy holds is counted against what it should: anything added is a mismatch
        limit = Budget(sum(int(e[2]) for e in expected) + INODE_BYTES * len(expected), len(expected))
        return _tree(os.path.join(entry, "data"), limit) == sorted(expected)
    except (OSError, ValueError, KeyError, TypeError, Refused):
        return False


# ------------------------------------------------------------------ copying

class Throttle:
    """At most `rate` bytes per second (0: no cap), over the whole transfer."""

    def __init__(self, rate: float) -> None:
        self.rate, self.start, self.done = rate, time.monotonic(), 0

    def take(self, n: int) -> None:
        self.done += n
        progress()
        if self.rate > 0:
            ahead = self.done / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                time.sleep(ahead)


def _copy_stream(src, dst_path: str, size: int, mtime_ns: int, mode: int, throttle: Throttle) -> int:
    """Exactly `size` bytes of `src` into a new file: a source that is shorter or longer than its
    listing (it grew while copied) is refused after at most `size` bytes were written."""
    fd = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    remaining = size
    with os.fdopen(fd, "wb") as dst:
        while remaining > 0:
            chunk = src.read(min(CHUNK, remaining))
            if not chunk:
                raise Refused("changed", f"{dst_path}: shorter than its {size} bytes")
            dst.write(chunk)
            remaining -= len(chunk)
            throttle.take(len(chunk))
        if src.read(1):
            raise Refused("changed", f"{dst_path}: longer than its {size} bytes")
    os.chmod(dst_path, 0o500 if mode & 0o111 else 0o400)
    os.utime(dst_path, ns=(mtime_ns, mtime_ns))
    return size


def copy_tree(source: str, man: dict[str, Any], data: str, throttle: Throttle, budget: Budget | None = None) -> None:
    budget = budget or Budget(man["bytes"] + INODE_BYTES, man["files"] + 1)
    os.mkdir(data, 0o700)
    budget.take()
    if man["kind"] == "file":
        name, _, size, mtime = man["entries"][0]
        budget.take(size)
        with os.fdopen(open_regular(source, follow=True, size=size), "rb", buffering=0) as src:
            _copy_stream(src, os.path.join(data, name), size, mtime, os.fstat(src.fileno()).st_mode, throttle)
        return
    dirs = []
    for rel, kind, size, mtime in man["entries"]:      # sorted: a directory comes before its content
        dst = os.path.join(data, rel)
        budget.take(size if kind == "f" else 0)
        if kind == "d":
            os.mkdir(dst, 0o700)
            dirs.append(dst)
        elif kind == "f":
            # a file swapped for a link, FIFO or device, or resized, is refused without waiting
            with os.fdopen(open_regular(os.path.join(source, rel), size=size), "rb", buffering=0) as src:
                _copy_stream(src, dst, size, mtime, os.fstat(src.fileno()).st_mode, throttle)
        else:
            os.symlink(kind[2:], dst)
    for path in reversed(dirs):
        os.chmod(path, 0o500)


def _document(source: str, mode: str, digest_: str, entries: list) -> str:
    return json.dumps({"source": source, "mode": mode, "digest": digest_, "entries": entries})


def need(source: str, mode: str, man: dict[str, Any]) -> tuple[int, int]:
    """Bytes and inodes a finished copy takes (content, data/, its directory, manifest.json); what
    root reserves, and the bound the copy is held to."""
    if man["kind"] == "archive":
        from slurm_liquid.staging.archive import archive_cost

        content, inodes, listing = archive_cost(source, man["max_bytes"], man["max_files"])
        manifest_bytes = len(_document(source, mode, "0" * 64, [])) + listing + 4096   # tar metadata slack
    else:
        content, inodes = man["bytes"], man["files"]
        manifest_bytes = len(_document(source, mode, "0" * 64, man["entries"]))
    return content + manifest_bytes + OVERHEAD_INODES * INODE_BYTES, inodes + OVERHEAD_INODES


def stage(req: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    source, mode = req["source"], req["mode"]
    man = manifest(source, mode, req["max_bytes"], req["max_files"])
    if digest(man) != req["digest"]:
        raise Refused("changed", "the source changed since it was scanned")
    tmp, final = req["tmp"], req["final"]
    budget = Budget(req["max_bytes"], int(req["max_files"]) + OVERHEAD_INODES, "the copy")   # root's reservation
    os.mkdir(tmp, 0o700)
    budget.take()
    throttle = Throttle(float(req.get("bandwidth") or 0))
    data = os.path.join(tmp, "data")
    try:
        if man["kind"] == "archive":
            from slurm_liquid.staging.archive import extract

            copied = extract(source, data, req["max_bytes"], req["max_files"], throttle, budget)
        else:
            copy_tree(source, man, data, throttle, budget)
            copied = man
        text = _document(source, mode, req["digest"], copied["entries"])
        budget.take(len(text.encode()))
        fd = os.open(os.path.join(tmp, MANIFEST), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise _oserror(exc) from None
    if not verify(tmp):
        raise Refused("failed", "the copy does not match what was read")
    if digest(manifest(source, mode, req["max_bytes"], req["max_files"])) != req["digest"]:
        raise Refused("changed", "the source changed while it was copied")
    os.chmod(tmp, 0o500)
    os.rename(tmp, final)             # the one step that makes the copy visible
    return {"status": "ok", "bytes": budget.bytes, "files": copied["files"],
            "seconds": round(time.monotonic() - started, 3)}


def scan(req: dict[str, Any]) -> dict[str, Any]:
    man = manifest(req["source"], req["mode"], req["max_bytes"], req["max_files"])
    d = digest(man)
    nbytes, inodes = need(req["source"], req["mode"], {**man, "max_bytes": req["max_bytes"],
                                                       "max_files": req["max_files"]})
    if nbytes > req["max_bytes"]:
        raise Refused("over-quota", f"the copy would take {nbytes} bytes, more than {req['max_bytes']}")
    existing = req.get("existing")
    hit = bool(existing) and verify(existing) and _manifest_digest(existing) == d
    return {"status": "ok", "digest": d, "kind": man["kind"], "bytes": nbytes, "files": inodes, "hit": hit}


def _manifest_digest(entry: str) -> str | None:
    try:
        return json.loads(_read_small(os.path.join(entry, MANIFEST))).get("digest")
    except (OSError, ValueError, AttributeError, Refused):
        return None


def _die_with_parent(parent: int) -> None:
    """A killed agent takes its workers with it (PR_SET_PDEATHSIG), so no copy goes on unwatched."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:
        os._exit(3)


STATUSES = frozenset({"ok", "missing", "unreadable", "over-quota", "changed", "not-archive", "failed"})


def answer(req: Any) -> dict[str, Any]:
    """One request's answer; every failure is a status word (STATUSES) and a short detail."""
    try:
        return stage(req) if req.get("op") == "copy" else scan(req)
    except Refused as exc:
        return {"status": exc.status, "detail": str(exc)[:300]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return {"status": "failed", "detail": f"bad request: {exc}"[:300]}
    except OSError as exc:
        refused = _oserror(exc)
        return {"status": refused.status, "detail": str(refused)[:300]}
    except MemoryError:               # the agent bounds our address space (asuser.CHILD_MEMORY)
        return {"status": "over-quota", "detail": "more memory than a staging worker may use"}


def main() -> int:
    try:
        req = json.loads(sys.stdin.read(1 << 16))
        _die_with_parent(int(req.get("parent", 0)))
        os.umask(0o077)
        out = answer(req)
    except (ValueError, TypeError, AttributeError) as exc:
        out = {"status": "failed", "detail": f"bad request: {exc}"[:300]}
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    # run the imported module's main: archive.py raises that module's Refused, not __main__'s
    from slurm_liquid.staging import worker as _worker

    sys.exit(_worker.main())
