"""Staging against a hostile user (docs/admin.md, threat model): nothing a user writes, names or answers
makes the root agent read, delete, fill or hang anything. Each test is an audit finding, played as
an attacker would: real workers as `nobody` (needs root), the user's moves made between them."""

from __future__ import annotations

import io
import os
import queue
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from slurm_liquid.config import StagingConfig
from slurm_liquid.staging import archive, worker
from slurm_liquid.staging.agent import KeyState, Stager
from slurm_liquid.staging.store import User, key_of

from tests.unit.test_staging import area, as_root, dataset, nobody, store, worker_finds_the_package  # noqa: F401

REFUSED = {"over-quota", "failed", "changed", "unreadable", "missing", "not-archive", "no-room", "stalled", "timeout"}


def shared_dir(area: Path, name: str) -> Path:
    path = area / "shared" / name
    path.mkdir(parents=True)
    for p in (area / "shared", path):
        p.chmod(0o755)
    return path


def readable(*paths: Path) -> None:
    for p in paths:
        for q in [p, *p.rglob("*")] if p.is_dir() else [p]:
            if not q.is_symlink():
                q.chmod(0o755 if q.is_dir() else 0o644)


# ------------------------------------------------------------------ 2. a forged answer names the path

@as_root
def test_a_forged_digest_never_makes_root_follow_a_users_link(area: Path) -> None:
    victim = area / "victim"
    (victim / "precious000").mkdir(parents=True)
    (victim / "precious000" / "thesis").write_text("years of work\n")
    victim.chmod(0o700)
    src = dataset(area)
    s = store(area)
    home = s.user_dir(nobody())
    os.symlink(victim, home / f"{key_of(65534, str(src), 'copy')}-")     # the user's own directory: allowed

    def forged(user, request, timeout, **_):
        if request["op"] == "scan":    # what a user debugging their own worker can make it say
            return {"status": "ok", "digest": "/precious0000", "bytes": 10, "files": 1, "kind": "dir", "hit": False}
        return {"status": "failed"}

    s.worker = forged
    out = s.stage(nobody(), str(src), "copy", set())
    assert out.status == "failed", out
    assert (victim / "precious000" / "thesis").read_text() == "years of work\n"
    for bad in ({"bytes": -5}, {"bytes": 10 ** 30}, {"bytes": "1e9"}, {"digest": "ab" * 40}, {"files": -1}):
        answer = {"status": "ok", "digest": "a" * 64, "bytes": 10, "files": 1, "kind": "dir", "hit": False, **bad}
        s.worker = lambda user, request, timeout, answer=answer, **_: answer
        assert s.stage(nobody(), str(src), "copy", set()).status == "failed", bad
    assert s.used() == 0


# ------------------------------------------------------------------ 3. a file that grows while copied

def test_a_file_that_grows_while_copied_is_cut_at_its_listed_size(area: Path) -> None:
    src = dataset(area)
    man = worker.manifest(str(src), "copy", 10 ** 9, 1000)
    with open(src / "top.txt", "ab") as handle:
        handle.write(os.urandom(3_000_000))
    data = area / "out"
    with pytest.raises(worker.Refused) as refused:
        worker.copy_tree(str(src), man, str(data), worker.Throttle(0))
    assert refused.value.status == "changed"
    written = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    assert written <= 5 * 1000 + 6          # never more than the listing said


def test_a_file_swapped_for_a_fifo_is_refused_without_waiting(area: Path) -> None:
    src = dataset(area)
    man = worker.manifest(str(src), "copy", 10 ** 9, 1000)
    (src / "top.txt").unlink()
    os.mkfifo(src / "top.txt")
    errors: queue.Queue = queue.Queue()

    def copy() -> None:
        try:
            worker.copy_tree(str(src), man, str(area / "out"), worker.Throttle(0))
            errors.put(None)
        except worker.Refused as exc:
            errors.put(exc.status)

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        with open(src / "top.txt", "wb"):       # let the blocked open go
            pass
        pytest.fail("the copy blocked on a FIFO")
    assert errors.get() == "changed"


# ------------------------------------------------------------------ 4. trees deeper than Python recursion

def deep_tree(top: Path, levels: int = 1100) -> None:
    path = top
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):            # one descriptor at a time: the path would pass PATH_MAX
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as handle:
        handle.write("x")
    os.close(fd)
    del path


