"""Property tests: whatever tree or archive a user points the staging worker at, it answers with a
status word and never writes past its bounds or outside its copy.

The worker runs in this process here (the same `answer` its main gives the agent): hypothesis builds
hostile datasets (odd names, links anywhere, FIFOs, deep chains, files that are not what their
listing says) and hostile archives (real tar streams of links, devices, escaping and duplicate names,
negative and huge times, then bytes flipped or cut, in every compression), and checks what came out.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_liquid.staging import worker

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAME = st.one_of(st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1,
                         max_size=12),
                 st.sampled_from(["..", ".", "-", " ", "a" * 255, "\n", "manifest.json", "data"])).filter(
    lambda n: n not in (".", ".."))
MEMBER_NAME = st.one_of(st.sampled_from(["../x", "/abs", "a/../../b", "./a", "a//b", "a/", "", "a/b/c/d/e"]),
                        st.lists(NAME, min_size=1, max_size=5).map("/".join))


def listed(root: Path) -> list[str]:
    """Files, directories and links under root (links not followed; FIFOs and devices are not copied)."""
    out = []
    for top, dirs, files in os.walk(root):
        for n in dirs + files:
            mode = os.lstat(os.path.join(top, n)).st_mode
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                out.append(os.path.relpath(os.path.join(top, n), root))
    return sorted(out)


def disk_bytes(root: Path) -> int:
    total = 0
    for top, dirs, files in os.walk(root):
        for n in dirs + files:
            st_ = os.lstat(os.path.join(top, n))
            total += worker.cost(st_)
    return total


@st.composite
def trees(draw):
    """A list of (kind, relative path, payload) that make a hostile dataset."""
    items = []
    for _ in range(draw(st.integers(0, 12))):
        parts = draw(st.lists(NAME, min_size=1, max_size=4))
        kind = draw(st.sampled_from(["file", "dir", "link", "fifo", "deep"]))
        items.append((kind, parts, draw(st.one_of(st.binary(max_size=3000), st.text(max_size=40)))))
    return items


def build(root: Path, items) -> None:
    root.mkdir()
    for kind, parts, payload in items:
        path = root.joinpath(*parts)
        if os.path.lexists(path):           # writing into a FIFO made earlier would wait for a reader
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "file":
                path.write_bytes(payload if isinstance(payload, bytes) else payload.encode())
            elif kind == "dir":
                path.mkdir(exist_ok=True)
            elif kind == "link":
                os.symlink(payload if isinstance(payload, str) and payload else "/etc/shadow", path)
            elif kind == "fifo":
                os.mkfifo(path)
            else:
                path.mkdir(exist_ok=True)
                path.joinpath(*["d"] * 40).mkdir(parents=True)
        except (OSError, ValueError):
            continue


@FUZZ
@given(items=trees(), max_bytes=st.integers(0, 400_000), max_files=st.integers(0, 60),
       grow=st.booleans())
def test_any_tree_gets_a_status_and_a_bounded_exact_copy(items, max_bytes, max_files, grow) -> None:
    base = Path(tempfile.mkdtemp(prefix="liquid-fuzz-"))
    try:
        src = base / "src"
        build(src, items)
        req = {"op": "scan", "source": str(src), "mode": "copy", "max_bytes": max_bytes, "max_files": max_files}
        scan = worker.answer(req)
        assert scan["status"] in worker.STATUSES, scan
        if scan["status"] != "ok":
            return
        assert scan["bytes"] <= max_bytes and scan["files"] <= max_files + worker.OVERHEAD_INODES
        files = [p for p in src.rglob("*") if p.is_file() and not p.is_symlink()]
        if grow and files:                   # the user appends to a file after the scan
            with open(files[0], "ab") as handle:
                handle.write(b"x" * 5000)
        home = base / "home"
        home.mkdir()
        copy = worker.answer({**req, "op": "copy", "max_bytes": scan["bytes"], "digest": scan["digest"],
                              "tmp": str(home / ".tmp"), "final": str(home / "final")})
        assert copy["status"] in worker.STATUSES, copy
        # never past what was reserved, finished or not; outside the home, nothing
        assert disk_bytes(home) <= scan["bytes"] + worker.INODE_BYTES
        assert set(os.listdir(base)) == {"src", "home"}
        if copy["status"] == "ok":
            assert not grow or not files
            assert listed(home / "final" / "data") == listed(src)
            assert worker.verify(str(home / "final"))
        else:
            assert not (home / "final").exists()
    finally:
        subprocess_free_rmtree(base)


def subprocess_free_rmtree(path: Path) -> None:
    for top, dirs, _ in os.walk(path):
        for d in dirs:
            os.chmod(os.path.join(top, d), 0o700, follow_symlinks=False)
    shutil.rmtree(path, ignore_errors=True)


@st.composite
def archives(draw) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))) as tar:
        for _ in range(draw(st.integers(0, 10))):
            info = tarfile.TarInfo(draw(MEMBER_NAME))
            info.type = draw(st.sampled_from([tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE,
                                              tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE]))
            info.linkname = draw(st.sampled_from(["/etc/shadow", "../../x", "a"]))
            info.mtime = draw(st.one_of(st.integers(0, 2 ** 33), st.floats(allow_nan=False, allow_infinity=False,
                                                                          min_value=-1e12, max_value=1e12)))
            info.mode = draw(st.integers(0, 0o7777))
            data = draw(st.binary(max_size=2000)) if info.type == tarfile.REGTYPE else b""
            info.size = len(data)
            try:
                tar.addfile(info, io.BytesIO(data) if data else None)
            except (ValueError, OverflowError, tarfile.TarError):
                continue
    raw = buf.getvalue()
    for _ in range(draw(st.integers(0, 4))):       # hostile bytes
        if raw:
            at = draw(st.integers(0, len(raw) - 1))
            raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    if draw(st.booleans()):
        raw = raw[:draw(st.integers(0, len(raw)))]
    return raw


@FUZZ
@given(raw=archives(), compression=st.sampled_from(["", "gz", "bz2", "xz"]),
       max_bytes=st.integers(0, 200_000), max_files=st.integers(0, 12))
def test_any_archive_gets_a_status_and_stays_inside_its_bounds(raw, compression, max_bytes, max_files) -> None:
    import bz2
    import gzip
    import lzma

    packed = {"": raw, "gz": gzip.compress(raw), "bz2": bz2.compress(raw), "xz": lzma.compress(raw)}[compression]
    base = Path(tempfile.mkdtemp(prefix="liquid-fuzz-"))
    try:
        archive = base / "shared" / ("ds.tar" + (f".{compression}" if compression else ""))
        archive.parent.mkdir()
        archive.write_bytes(packed)
        req = {"op": "scan", "source": str(archive), "mode": "untar", "max_bytes": max_bytes, "max_files": max_files}
        scan = worker.answer(req)
        assert scan["status"] in worker.STATUSES, scan
        if scan["status"] != "ok":
            return
        home = base / "home"
        home.mkdir()
        copy = worker.answer({**req, "op": "copy", "max_bytes": scan["bytes"], "digest": scan["digest"],
                              "tmp": str(home / ".tmp"), "final": str(home / "final")})
        assert copy["status"] in worker.STATUSES, copy
        assert disk_bytes(home) <= scan["bytes"] + worker.INODE_BYTES, (scan, copy)
        assert set(os.listdir(base)) == {"shared", "home"} and os.listdir(archive.parent) == [archive.name]
        if copy["status"] == "ok":
            data = home / "final" / "data"
            assert all(not p.is_symlink() and (p.is_file() or p.is_dir()) for p in data.rglob("*"))
            assert worker.verify(str(home / "final"))
    finally:
        subprocess_free_rmtree(base)
