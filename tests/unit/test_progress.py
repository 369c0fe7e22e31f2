"""The progress API: reports, the rate limit, resume, the checkpoint signal, and the daemon's checks."""

import json
import os
import signal
import stat
import subprocess
import sys
import threading

import pytest

from slurm_liquid import progress
from slurm_liquid.progress import Reporter, Resume, read_report

JOB = 42


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def job(tmp_path, monkeypatch):
    """Inside Slurm job 42 on 2 nodes x 4 GPUs, reporting to tmp_path/progress."""
    directory = tmp_path / "progress"
    directory.mkdir()
    for name in ("SLURM_JOB_ID", "SLURM_GPUS_ON_NODE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", str(JOB))
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "4")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv(progress.DIR_ENV, str(directory))
    monkeypatch.setattr(progress, "_warned", set())
    return directory


@pytest.fixture
def signals(monkeypatch):
    """Fresh signal state; SIGUSR1's handler is put back afterwards."""
    before = signal.getsignal(signal.SIGUSR1)
    monkeypatch.setattr(progress, "_requested", False)
    monkeypatch.setattr(progress, "_installed", set())
    monkeypatch.setattr(progress, "_lazy_tried", False)
    monkeypatch.setattr(progress, "_warned", set())
    yield
    signal.signal(signal.SIGUSR1, before)


def written(directory):
    return json.loads((directory / f"{JOB}.json").read_text())


# -- report and resume --------------------------------------------------------------------------

def test_report_then_resume_round_trip(job, monkeypatch) -> None:
    assert Reporter().report(10, total=100, samples_per_s=512.0, checkpoint="/ck/10", epoch=1)
    data = read_report(job, JOB, os.getuid())
    assert data is not None
    assert {k: data[k] for k in ("version", "job_id", "step", "total", "samples_per_s", "epoch", "checkpoint",
                                 "checkpoint_step", "gpus", "nodes")} == {
        "version": 1, "job_id": JOB, "step": 10, "total": 100, "samples_per_s": 512.0, "epoch": 1,
        "checkpoint": "/ck/10", "checkpoint_step": 10, "gpus": 8, "nodes": 2}
    assert isinstance(data["time"], float) and isinstance(data["checkpoint_time"], float)
    # Requeued onto one node: a new process (a new Reporter) sees the checkpoint and the new allocation.
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    assert Reporter().resume() == Resume(checkpoint="/ck/10", step=10, gpus=4, nodes=1)


def test_later_reports_repeat_the_last_checkpoint_also_after_a_restart(job) -> None:
    clock = Clock()
    first = Reporter(clock=clock)
    first.report(10, checkpoint="/ck/10")
    clock.now += 60
    first.report(25)
    assert (written(job)["step"], written(job)["checkpoint"], written(job)["checkpoint_step"]) == (25, "/ck/10", 10)
    Reporter().report(30)  # the restarted process
    assert (written(job)["step"], written(job)["checkpoint"], written(job)["checkpoint_step"]) == (30, "/ck/10", 10)
    assert Reporter().resume().step == 10  # where the checkpoint was taken, not the last reported step


def test_resume_without_a_report_starts_from_scratch(job) -> None:
    assert Reporter().resume() == Resume(None, 0, 8, 2)


def test_resume_ignores_a_report_it_does_not_own(job, monkeypatch) -> None:
    Reporter().report(10, checkpoint="/ck/10")
    monkeypatch.setattr(os, "getuid", lambda: 4242)  # as if another user had written it
    assert Reporter().resume().checkpoint is None


