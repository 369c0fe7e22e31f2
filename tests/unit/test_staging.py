"""Staging (slurm_liquid/staging): copies made as the job's user, checked, reused, evicted, bounded, and
never half visible. The store and worker tests run real workers as `nobody` and need root."""

from __future__ import annotations

import functools
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_liquid.config import StagingConfig
from slurm_liquid.placement import ClusterState, NodeState, PlacementRequest
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.ledger import Record, Tag
from slurm_liquid.slurm import Job
from slurm_liquid.ledger import staging as codec
from slurm_liquid.staging.agent import Stager
from slurm_liquid.staging.predict import StagingHints, predict
from slurm_liquid.staging.store import Store, User, run_worker
from slurm_liquid.staging.worker import INODE_BYTES
from slurm_liquid.topology import Topology

parse_topology = Topology.from_topology_conf

REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
# the worker runs as nobody: it needs a Python that nobody may execute (a venv under /root is not)
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
as_root = pytest.mark.skipif(not ROOT, reason="runs workers as another user: needs root")


@pytest.fixture(autouse=True)
def worker_finds_the_package(monkeypatch) -> None:
    """That Python finds slurm_liquid through PYTHONPATH (run_worker passes it on): this checkout."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))


@pytest.fixture
def area() -> Path:
    """A world-traversable scratch directory (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="liquid-staging-test-"))
    base.chmod(0o755)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


def dataset(root: Path, files: int = 5, size: int = 1000) -> Path:
    src = root / "shared" / "ds"
    (src / "sub").mkdir(parents=True)
    for i in range(files):
        (src / "sub" / f"f{i}").write_bytes(os.urandom(size))
    (src / "top.txt").write_text("hello\n")
    for path in [root / "shared", *src.rglob("*"), src]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return src


def store(root: Path, quota_gb: float = 0.001, **settings) -> Store:
    cfg = StagingConfig(enabled=True, dir=str(root / "area"), quota_gb=quota_gb, **settings)
    s = Store(cfg, worker=functools.partial(run_worker, python=PYTHON))
    s.prepare()
    return s


def nobody() -> User:
    return User.of("nobody")


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ store + worker

@as_root
def test_copy_is_identical_private_and_reused(area: Path) -> None:
    src = dataset(area)
    s = store(area)
    first = s.stage(nobody(), str(src), "copy", set())
    assert first.status == "ok", first
    local = Path(s.local_path(first.entry))
    assert tree(local) == tree(src)
    home = local.parents[1]
    assert (home.stat().st_uid, home.stat().st_mode & 0o777) == (65534, 0o700)   # others cannot look in
    assert all(p.stat().st_mode & 0o077 == 0 for p in local.rglob("*"))
    # the quota counts what the copy takes: the data, its manifest, and a block per inode (each file,
    # directory and link, the entry's own directory, data/ and manifest.json)
    inodes = len(list(src.rglob("*"))) + 3
    assert first.entry.nbytes == (sum(len(v) for v in tree(src).values()) + (local.parent / "manifest.json").stat().st_size
                                  + INODE_BYTES * inodes)
    again = s.stage(nobody(), str(src), "copy", set())
    assert again.status == "hit" and again.entry.name == first.entry.name
    # a changed source (content and time) is copied afresh, and the stale copy goes
    (src / "top.txt").write_text("changed\n")
    os.utime(src / "top.txt", (1, 1))
    third = s.stage(nobody(), str(src), "copy", set())
    assert third.status == "ok" and third.entry.name != first.entry.name
    assert tree(Path(s.local_path(third.entry)))["top.txt"] == b"changed\n"
    assert not (home / first.entry.name).exists()
    # the index survives a restart of the agent
    assert store(area).stage(nobody(), str(src), "copy", set()).status == "hit"


@as_root
def test_a_single_file_is_copied_and_named(area: Path) -> None:
    src = dataset(area)
    s = store(area)
    out = s.stage(nobody(), str(src / "top.txt"), "copy", set())
    assert out.status == "ok" and Path(s.local_path(out.entry)).read_text() == "hello\n"