@as_root
def test_a_leftover_deeper_than_recursion_is_removed_at_start(area: Path) -> None:
    s = store(area)
    home = s.user_dir(nobody())
    deep_tree(home / ".tmp-deep")
    store(area)                                      # the agent starts again: must neither crash nor keep it
    assert not (home / ".tmp-deep").exists()


@as_root
def test_a_dataset_deeper_than_the_bound_is_refused_and_leaves_nothing(area: Path) -> None:
    src = shared_dir(area, "deep")
    deep_tree(src / "t", 1100)
    subprocess.run(["chmod", "-R", "a+rX", str(src)], check=True)
    s = store(area, quota_gb=0.1)
    out = s.stage(nobody(), str(src), "copy", set())
    assert out.status == "over-quota" and "deep" in out.detail, out
    home = area / "area" / "u65534"
    assert (not home.exists() or list(home.iterdir()) == []) and s.used() == 0


# ------------------------------------------------------------------ 5. the copy swapped for a link

@as_root
def test_a_copy_swapped_for_a_link_is_not_measured_through_it(area: Path) -> None:
    other = area / "other"
    other.mkdir(mode=0o700)
    (other / "big").write_bytes(b"\0" * 2_000_000)
    src = dataset(area)
    s = store(area, quota_gb=0.01)
    real = s.worker

    def then_swap(user, request, timeout, **kw):
        answer = real(user, request, timeout, **kw)
        if request["op"] == "copy" and answer.get("status") == "ok":   # the user, before root measures
            final = Path(request["final"])
            final.rename(final.with_name(".mine"))
            final.symlink_to(other)
        return answer

    s.worker = then_swap
    out = s.stage(nobody(), str(src), "copy", set())
    assert out.status in REFUSED and s.used() < 100_000, (out, s.used())
    assert (other / "big").stat().st_size == 2_000_000


# ------------------------------------------------------------------ 6. directories and links count

@as_root
def test_directories_and_links_count_against_the_file_bound_and_quota(area: Path) -> None:
    src = shared_dir(area, "many")
    for i in range(150):
        (src / f"d{i}").mkdir()
        (src / f"l{i}").symlink_to("nowhere")
    readable(src)
    s = store(area, quota_gb=0.1, max_files=100)
    out = s.stage(nobody(), str(src), "copy", set())
    assert out.status == "over-quota", out
    # within the bound, each costs the quota what it costs the disk (an inode, a block)
    s = store(area, quota_gb=0.1, max_files=1000)
    out = s.stage(nobody(), str(src), "copy", set())
    assert out.status == "ok" and out.entry.nbytes >= 300 * worker.INODE_BYTES, out


# ------------------------------------------------------------------ 7, 8. archives

def archive_of(path: Path, members) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path.chmod(0o644)
    return path


