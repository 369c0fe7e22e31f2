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
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
import tarfile
import time
from typing import Any, Iterator

CHUNK = 1 << 20
MANIFEST = "manifest.json"      # beside data/ in an entry: what the copy must hold, for reuse checks


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


# ------------------------------------------------------------------ manifests

def _walk(top: str) -> Iterator[tuple[str, os.stat_result, str | None]]:
    """(relative path, lstat, link target) of everything under `top`, never following a link."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(top, rel) if rel else top) as entries:
            for entry in entries:
                path = os.path.join(rel, entry.name) if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                target = os.readlink(entry.path) if stat.S_ISLNK(st.st_mode) else None
                yield path, st, target
                if stat.S_ISDIR(st.st_mode):
                    stack.append(path)


def manifest(source: str, mode: str, max_bytes: int, max_files: int) -> dict[str, Any]:
    """What the source holds: {"kind", "entries": [[path, kind, size, mtime_ns], ...], "bytes", "files"}.
    A directory is listed; a file is itself (an archive in untar mode is extracted later)."""
    try:
        st = os.stat(source)            # the dataset path itself may be a link (e.g. to the parallel fs)
        if not os.access(source, os.R_OK):
            raise Refused("unreadable", "no read permission")
        if stat.S_ISREG(st.st_mode):
            if st.st_size > max_bytes:
                raise Refused("over-quota", f"{st.st_size} bytes")
            kind = "archive" if mode == "untar" else "file"
            return {"kind": kind, "entries": [[os.path.basename(source), "f", st.st_size, st.st_mtime_ns]],
                    "bytes": st.st_size, "files": 1}
        if not stat.S_ISDIR(st.st_mode):
            raise Refused("failed", "neither a file nor a directory")
        entries, total, files = [], 0, 0
        for rel, est, target in _walk(source):
            if stat.S_ISREG(est.st_mode):
                # as the user: a file they may not read is refused, also when a copy of it exists
                if not os.access(os.path.join(source, rel), os.R_OK):
                    raise Refused("unreadable", rel)
                total += est.st_size
                files += 1
                entries.append([rel, "f", est.st_size, est.st_mtime_ns])
            elif stat.S_ISDIR(est.st_mode):
                entries.append([rel, "d", 0, 0])
            elif target is not None:
                entries.append([rel, "l:" + target, 0, 0])
            if total > max_bytes or files > max_files:
                raise Refused("over-quota", f"more than {max_bytes} bytes or {max_files} files")
        entries.sort()
        return {"kind": "dir", "entries": entries, "bytes": total, "files": files}
    except OSError as exc:
        raise _oserror(exc) from None


def digest(man: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([man["kind"], man["entries"]], separators=(",", ":")).encode()).hexdigest()


def _tree(data: str) -> list[list[Any]]:
    """The copy's own listing, in manifest form (sizes always; times where the source had them)."""
    out = []
    for rel, st, target in _walk(data):
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
        with open(os.path.join(entry, MANIFEST)) as handle:
            expected = json.load(handle)["entries"]
        return _tree(os.path.join(entry, "data")) == sorted(expected)
    except (OSError, ValueError, KeyError, TypeError):
        return False


# ------------------------------------------------------------------ copying

class Throttle:
    """At most `rate` bytes per second (0: no cap), over the whole transfer."""

    def __init__(self, rate: float) -> None:
        self.rate, self.start, self.done = rate, time.monotonic(), 0

    def take(self, n: int) -> None:
        self.done += n
        if self.rate > 0:
            ahead = self.done / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                time.sleep(ahead)


def _copy_stream(src, dst_path: str, size: int, mtime_ns: int, mode: int, throttle: Throttle) -> int:
    fd = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    copied = 0
    with os.fdopen(fd, "wb") as dst:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            dst.write(chunk)
            copied += len(chunk)
            throttle.take(len(chunk))
    if copied != size:
        raise Refused("changed", f"{dst_path}: read {copied} bytes, expected {size}")
    os.chmod(dst_path, 0o500 if mode & 0o111 else 0o400)
    os.utime(dst_path, ns=(mtime_ns, mtime_ns))
    return copied


def copy_tree(source: str, man: dict[str, Any], data: str, throttle: Throttle) -> None:
    os.mkdir(data, 0o700)
    if man["kind"] == "file":
        name, _, size, mtime = man["entries"][0]
        with open(source, "rb") as src:
            _copy_stream(src, os.path.join(data, name), size, mtime, os.stat(source).st_mode, throttle)
        return
    dirs = []
    for rel, kind, size, mtime in man["entries"]:      # sorted: a directory comes before its content
        dst = os.path.join(data, rel)
        if kind == "d":
            os.mkdir(dst, 0o700)
            dirs.append(dst)
        elif kind == "f":
            src_path = os.path.join(source, rel)
            fd = os.open(src_path, os.O_RDONLY | os.O_NOFOLLOW)   # a file swapped for a link is not followed
            with os.fdopen(fd, "rb") as src:
                _copy_stream(src, dst, size, mtime, os.fstat(src.fileno()).st_mode, throttle)
        else:
            os.symlink(kind[2:], dst)
    for path in reversed(dirs):
        os.chmod(path, 0o500)


