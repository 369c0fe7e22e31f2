"""The speed room's journal: observations that survive daemon restarts and job resizes.

Append-only JSON lines in a file of the daemon's state directory (root's). One line per accepted
report, written with a single write(2) on an O_APPEND descriptor, so a crash loses at most the line
being written, which the next load skips (with one warning for all such lines). When the file
has grown past a bound it is rewritten from the model's state (each job's per-width averages and
latest progress; finished jobs are gone) into a temporary file that replaces it atomically.

The path is never followed through a symlink (O_NOFOLLOW), must be a regular file with one link
owned by this process's user, and is opened non-blocking (a FIFO planted there cannot hang the
daemon). A journal that cannot be used is reported once and the model goes on in memory (fail open).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from typing import Any, Iterable, Iterator

log = logging.getLogger(__name__)

MAX_LINE = 1024          # bytes; a longer line is not one this module wrote
MAX_READ = 64 << 20      # bytes read at load; a larger file is read from its tail
_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class JournalError(OSError):
    pass


def _checked(fd: int, path: str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise JournalError(f"{path}: not a regular file")
    if st.st_nlink != 1:
        raise JournalError(f"{path}: has {st.st_nlink} hard links; a journal has one")
    if st.st_uid != os.geteuid():
        raise JournalError(f"{path}: owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}")
    return st


class SpeedJournal:
    """Appends records (dicts) as JSON lines to `path`; `load()` yields them back."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = None
        self.lines = 0            # lines in the file now (as loaded plus appended)
        self.broken: str | None = None

    # -- reading ---------------------------------------------------------------------------------
    def load(self) -> Iterator[dict[str, Any]]:
        """The records of the file, oldest first; corrupt lines skipped with one warning."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _FLAGS)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._fail(f"cannot open it ({exc.strerror or exc})")
            return
        try:
            st = _checked(fd, self.path)
            if st.st_size > MAX_READ:
                os.lseek(fd, st.st_size - MAX_READ, os.SEEK_SET)
            raw = _read_all(fd)
        except OSError as exc:
            self._fail(str(exc))
            return
        finally:
            os.close(fd)
        lines = raw.split(b"\n")
        if st.st_size > MAX_READ:
            lines = lines[1:]       # the first line read from the middle of the file is partial
        lines = [line for line in lines if line]
        self.lines += len(lines)
        whole = _parse_all(lines)
        if whole is not None:       # the usual case: every line good, parsed in one call (fast)
            yield from whole
            return
        bad, first_bad = 0, None
        for number, line in enumerate(lines, 1):
            record = _parse(line)
            if record is None:
                bad += 1
                first_bad = first_bad or number
                continue
            yield record
        if bad:
            log.warning("speed journal %s: skipped %d corrupt or truncated line(s), the first at line %d",
                        self.path, bad, first_bad)

    # -- writing ---------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        if self.broken:
            return
        data = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
        try:
            fd = self._open()
            # A line is whole or absent for readers on a local file system; a short write (disk full)
            # leaves a truncated line that the next load skips.
            os.write(fd, data)
            self.lines += 1
        except (OSError, ValueError) as exc:
            self._fail(f"cannot append ({exc})")

    def rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace the file by `records` (compaction): a temporary file, fsync, rename."""
        if self.broken:
            return
        directory, name = os.path.split(self.path)
        tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
        try:
            try:
                os.unlink(tmp)      # a stale one from a crash (unlink never follows a symlink)
            except FileNotFoundError:
                pass
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o600)
            count = 0
            try:
                chunk: list[str] = []
                for record in records:
                    chunk.append(json.dumps(record, separators=(",", ":"), allow_nan=False))
                    count += 1
                    if len(chunk) >= 4096:
                        _write_all(fd, ("\n".join(chunk) + "\n").encode())
                        chunk = []
                if chunk:
                    _write_all(fd, ("\n".join(chunk) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            self.close()
            os.replace(tmp, self.path)
            self.lines = count
        except (OSError, ValueError) as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self._fail(f"cannot compact ({exc})")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _FLAGS, 0o600)
            try:
                _checked(fd, self.path)
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def _fail(self, why: str) -> None:
        self.close()
        self.broken = why
        log.warning("speed journal %s: %s; speeds are kept in memory only until the daemon restarts",
                    self.path, why)


def _parse_all(lines: list[bytes]) -> list[dict[str, Any]] | None:
    """All lines as one JSON array, or None if any line is not one JSON object on its own (then
    they are read one by one). Equal counts of lines and objects: no line split or joined another."""
    if any(len(line) > MAX_LINE for line in lines):
        return None
    try:
        records = json.loads(b"[" + b",".join(lines) + b"]")
    except (ValueError, RecursionError):
        return None
    if len(records) != len(lines) or not all(type(r) is dict for r in records):
        return None
    return records


def _parse(line: bytes) -> dict[str, Any] | None:
    if len(line) > MAX_LINE:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _read_all(fd: int) -> bytes:
    parts = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
