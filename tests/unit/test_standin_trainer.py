"""The stand-in elastic trainer, run as a job would run it: a subprocess with Slurm's environment."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_liquid import progress

TRAINER = Path(__file__).resolve().parents[2] / "examples" / "elastic" / "standin_trainer.py"
JOB = 4711
WAIT_S = 60  # a generous bound for a loaded machine; nothing asserts how fast anything is


def load_trainer():
    import importlib.util

    spec = importlib.util.spec_from_file_location("standin_trainer", TRAINER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cluster(tmp_path):
    """Environment and paths of job JOB on one node with 2 GPUs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CUDA_"))}
    env.update(SLURM_JOB_ID=str(JOB), SLURM_GPUS_ON_NODE="2", SLURM_JOB_NUM_NODES="1",
               SLURM_LIQUID_PROGRESS_DIR=str(tmp_path / "progress"))
    (tmp_path / "progress").mkdir()
    return env, tmp_path / "progress", tmp_path / "checkpoints"


def args(checkpoints: Path, steps: int, speedup: float, *extra: str) -> list[str]:
    return [sys.executable, str(TRAINER), "--app", "cifar10", "--steps", str(steps),
            "--checkpoint-dir", str(checkpoints), "--speedup", str(speedup), *extra]


def report(directory: Path) -> dict | None:
    return progress.read_report(directory, JOB, os.getuid())


def wait_for(what, proc: subprocess.Popen):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        assert proc.poll() is None, f"the trainer exited with {proc.returncode}: {proc.communicate()}"
        time.sleep(0.02)
    pytest.fail(f"nothing after {WAIT_S} s")


def test_step_time_is_the_measured_trace() -> None:
    trainer = load_trainer()
    # cifar10 at its initial batch 128 on 2 GPUs of one node: 64 per GPU, measured at placement "2".
    rows = [line.split(",") for line in (Path(progress.__file__).parent / "sim/data/pollux/traces/cifar10/placements.csv")
            .read_text().splitlines()[1:]]
    measured = next(float(r[2]) for r in rows if r[0] == "2" and r[1] == "64")
    assert trainer.step_seconds("cifar10", 128, 2, 1) == pytest.approx(measured)
    # On 8 GPUs over 2 nodes the per-GPU batch (16) is below the smallest measured (32): that one is used.
    smallest = next(float(r[2]) for r in rows if r[0] == "44" and r[1] == "32")
    assert trainer.step_seconds("cifar10", 128, 8, 2) == pytest.approx(smallest)


def test_runs_to_the_end_and_reports_step_equal_total(cluster) -> None:
    env, reports, checkpoints = cluster
    done = subprocess.run(args(checkpoints, 30, 1000), env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert f"job {JOB} app cifar10 gpus 2 nodes 1 resumed at step 0/30" in done.stdout
    final = report(reports)
    assert (final["step"], final["total"], final["gpus"], final["nodes"]) == (30, 30, 2, 1)
    assert final["samples_per_s"] > 0
    assert [p.name for p in reports.iterdir()] == [f"{JOB}.json"]


def test_resumes_from_its_checkpoint_with_the_new_gpu_count(cluster) -> None:
    env, reports, checkpoints = cluster
    checkpoints.mkdir()
    (checkpoints / f"{JOB}.json").write_text(json.dumps({"step": 25}))
    env["SLURM_GPUS_ON_NODE"] = "4"
    done = subprocess.run(args(checkpoints, 30, 1000), env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert "gpus 4 nodes 1 resumed at step 25/30" in done.stdout
    assert (report(reports)["step"], report(reports)["gpus"]) == (30, 4)


def test_resumes_from_the_checkpoint_its_last_report_names(cluster, monkeypatch) -> None:
    env, reports, checkpoints = cluster
    elsewhere = reports.parent / "elsewhere.json"
    elsewhere.write_text(json.dumps({"step": 12}))
    for name in ("SLURM_JOB_ID", "SLURM_LIQUID_PROGRESS_DIR"):
        monkeypatch.setenv(name, env[name])
    assert progress.Reporter().report(12, 30, checkpoint=str(elsewhere))
    done = subprocess.run(args(checkpoints, 30, 1000), env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert "resumed at step 12/30" in done.stdout, done.stderr


def test_outside_slurm_it_trains_on_one_gpu_and_reports_nothing(cluster) -> None:
    env, reports, checkpoints = cluster
    del env["SLURM_JOB_ID"], env["SLURM_GPUS_ON_NODE"], env["SLURM_JOB_NUM_NODES"]
    done = subprocess.run(args(checkpoints, 5, 1000), env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert "job local app cifar10 gpus 1 nodes 1 resumed at step 0/5" in done.stdout
    assert list(reports.iterdir()) == []


def test_sigusr1_writes_a_checkpoint_reports_it_and_training_goes_on(cluster) -> None:
    env, reports, checkpoints = cluster
    proc = subprocess.Popen(args(checkpoints, 10**9, 50, "--report-interval", "0"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: report(reports), proc)  # the first report comes after the handler is installed
        os.kill(proc.pid, signal.SIGUSR1)
        first = wait_for(lambda: (r := report(reports)) and r["checkpoint_step"] is not None and r, proc)
        assert first["checkpoint"] == str(checkpoints / f"{JOB}.json")
        assert json.loads((checkpoints / f"{JOB}.json").read_text()) == {"step": first["checkpoint_step"]}
        # It trains on, and the request was cleared: later reports still name that one checkpoint.
        later = wait_for(lambda: (r := report(reports)) and r["step"] >= first["checkpoint_step"] + 20 and r, proc)
        assert later["checkpoint_step"] == first["checkpoint_step"]
        os.kill(proc.pid, signal.SIGUSR1)
        second = wait_for(lambda: (r := report(reports)) and r["checkpoint_step"] != first["checkpoint_step"] and r,
                          proc)
        assert second["checkpoint_step"] >= later["step"]
        assert json.loads((checkpoints / f"{JOB}.json").read_text()) == {"step": second["checkpoint_step"]}
    finally:
        proc.kill()
        proc.communicate()


def test_exit_on_checkpoint_then_resume(cluster) -> None:
    env, reports, checkpoints = cluster
    proc = subprocess.Popen(args(checkpoints, 10**9, 50, "--exit-on-checkpoint"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: report(reports), proc)
        os.kill(proc.pid, signal.SIGUSR1)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == 99, err
    step = report(reports)["checkpoint_step"]
    assert json.loads((checkpoints / f"{JOB}.json").read_text()) == {"step": step}
    # Requeued: the next start resumes where the checkpoint was taken.
    done = subprocess.run(args(checkpoints, step + 3, 1000), env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert f"resumed at step {step}/{step + 3}" in done.stdout
    assert report(reports)["step"] == step + 3