def _member_path(name: str) -> str | None:
    """An archive member's path inside the copy, or None when it would leave it."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or name.startswith("/") or ".." in parts:
        return None
    return "/".join(parts)


def extract(source: str, data: str, max_bytes: int, max_files: int, throttle: Throttle) -> dict[str, Any]:
    """Regular files and directories of the archive into `data`; returns the extracted manifest."""
    os.mkdir(data, 0o700)
    entries: dict[str, list[Any]] = {}
    total = files = 0
    try:
        archive = tarfile.open(source, "r:*")
    except tarfile.TarError as exc:
        raise Refused("not-archive", str(exc)) from None
    with archive:
        for member in archive:
            rel = _member_path(member.name)
            if rel is None or not (member.isfile() or member.isdir()):
                continue
            # parents the archive does not list itself
            parts = rel.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in entries:
                    os.makedirs(os.path.join(data, parent), 0o700, exist_ok=True)
                    entries[parent] = [parent, "d", 0, 0]
                elif entries[parent][1] != "d":
                    raise Refused("not-archive", f"{rel}: its parent is a file")
            dst = os.path.join(data, rel)
            if member.isdir():
                if rel in entries and entries[rel][1] != "d":
                    raise Refused("not-archive", f"{rel}: both a file and a directory")
                os.makedirs(dst, 0o700, exist_ok=True)
                entries[rel] = [rel, "d", 0, 0]
                continue
            total += member.size
            files += 1
            if total > max_bytes or files > max_files:
                raise Refused("over-quota", f"more than {max_bytes} bytes or {max_files} files")
            if rel in entries:                 # a later member of the same name replaces it, as tar does
                os.unlink(dst)
                total -= entries[rel][2]
                files -= 1
            src = archive.extractfile(member)
            mtime = int(member.mtime) * 10**9
            _copy_stream(src, dst, member.size, mtime, member.mode, throttle)
            entries[rel] = [rel, "f", member.size, mtime]
    for rel, kind, _, _ in sorted(entries.values(), reverse=True):
        if kind == "d":
            os.chmod(os.path.join(data, rel), 0o500)
    return {"kind": "tree", "entries": sorted(entries.values()), "bytes": total, "files": files}


def stage(req: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    source, mode = req["source"], req["mode"]
    man = manifest(source, mode, req["max_bytes"], req["max_files"])
    if digest(man) != req["digest"]:
        raise Refused("changed", "the source changed since it was scanned")
    tmp, final = req["tmp"], req["final"]
    os.mkdir(tmp, 0o700)
    throttle = Throttle(float(req.get("bandwidth") or 0))
    data = os.path.join(tmp, "data")
    try:
        if man["kind"] == "archive":
            copied = extract(source, data, req["max_bytes"], req["max_files"], throttle)
        else:
            copy_tree(source, man, data, throttle)
            copied = man
    except OSError as exc:
        raise _oserror(exc) from None
    with open(os.path.join(tmp, MANIFEST), "w") as handle:
        json.dump({"source": source, "mode": mode, "digest": req["digest"], "entries": copied["entries"]}, handle)
    if not verify(tmp):
        raise Refused("failed", "the copy does not match what was read")
    if digest(manifest(source, mode, req["max_bytes"], req["max_files"])) != req["digest"]:
        raise Refused("changed", "the source changed while it was copied")
    os.chmod(tmp, 0o500)
    os.rename(tmp, final)             # the one step that makes the copy visible
    return {"status": "ok", "bytes": copied["bytes"], "files": copied["files"],
            "seconds": round(time.monotonic() - started, 3)}


def scan(req: dict[str, Any]) -> dict[str, Any]:
    man = manifest(req["source"], req["mode"], req["max_bytes"], req["max_files"])
    d = digest(man)
    existing = req.get("existing")
    hit = bool(existing) and verify(existing) and _manifest_digest(existing) == d
    return {"status": "ok", "digest": d, "kind": man["kind"], "bytes": man["bytes"], "files": man["files"], "hit": hit}


def _manifest_digest(entry: str) -> str | None:
    try:
        with open(os.path.join(entry, MANIFEST)) as handle:
            return json.load(handle).get("digest")
    except (OSError, ValueError):
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


def main() -> int:
    try:
        req = json.loads(sys.stdin.read(1 << 16))
        _die_with_parent(int(req.get("parent", 0)))
        os.umask(0o077)
        answer = stage(req) if req.get("op") == "copy" else scan(req)
    except Refused as exc:
        answer = {"status": exc.status, "detail": str(exc)[:300]}
    except (ValueError, KeyError, TypeError) as exc:
        answer = {"status": "failed", "detail": f"bad request: {exc}"[:300]}
    except OSError as exc:
        refused = _oserror(exc)
        answer = {"status": refused.status, "detail": str(refused)[:300]}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