@as_root
def test_the_user_cannot_make_the_agent_read_what_they_cannot(area: Path) -> None:
    src = dataset(area)
    secret = area / "secret"
    secret.mkdir(mode=0o700)
    (secret / "key").write_text("root only\n")
    s = store(area)
    assert s.stage(nobody(), str(area / "shared" / "nope"), "copy", set()).status == "missing"
    assert s.stage(nobody(), str(secret), "copy", set()).status == "unreadable"
    assert s.stage(nobody(), str(secret / "key"), "copy", set()).status == "unreadable"
    # a link to it as the dataset path is followed as the user: still unreadable
    (area / "shared" / "link").symlink_to(secret)
    assert s.stage(nobody(), str(area / "shared" / "link"), "copy", set()).status == "unreadable"
    # one unreadable file inside refuses the whole dataset (also when an older copy exists)
    assert s.stage(nobody(), str(src), "copy", set()).status == "ok"
    (src / "sub" / "f0").chmod(0o600)
    assert s.stage(nobody(), str(src), "copy", set()).status == "unreadable"
    # links inside a dataset are copied as links, never followed by the copy
    (src / "sub" / "f0").chmod(0o644)
    (src / "evil").symlink_to(secret / "key")
    out = s.stage(nobody(), str(src), "copy", set())
    assert out.status == "ok"
    copied = Path(s.local_path(out.entry)) / "evil"
    assert copied.is_symlink() and os.readlink(copied) == str(secret / "key")
    assert "root only" not in json.dumps({k: v.decode(errors="replace") for k, v in tree(Path(s.local_path(out.entry))).items()
                                          if not (Path(s.local_path(out.entry)) / k).is_symlink()})