def link(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
    return info, None


def blob(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


@as_root
def test_archive_members_are_counted_even_when_skipped(area: Path) -> None:
    shared = shared_dir(area, "tars")
    tar = archive_of(shared / "links.tar.gz", [link(f"l{i}") for i in range(3000)] + [blob("a", b"a")])
    s = store(area, quota_gb=0.1, max_files=1000)
    out = s.stage(nobody(), str(tar), "untar", set())
    assert out.status == "over-quota", out


def test_extraction_keeps_no_member_list(area: Path) -> None:
    tar = archive_of(area / "many.tar.gz", [link(f"l{i}") for i in range(2000)] + [blob("a", b"a")])
    seen = []
    real_next = tarfile.TarFile.next

    def spy(self):
        seen.append(len(self.members))
        return real_next(self)

    tarfile.TarFile.next = spy
    try:
        archive.extract(str(tar), str(area / "out"), 10 ** 9, 10 ** 6, worker.Throttle(0))
    finally:
        tarfile.TarFile.next = real_next
    assert max(seen) <= 2, max(seen)


@as_root
def test_untar_reserves_what_the_archive_holds_not_its_size(area: Path) -> None:
    shared = shared_dir(area, "bomb")
    kept = shared_dir(area, "kept")
    (kept / "blob").write_bytes(os.urandom(500_000))
    readable(kept)
    tar = archive_of(shared / "zeros.tar.gz", [blob("zeros", b"\0" * 600_000)])
    assert tar.stat().st_size < 10_000
    s = store(area, quota_gb=0.001, user_share=1.0)
    first = s.stage(nobody(), str(kept), "copy", set())
    assert first.status == "ok"
    out = s.stage(nobody(), str(tar), "untar", {first.entry.name})
    assert out.status == "no-room", out
    assert s.used() <= s.quota


# ------------------------------------------------------------------ 9. holding a transfer thread

@as_root
def test_a_worker_its_user_stops_is_killed_when_it_stalls(area: Path) -> None:
    src = dataset(area, files=20, size=50_000)
    s = store(area, quota_gb=0.1, timeout_s=120, stall_s=2)
    stopped = []

    def stop_it() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not stopped:
            found = subprocess.run(["pgrep", "-u", "nobody", "-f", "slurm_liquid.staging.worker"],
                                   capture_output=True, text=True).stdout.split()
            home = area / "area" / "u65534"
            if found and home.exists() and any(p.name.startswith(".tmp-") for p in home.iterdir()):
                subprocess.run(["runuser", "-u", "nobody", "--", "kill", "-STOP", *found], check=True)
                stopped.append(found)
            time.sleep(0.05)

    thread = threading.Thread(target=stop_it, daemon=True)
    thread.start()
    started = time.monotonic()
    out = s.stage(nobody(), str(src), "copy", set(), bandwidth=100_000)
    assert stopped and out.status == "stalled", out
    assert time.monotonic() - started < 30


class Blocking:
    """A store whose transfers for `blocked_uid` hang until released (a user's stuck datasets)."""

    def __init__(self, cfg: StagingConfig, blocked_uid: int) -> None:
        self.cfg, self.blocked_uid, self.release, self.done = cfg, blocked_uid, threading.Event(), []
        self.evictions = 0

    def prepare(self) -> None:
        pass

    def stage(self, user, source, mode, in_use, bandwidth=0.0, size_hint=None):
        from slurm_liquid.staging.store import Outcome

        if user.uid == self.blocked_uid:
            self.release.wait(30)
        self.done.append(source)
        return Outcome("failed", detail="test")

    def touch(self, names):
        pass

    def used(self) -> int:
        return 0


def test_one_users_stuck_datasets_never_take_every_transfer_thread(area: Path) -> None:
    cfg = StagingConfig(enabled=True, dir=str(area / "area"), transfers=2)
    blocking = Blocking(cfg, blocked_uid=1000)
    stager = Stager(cfg, client=None, node="gpu01", spool_dir=str(area / "run"), store=blocking)
    mallory, alice = User("mallory", 1000, 1000, (1000,)), User("alice", 1001, 1001, (1001,))
    for i in range(2):
        key = (1000, f"/shared/stuck{i}", "copy")
        stager.keys[key] = KeyState()
        stager.work.put((key, mallory, None))
    key = (1001, "/shared/fine", "copy")
    stager.keys[key] = KeyState()
    stager.work.put((key, alice, None))
    threads = [threading.Thread(target=stager.transfer_forever, daemon=True) for _ in range(cfg.transfers)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while "/shared/fine" not in blocking.done and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "/shared/fine" in blocking.done, "another user's dataset waited behind one user's stuck ones"
    finally:
        blocking.release.set()
    deadline = time.monotonic() + 10
    while len(blocking.done) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in threads:
        stager.work.put(None)
    assert sorted(blocking.done) == ["/shared/fine", "/shared/stuck0", "/shared/stuck1"]


# ------------------------------------------------------------------ per-user shares

@as_root
def test_one_user_gets_at_most_their_share_of_the_quota(area: Path) -> None:
    srcs = []
    for name in ("a", "b"):
        src = shared_dir(area, name)
        (src / "blob").write_bytes(os.urandom(300_000))
        readable(src)
        srcs.append(src)
    s = store(area, quota_gb=0.001, user_share=0.5)      # 500 kB each
    a = s.stage(nobody(), str(srcs[0]), "copy", set())
    assert a.status == "ok"
    # a second dataset would pass the share: the user's own unused copy goes, not someone else's
    b = s.stage(nobody(), str(srcs[1]), "copy", set())
    assert b.status == "ok" and a.entry.name not in s.entries
    assert s.stage(nobody(), str(srcs[0]), "copy", {b.entry.name}).status == "no-room"
