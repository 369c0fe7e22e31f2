"""The staging worker's archive path (stage=untar), as the job's user: regular files and directories
of a tar archive (plain, gzip, bzip2, xz), every member counted, none kept once passed.

Links, devices and paths leaving the archive are skipped, but counted against `max_files` like every
member (an archive of a million skipped links costs the same walk as a million files). tarfile keeps
each header it reads in `members`; here that list is emptied at every step, so memory stays that of
one member (the worker's address space is bounded too: a giant pax header is a MemoryError, refused).
The cost of an extraction is counted from the headers before anything is reserved (`archive_cost`),
and the extraction is held to it (`Budget`): a small archive of zeros cannot fill the disk.
"""

from __future__ import annotations

import json
import lzma
import os
import tarfile
import zlib
from typing import Any, Iterator

from slurm_liquid.staging.worker import MAX_DEPTH, Budget, Refused, Throttle, _copy_stream, open_regular, progress


def _member_path(name: str) -> str | None:
    """An archive member's path inside the copy, or None when it would leave it."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or name.startswith("/") or ".." in parts or "\0" in name:
        return None
    return "/".join(parts)


_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, ValueError, UnicodeError, OverflowError)


def _members(handle, max_members: int) -> Iterator[tuple[str, tarfile.TarInfo, tarfile.TarFile]]:
    """(path in the copy, member, archive) of the regular files and directories of an archive; every
    member counts against `max_members`, and none is kept once passed."""
    try:
        archive = tarfile.open(fileobj=handle, mode="r:*")
    except (*_ARCHIVE_ERRORS, OSError) as exc:
        raise Refused("not-archive", str(exc)[:200]) from None
    with archive:
        count = 0
        while True:
            try:
                member = archive.next()
            except (*_ARCHIVE_ERRORS, OSError) as exc:
                raise Refused("not-archive", str(exc)[:200]) from None
            archive.members.clear()        # tarfile keeps every header it passed: keep none
            if member is None:
                return
            count += 1
            if count > max_members:
                raise Refused("over-quota", f"more than {max_members} archive members")
            progress()
            if member.size < 0:
                raise Refused("not-archive", f"{member.name[:100]}: a negative size")
            rel = _member_path(member.name)
            if rel is None or not (member.isfile() or member.isdir()):
                continue
            if rel.count("/") >= MAX_DEPTH:
                raise Refused("over-quota", f"deeper than {MAX_DEPTH} levels")
            yield rel, member, archive


def _mtime_ns(member: tarfile.TarInfo) -> int:
    try:
        return int(min(max(float(member.mtime), 0.0), 2.0 ** 33)) * 10 ** 9
    except (TypeError, ValueError, OverflowError):
        return 0


def archive_cost(source: str, max_bytes: int, max_files: int) -> tuple[int, int, int]:
    """What extracting the archive costs (bytes with INODE_BYTES per inode, inodes) and how long its
    manifest's entries are, counted member by member against the bounds: read, nothing written."""
    budget = Budget(max_bytes, max_files, "the extracted archive")
    seen: dict[str, int] = {}            # path -> size of the file (-1: a directory)
    listing = 0
    with os.fdopen(open_regular(source, follow=True), "rb") as handle:
        for rel, member, _ in _members(handle, max_files):
            parts = rel.split("/")
            for i in range(1, len(parts) + 1):
                path = "/".join(parts[:i])
                size = member.size if i == len(parts) and member.isfile() else -1
                if path in seen and (seen[path] < 0 or size < 0):
                    continue
                if path in seen:                            # a later file of the same name replaces it
                    budget.bytes -= seen[path]
                    budget.take(size, inodes=0)
                else:
                    budget.take(max(size, 0))
                    listing += len(json.dumps([path, "f" if size >= 0 else "d", max(size, 0), _mtime_ns(member)])) + 2
                seen[path] = size
    return budget.bytes, budget.inodes, listing


def extract(source: str, data: str, max_bytes: int, max_files: int, throttle: Throttle,
            budget: Budget | None = None) -> dict[str, Any]:
    """Regular files and directories of the archive into `data`; returns the extracted manifest."""
    budget = budget or Budget(max_bytes, max_files, "the extracted archive")
    os.mkdir(data, 0o700)
    budget.take()
    entries: dict[str, list[Any]] = {}
    files = 0
    with os.fdopen(open_regular(source, follow=True), "rb") as handle:
        for rel, member, archive in _members(handle, max_files):
            # parents the archive does not list itself
            parts = rel.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in entries:
                    budget.take()
                    os.mkdir(os.path.join(data, parent), 0o700)
                    entries[parent] = [parent, "d", 0, 0]
                elif entries[parent][1] != "d":
                    raise Refused("not-archive", f"{rel}: its parent is a file")
            dst = os.path.join(data, rel)
            if member.isdir():
                if rel in entries and entries[rel][1] != "d":
                    raise Refused("not-archive", f"{rel}: both a file and a directory")
                if rel not in entries:
                    budget.take()
                    os.mkdir(dst, 0o700)
                    entries[rel] = [rel, "d", 0, 0]
                continue
            if rel in entries:                 # a later member of the same name replaces it, as tar does
                if entries[rel][1] != "f":
                    raise Refused("not-archive", f"{rel}: both a file and a directory")
                os.unlink(dst)
                budget.bytes -= entries[rel][2]
                budget.take(member.size, inodes=0)
            else:
                budget.take(member.size)
                files += 1
            mtime = _mtime_ns(member)
            try:
                src = archive.extractfile(member)
                _copy_stream(src, dst, member.size, mtime, member.mode, throttle)
            except _ARCHIVE_ERRORS as exc:
                raise Refused("not-archive", str(exc)[:200]) from None
            entries[rel] = [rel, "f", member.size, mtime]
    for rel, kind, _, _ in sorted(entries.values(), reverse=True):
        if kind == "d":
            os.chmod(os.path.join(data, rel), 0o500)
    return {"kind": "tree", "entries": sorted(entries.values()), "bytes": budget.bytes, "files": files}