@as_root
def test_quota_bounds_each_dataset_and_lru_evicts_only_unused_copies(area: Path) -> None:
    small = []
    for name in ("a", "b", "c"):
        src = area / "shared" / name
        src.mkdir(parents=True)
        (src / "blob").write_bytes(os.urandom(400_000))
        for p in (area / "shared", src, src / "blob"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        small.append(str(src))
    big = area / "shared" / "big"
    big.mkdir()
    (big / "blob").write_bytes(os.urandom(1_200_000))
    big.chmod(0o755)
    (big / "blob").chmod(0o644)
    s = store(area, quota_gb=0.001, user_share=1.0)     # 1 MB, all one user's: two of the 400 kB datasets fit
    assert s.stage(nobody(), str(big), "copy", set()).status == "over-quota"
    assert s.stage(nobody(), small[0], "copy", set(), size_hint=2_000_000).status == "over-quota"   # no walk
    a = s.stage(nobody(), small[0], "copy", set()).entry
    time.sleep(0.01)
    b = s.stage(nobody(), small[1], "copy", set()).entry
    # c needs room: a is the least recently used, but a job here uses it, so b goes
    c = s.stage(nobody(), small[2], "copy", {a.name})
    assert c.status == "ok" and s.evictions == 1
    assert set(s.entries) == {a.name, c.entry.name} and not s.path(b).exists()
    # nothing unused left to evict: the copy waits for room rather than overrun the quota
    assert s.stage(nobody(), small[1], "copy", {a.name, c.entry.name}).status == "no-room"
    assert s.used() <= s.quota


@as_root
def test_untar_extracts_files_and_skips_what_would_leave_the_copy(area: Path) -> None:
    shared = area / "shared"
    shared.mkdir(mode=0o755)
    archive = shared / "ds.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("train/a.bin", b"a" * 100), ("../escape", b"x"), ("/abs", b"y")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("train/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(link)
    archive.chmod(0o644)
    s = store(area)
    out = s.stage(nobody(), str(archive), "untar", set())
    assert out.status == "ok", out
    local = Path(s.local_path(out.entry))
    assert tree(local) == {"train/a.bin": b"a" * 100}
    assert not (local / "train" / "passwd").exists() and not (area / "escape").exists()
    assert s.stage(nobody(), str(archive), "untar", set()).status == "hit"
    (shared / "not.tar").write_text("plain text")
    (shared / "not.tar").chmod(0o644)
    assert s.stage(nobody(), str(shared / "not.tar"), "untar", set()).status == "not-archive"


KILLER = """
import functools, sys
from slurm_liquid.config import StagingConfig
from slurm_liquid.staging.store import Store, User, run_worker
s = Store(StagingConfig(enabled=True, dir=sys.argv[1], quota_gb=1), worker=functools.partial(run_worker, python=sys.argv[3]))
s.prepare()
print(s.stage(User.of("nobody"), sys.argv[2], "copy", set(), bandwidth=100_000).status, flush=True)
"""


@as_root
def test_a_kill_mid_copy_leaves_no_copy_visible_as_staged(area: Path) -> None:
    src = dataset(area, files=20, size=50_000)          # 1 MB at 100 kB/s: ten seconds of copying
    root = area / "area"
    agent = subprocess.Popen([sys.executable, "-c", KILLER, str(root), str(src), PYTHON],
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    home = root / "u65534"
    deadline = time.monotonic() + 20
    while not any(p.name.startswith(".tmp-") for p in (home.iterdir() if home.exists() else [])):
        assert time.monotonic() < deadline and agent.poll() is None, "the copy never started"
        time.sleep(0.05)
    time.sleep(0.5)
    agent.send_signal(signal.SIGKILL)
    agent.wait(10)
    time.sleep(0.5)
    workers = subprocess.run(["pgrep", "-u", "nobody", "-f", "slurm_liquid.staging.worker"], capture_output=True, text=True)
    assert workers.stdout.strip() == "", "the worker outlived the agent"
    leftovers = [p.name for p in home.iterdir()]
    assert leftovers and all(n.startswith(".tmp-") for n in leftovers)      # a half copy, but not as staged
    s = store(area, quota_gb=1)                          # the agent restarts: leftovers go
    assert list(home.iterdir()) == [] and s.entries == {}
    assert s.stage(nobody(), str(src), "copy", set()).status == "ok"


# ------------------------------------------------------------------ codec

def test_wanted_comes_from_the_record_or_a_liquid_comment() -> None:
    record = Record(spec="model=resnet50 batch-size=32 dataset=/shared/a,/shared/b.tar stage=untar stage-size=2G")
    want = codec.wanted(record.with_fields(mode="adjust").render())
    assert want == codec.Wanted(("/shared/a", "/shared/b.tar"), "untar", 2_000_000_000)
    assert codec.wanted("liquid: dataset=/shared/x") == codec.Wanted(("/shared/x",), "copy", None)
    assert codec.wanted("liquid/1 mode=adjust | model=resnet50") is None
    assert codec.wanted("liquid: dataset=relative/path") is None            # refused by the job spec
    assert codec.wanted("liquid/1 mode=adjust | model=x dataset=/shared/ve...") is None   # a cut spec


def test_hint_lives_beside_the_tag_and_survives_tag_rewrites() -> None:
    from slurm_liquid.ledger import with_tag

    admin = codec.with_hint("liquid/1 state=held", codec.Hint(("gpu01", "gpu02"), 5))
    assert admin == "liquid/1 state=held; liquid-stage/1 nodes=gpu[01-02] at=5"
    assert codec.Hint.parse(admin) == codec.Hint(("gpu01", "gpu02"), 5)
    assert Tag.parse(admin).state == "held"
    placed = with_tag(admin, Tag("placed", "gpu01:4"))
    assert codec.Hint.parse(placed).nodes == ("gpu01", "gpu02") and Tag.parse(placed).state == "placed"
    assert codec.Hint.parse(codec.with_hint(placed, None)) is None


def test_staged_parts_merge_per_node_and_read_back() -> None:
    value = codec.merge_staged(None, codec.Part("gpu02", 1_234_567_890, "14s", 40))
    value = codec.merge_staged(value, codec.Part("gpu01", None, "-", None))
    value = codec.merge_staged(value, codec.Part("gpu02", 1_234_567_890, "hit", None, ready_at=100))
    assert value == "gpu01:-:-:late,gpu02:1.2G:hit:@100"
    line = Record().with_fields(staged=value).render()
    assert Record.parse(line).get("staged") == value
    assert codec.describe(value, 160.0) == ["gpu01: not ready when the job started; it read the shared path",
                                            "gpu02: 1.2GB reused an earlier copy, ready 60 s before the start"]


def test_env_lines_name_every_dataset() -> None:
    assert codec.env_lines(["/l/a", "/s/b"]) == ("export LIQUID_DATA=/l/a\nexport LIQUID_DATA_1=/l/a\n"
                                                 "export LIQUID_DATA_2=/s/b\n")


# ------------------------------------------------------------------ the agent's thread

class FakeSlurm:
    def __init__(self, jobs: list[Job]):
        self.by_id = {j.job_id: j for j in jobs}
        self.updates: list[tuple[int, dict]] = []

    def jobs(self, ids=None):
        return [j for i, j in self.by_id.items() if ids is None or i in ids]

    def update_job(self, job_id, **fields):
        from dataclasses import replace

        self.updates.append((job_id, fields))
        self.by_id[job_id] = replace(self.by_id[job_id], comment=fields.get("Comment", self.by_id[job_id].comment))


def job(job_id: int, state: str, comment: str, admin: str = "", nodes: tuple[str, ...] = (), start: float | None = None) -> Job:
    return Job(job_id=job_id, name="train", user="nobody", state=state, comment=comment, admin_comment=admin,
               nodes=nodes, gpus=1, start_time=datetime.fromtimestamp(start, timezone.utc) if start else None)


@as_root
def test_agent_stages_for_a_predicted_job_and_the_prolog_sees_it_then(area: Path) -> None:
    src = dataset(area)
    comment = Record(spec=f"model=resnet50 batch-size=32 dataset={src},{area}/shared/missing").with_fields(mode="adjust").render()
    hinted = codec.with_hint("liquid/1 state=held", codec.Hint(("gpu01",), 1))
    slurm = FakeSlurm([job(7, "PENDING", comment, hinted), job(8, "PENDING", comment, codec.with_hint("", codec.Hint(("gpu02",))))])
    s = store(area)
    stager = Stager(s.cfg, slurm, "gpu01", spool_dir=str(area / "run"), store=s)
    stager.start(threads=False)
    stager.poll(slurm.jobs())
    env = area / "run" / "staged" / "7"
    assert env.read_text() == codec.env_lines([str(src), f"{area}/shared/missing"])     # shared paths until staged
    assert (env.stat().st_uid, env.stat().st_gid, env.stat().st_mode & 0o777) == (0, 65534, 0o640)   # root's
    assert not (area / "run" / "staged" / "8").exists()                                  # predicted elsewhere
    while not stager.work.empty():
        stager.transfer(*stager.work.get())
    stager.poll(slurm.jobs())
    local = s.local_path(s.current(65534, str(src), "copy"))
    assert env.read_text() == codec.env_lines([local, f"{area}/shared/missing"])
    assert Record.parse(slurm.by_id[7].comment).get("err") == "dataset:missing"
    # a job that reads only the staged dataset; it starts: its record says it was there in time
    ok = Record(spec=f"model=resnet50 batch-size=32 dataset={src}").with_fields(mode="adjust").render()
    slurm.by_id[9] = job(9, "PENDING", ok, hinted)
    stager.poll(slurm.jobs())
    while not stager.work.empty():
        stager.transfer(*stager.work.get())          # a check that the copy still matches: a hit
    stager.poll(slurm.jobs())
    staged = codec.parse_staged(Record.parse(slurm.by_id[9].comment).get("staged"))
    assert staged["gpu01"].startswith("gpu01:") and ":hit:@" in staged["gpu01"]
    slurm.by_id[9] = job(9, "RUNNING", slurm.by_id[9].comment, hinted, nodes=("gpu01",), start=time.time() + 5)
    stager.poll(slurm.jobs())
    assert codec.lead_of(codec.parse_staged(Record.parse(slurm.by_id[9].comment).get("staged"))["gpu01"], None) >= 4
    # jobs that are gone: their files go, their copies are free to evict
    slurm.by_id.clear()
    stager.poll([])
    assert list((area / "run" / "staged").iterdir()) == [] and stager.in_use() == set()


# ------------------------------------------------------------------ the daemon's side

TOPOLOGY = "SwitchName=leaf1 Nodes=gpu[01-02]\nSwitchName=leaf2 Nodes=gpu[03-04]\nSwitchName=spine Switches=leaf[1-2]\n"


def test_prediction_frees_the_gpus_of_the_jobs_that_end_first() -> None:
    topo = parse_topology(TOPOLOGY)
    state = ClusterState({n: NodeState(n, 4, 0) for n in ("gpu01", "gpu02", "gpu03", "gpu04")})
    running = [Job(job_id=i, name="x", user="bob", state="RUNNING", nodes=(n,), gpus=4,
                   end_time=datetime.fromtimestamp(end, timezone.utc))
               for i, (n, end) in enumerate([("gpu01", 900), ("gpu02", 300), ("gpu03", 600), ("gpu04", 100)], 1)]
    assert predict(PlacementRequest("j", 4), state, running, topo, 0) == {"gpu04": 4}
    assert predict(PlacementRequest("j", 8, 4), state, running, topo, 0) in ({"gpu02": 4, "gpu04": 4},)


def test_the_placer_prefers_data_holders_only_on_a_tie() -> None:
    topo = parse_topology(TOPOLOGY)
    placer = make_placer("liquid", topo)
    idle = ClusterState({n: NodeState(n, 4, 4) for n in ("gpu01", "gpu02", "gpu03", "gpu04")})
    assert placer.place(PlacementRequest("j", 2), idle).nodes == {"gpu01": 2}
    assert placer.place(PlacementRequest("j", 2, prefer=frozenset({"gpu03"})), idle).nodes == {"gpu03": 2}
    # a better fit (a partly used node) still wins over the data
    busy = ClusterState({**idle.nodes, "gpu02": NodeState("gpu02", 4, 2)})
    assert placer.place(PlacementRequest("j", 2, prefer=frozenset({"gpu03"})), busy).nodes == {"gpu02": 2}
    # across nodes: the allocation holding the data, among equally good ones
    assert placer.place(PlacementRequest("j", 8, 4, prefer=frozenset({"gpu03", "gpu04"})), idle).nodes == {"gpu03": 4, "gpu04": 4}


def test_daemon_learns_holders_from_records_and_hints() -> None:
    from slurm_liquid.config import Config, StagingConfig as SC

    hints = StagingHints(Config(staging=SC(enabled=True)), None, parse_topology(TOPOLOGY), time.time)
    spec = "model=resnet50 batch-size=32 dataset=/shared/a"
    done = Record(spec=spec).with_fields(staged="gpu03:1G:2s:+5s,gpu04:-:-:late").render()
    hints.observe([Job(job_id=1, name="x", user="alice", state="COMPLETED", comment=done)])
    waiting = Job(job_id=2, name="x", user="alice", state="PENDING", comment=Record(spec=spec).render())
    assert hints.prefer(waiting) == {"gpu03"}
    assert hints.prefer(Job(job_id=3, name="x", user="bob", state="PENDING", comment=Record(spec=spec).render())) == set()


def test_staging_settings_are_checked() -> None:
    from slurm_liquid.config import parse
    from slurm_liquid.errors import UsageError

    cfg = parse('[staging]\nenabled = true\ndir = "/scratch/stage"\nquota_gb = 500\ntransfers = 4\n').staging
    assert (cfg.enabled, cfg.dir, cfg.quota_gb, cfg.transfers) == (True, "/scratch/stage", 500.0, 4)
    for bad in ('dir = "relative"', "transfers = 0", "quota_gb = -1", "enabled = 1", "speed = 3"):
        with pytest.raises(UsageError, match=r"\[staging\]"):
            parse(f"[staging]\n{bad}\n")