def test_outside_slurm_nothing_is_written(job, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID")
    assert Reporter().report(1, checkpoint="/ck") is False
    assert list(job.iterdir()) == []


def test_a_job_id_that_is_not_a_number_writes_nothing(job, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "../escape")
    assert Reporter().report(1) is False
    assert list(job.parent.iterdir()) == [job] and list(job.iterdir()) == []


def test_writes_are_atomic_and_leave_no_temporary_files(job, monkeypatch) -> None:
    clock = Clock()
    reporter = Reporter(clock=clock)
    for step in range(5):
        clock.now += 10
        assert reporter.report(step)
    assert [p.name for p in job.iterdir()] == [f"{JOB}.json"]
    # A write that fails at the last moment leaves the previous report whole and no temporary file.
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    clock.now += 10
    assert reporter.report(99) is False
    assert written(job)["step"] == 4
    assert [p.name for p in job.iterdir()] == [f"{JOB}.json"]
    assert stat.S_IMODE((job / f"{JOB}.json").stat().st_mode) == 0o644


def test_rate_limit_except_checkpoints_and_the_final_step(job) -> None:
    clock = Clock()
    reporter = Reporter(min_interval_s=5.0, clock=clock)
    clock.now = 100.0
    assert reporter.report(1, total=100)
    clock.now = 104.5
    assert reporter.report(2, total=100) is False
    assert written(job)["step"] == 1
    clock.now = 105.0
    assert reporter.report(3, total=100)
    assert written(job)["step"] == 3
    clock.now = 105.5
    assert reporter.report(4, total=100, checkpoint="/ck/4")
    assert written(job)["checkpoint"] == "/ck/4"
    clock.now = 106.0
    assert reporter.report(5, total=100) is False
    assert reporter.report(100, total=100)
    assert written(job)["step"] == 100
    assert reporter.report(100, total=100, force=True)


def test_never_raises_on_an_unwritable_directory(job, monkeypatch, capsys) -> None:
    # A path below a regular file cannot be written even by root (tests may run as root).
    blocker = job / "file"
    blocker.write_text("")
    monkeypatch.setenv(progress.DIR_ENV, str(blocker / "progress"))
    clock = Clock()
    reporter = Reporter(clock=clock)
    assert reporter.report(1) is False
    clock.now += 60
    assert reporter.report(2, checkpoint="/ck/2") is False
    assert reporter.report(3, samples_per_s="not a number") is False
    assert reporter.report("three") is False  # a bad argument does not raise either
    assert capsys.readouterr().err.count("cannot report progress") == 1


def test_values_that_are_not_json_numbers_are_normalised(job) -> None:
    Reporter().report(7.0, samples_per_s=float("nan"))
    assert written(job)["step"] == 7 and written(job)["samples_per_s"] is None


# -- allocation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("env,expected", [
    ({"SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_NUM_NODES": "2"}, (8, 2)),
    ({"SLURM_GPUS_ON_NODE": "2", "SLURM_NNODES": "3"}, (6, 3)),
    ({"SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "3"}, (2, 1)),  # the job's, not the step's
    ({"CUDA_VISIBLE_DEVICES": "0,2,3"}, (3, 1)),
    ({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_NUM_NODES": "2"}, (4, 2)),
    ({"CUDA_VISIBLE_DEVICES": "1,-1,2"}, (1, 1)),  # CUDA stops at the first invalid entry
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, (0, 1)),
    ({"SLURM_GPUS_ON_NODE": "lots", "CUDA_VISIBLE_DEVICES": "0"}, (1, 1)),
    ({}, (0, 1)),
])
def test_allocation_from_the_environment(monkeypatch, env, expected) -> None:
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert progress.allocation() == expected


# -- the checkpoint signal ----------------------------------------------------------------------

def test_checkpoint_requested_after_sigusr1(signals) -> None:
    assert progress.install("USR1")
    assert progress.checkpoint_requested() is False
    os.kill(os.getpid(), signal.SIGUSR1)
    assert progress.checkpoint_requested() is True
    progress.clear()
    assert progress.checkpoint_requested() is False


def test_the_handler_is_installed_lazily(signals) -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # without the lazy install the signal is lost, not fatal
    assert progress.checkpoint_requested() is False
    os.kill(os.getpid(), signal.SIGUSR1)
    assert progress.checkpoint_requested() is True


def test_another_signal_and_the_jobs_own_handler_still_runs(signals) -> None:
    seen = []
    before = signal.signal(signal.SIGUSR2, lambda signum, frame: seen.append(signum))
    try:
        assert progress.install("SIGUSR2")
        os.kill(os.getpid(), signal.SIGUSR2)
        assert progress.checkpoint_requested() is True and seen == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_install_off_the_main_thread_or_with_a_bad_name_does_not_raise(signals, capsys) -> None:
    results = []
    thread = threading.Thread(target=lambda: results.append(progress.install()))
    thread.start()
    thread.join()
    assert results == [False]
    assert progress.install("NOSUCHSIGNAL") is False
    assert "cannot catch signal" in capsys.readouterr().err


# -- the daemon's side: read_report -------------------------------------------------------------

def valid(job_id=JOB, **extra) -> dict:
    return {"version": 1, "job_id": job_id, "step": 5, **extra}


def put(directory, data, name=f"{JOB}.json"):
    path = directory / name
    path.write_bytes(data if isinstance(data, bytes) else (data if isinstance(data, str) else json.dumps(data)).encode())
    return path


def test_read_report_accepts_a_genuine_report(tmp_path) -> None:
    put(tmp_path, valid())
    assert read_report(tmp_path, JOB, os.getuid())["step"] == 5
    assert read_report(str(tmp_path), str(JOB), os.getuid())["step"] == 5


def test_read_report_rejects_another_owner(tmp_path) -> None:
    put(tmp_path, valid())
    assert read_report(tmp_path, JOB, os.getuid() + 1) is None


def test_read_report_rejects_a_symlink(tmp_path) -> None:
    target = put(tmp_path, valid(), name="elsewhere.json")
    (tmp_path / f"{JOB}.json").symlink_to(target)
    assert read_report(tmp_path, JOB, os.getuid()) is None


def test_read_report_rejects_a_hard_link(tmp_path) -> None:
    target = put(tmp_path, valid(), name="elsewhere.json")
    os.link(target, tmp_path / f"{JOB}.json")
    assert read_report(tmp_path, JOB, os.getuid()) is None


def test_read_report_rejects_an_oversized_file(tmp_path) -> None:
    report = valid(padding="x" * progress.MAX_REPORT_BYTES)
    put(tmp_path, report)
    assert read_report(tmp_path, JOB, os.getuid()) is None
    # The same report just under the limit is accepted: the size is what was refused.
    report["padding"] = "x" * (progress.MAX_REPORT_BYTES - len(json.dumps(valid(padding=""))))
    put(tmp_path, report)
    assert read_report(tmp_path, JOB, os.getuid()) is not None


@pytest.mark.parametrize("content", [
    "{not json", b"\xff\xfe{}", "[1, 2]", "null", "[" * 60000,
    json.dumps(valid(job_id=JOB + 1)), json.dumps(valid(job_id=str(JOB))), json.dumps({**valid(), "version": 2}),
    json.dumps({**valid(), "version": True}), json.dumps({"job_id": JOB, "step": 5}),
])
def test_read_report_rejects_bad_content(tmp_path, content) -> None:
    put(tmp_path, content)
    assert read_report(tmp_path, JOB, os.getuid()) is None


def test_read_report_rejects_what_is_not_a_regular_file(tmp_path) -> None:
    assert read_report(tmp_path, JOB, os.getuid()) is None  # missing
    (tmp_path / f"{JOB}.json").mkdir()
    assert read_report(tmp_path, JOB, os.getuid()) is None
    os.rmdir(tmp_path / f"{JOB}.json")
    os.mkfifo(tmp_path / f"{JOB}.json")
    assert read_report(tmp_path, JOB, os.getuid()) is None


def test_ensure_directory_is_world_writable_and_sticky(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        path = progress.ensure_directory(tmp_path / "a" / "progress")
        assert stat.S_IMODE(path.stat().st_mode) == 0o1777
        path.chmod(0o755)
        assert stat.S_IMODE(progress.ensure_directory(path).stat().st_mode) == 0o1777
    finally:
        os.umask(old)


def test_import_is_light() -> None:
    code = "import slurm_liquid.progress, sys; assert 'numpy' not in sys.modules, 'numpy imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ensure_directory_never_follows_a_planted_symlink(tmp_path) -> None:
    """Finding 4: a symlink planted at the progress path made a root-owned directory world-writable."""
    victim = tmp_path / "etc-like"
    victim.mkdir(mode=0o755)
    users = tmp_path / "shared"
    users.mkdir(mode=0o777)
    users.chmod(0o777)                     # a directory users can write (e.g. /shared)
    (users / "progress").symlink_to(victim)
    with pytest.raises(OSError):
        progress.ensure_directory(users / "progress")
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755
    (users / "progress").unlink()          # a link higher up the path is refused too
    (users / "deep").symlink_to(victim)
    with pytest.raises(OSError):
        progress.ensure_directory(users / "deep" / "progress")
    assert not (victim / "progress").exists() and stat.S_IMODE(victim.stat().st_mode) == 0o755


def test_ensure_directory_follows_the_admins_own_link(tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)   # made by this user, in a directory only it can write
    tmp_path.chmod(0o755)
    path = progress.ensure_directory(tmp_path / "link" / "progress")
    assert stat.S_IMODE((real / "progress").stat().st_mode) == 0o1777 and path == tmp_path / "link" / "progress"


@pytest.mark.parametrize("report, expected", [
    ({"step": 10, "total": 100, "epoch": 2, "checkpoint_time": 5.0}, (10, 100, 2, 5.0)),
    ({"epoch": "x", "total": 1e400, "step": 10 ** 400}, (None, None, 0, None)),
    ({"step": float("nan"), "total": True, "checkpoint_time": 10 ** 400}, (None, None, 0, None)),
    ({"step": -1, "total": 10 ** 16}, (None, None, 0, None)),
    ("not a dict", (None, None, 0, None)),
])
def test_a_report_is_read_as_bounded_claims(report, expected) -> None:
    claims = progress.Progress.of(report)
    assert (claims.step, claims.total, claims.epoch, claims.checkpoint_time) == expected


def test_a_checkpoint_signal_during_interpreter_shutdown_does_not_kill_the_job(tmp_path) -> None:
    """Python restores the default action of handled signals at shutdown; a USR1 then (the daemon's
    checkpoint request racing the job's end) must not turn a finished job into a killed one."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "late.py"
    # Registered before install(), so it runs after ours (atexit is LIFO): by then, before Python's own
    # finalization restores the default action, the signal must be ignored; a USR1 now is harmless.
    script.write_text(
        "import atexit, os, signal\n"
        "def last():\n"
        "    ignored = signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN\n"
        "    os.kill(os.getpid(), signal.SIGUSR1)\n"
        "    os._exit(0 if ignored else 3)\n"
        "atexit.register(last)\n"
        "from slurm_liquid import progress\n"
        "progress.install()\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
