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


# -- --curve: step times from a drawn scaling curve instead of the traces ---------------------------

def curve_json(**step_s: float) -> str:
    return json.dumps({"kind": "plateau2", "base_step_s": 1.0, "step_s": step_s})


def curve_args(checkpoints: Path, steps: int, curve: str, *extra: str) -> list[str]:
    return [sys.executable, str(TRAINER), "--curve", curve, "--steps", str(steps), "--batch-size", "64",
            "--checkpoint-dir", str(checkpoints), "--report-interval", "0", *extra]


def events(stdout: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith("standin-trainer: event="):
            name, rest = line.split("event=", 1)[1].split(" ", 1)
            found.setdefault(name, []).append(rest)
    return found


def test_curve_sets_the_step_time_of_the_allocation_and_the_reported_rate(cluster, tmp_path) -> None:
    env, reports, checkpoints = cluster
    env.update(SLURM_GPUS_ON_NODE="2", SLURM_JOB_NUM_NODES="2")        # 4 GPUs over 2 nodes
    path = tmp_path / "curve.json"
    path.write_text(curve_json(**{"1x1": 0.4, "4x1": 0.1, "4x2": 0.25}))
    done = subprocess.run(curve_args(checkpoints, 4, str(path)), env=env, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert "app curve:plateau2 gpus 4 nodes 2 resumed at step 0/4" in done.stdout
    seen = events(done.stdout)
    assert "step_s=0.25" in seen["start"][0] and "gpus=4 nodes=2" in seen["start"][0]
    assert seen["first-step"][0].endswith("step=1")
    start_t = float(seen["start"][0].split("t=")[1].split()[0])
    first_t = float(seen["first-step"][0].split("t=")[1].split()[0])
    assert first_t - start_t >= 0.25            # it slept the curve's step, not the trace's
    final = report(reports)
    assert (final["step"], final["gpus"], final["nodes"]) == (4, 4, 2)
    assert final["samples_per_s"] == pytest.approx(64 / 0.25)   # batch / the curve's step: honest


def test_inline_curve_on_one_node_and_the_trace_stays_the_default(cluster) -> None:
    env, reports, checkpoints = cluster
    done = subprocess.run(curve_args(checkpoints, 3, curve_json(**{"2x1": 0.01})), env=env, capture_output=True,
                          text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert report(reports)["samples_per_s"] == pytest.approx(64 / 0.01)
    trace = subprocess.run(args(checkpoints, 3, 1000), env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert "app cifar10 gpus 2" in trace.stdout
    assert report(reports)["samples_per_s"] != pytest.approx(64 / 0.01)


@pytest.mark.parametrize("curve, message", [
    ('{"step_s": {"1x1": 0.5}}', "no step time for 2 GPUs on 1 node"),       # the allocation is not tabled
    ('{"step_s": {"2x1": -1}}', "out of range"),
    ('{"step_s": {"two": 1}}', "keys are"),
    ('{"step_s": ', "not JSON"),
    ("/nonexistent/curve.json", "cannot read curve"),
])
def test_a_bad_curve_is_one_clear_message(cluster, curve, message) -> None:
    env, _, checkpoints = cluster
    done = subprocess.run(curve_args(checkpoints, 3, curve), env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


def test_curve_needs_a_batch_size_and_one_source_is_required(cluster) -> None:
    env, _, checkpoints = cluster
    no_batch = [a for a in curve_args(checkpoints, 3, curve_json(**{"2x1": 0.1})) if a not in ("--batch-size", "64")]
    assert subprocess.run(no_batch, env=env, capture_output=True, timeout=WAIT_S).returncode == 2
    neither = [sys.executable, str(TRAINER), "--steps", "3"]
    done = subprocess.run(neither, env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 2 and "--app" in done.stderr


def test_resumes_from_its_checkpoint_on_a_new_allocation_of_the_curve(cluster) -> None:
    env, reports, checkpoints = cluster
    checkpoints.mkdir()
    (checkpoints / f"{JOB}.json").write_text(json.dumps({"step": 5}))
    env["SLURM_GPUS_ON_NODE"] = "1"
    done = subprocess.run(curve_args(checkpoints, 7, curve_json(**{"1x1": 0.02, "2x1": 0.01})), env=env,
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert "gpus 1 nodes 1 resumed at step 5/7" in done.stdout
    assert report(reports)["samples_per_s"] == pytest.approx(64 / 0.02)
