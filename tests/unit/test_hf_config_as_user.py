"""hf-config is a file a user names: nobody reads a device or FIFO through it, and root (the daemon
building a record, `explain` run by an admin) reads it only as the job's user, bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_liquid import asuser
from slurm_liquid.ledger import Record

from tests.unit.test_daemon_admit import FakeSlurm, cluster, job, run_pass
from tests.unit.test_explain import CONFIG, a_job

REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
as_root = pytest.mark.skipif(not ROOT, reason="reads as another user: needs root")
CONFIG_JSON = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
               "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 2048}
READ = ("import sys\nfrom slurm_liquid.estimate.shape import read_hf_config\nfrom slurm_liquid.errors import UsageError\n"
        "try:\n    read_hf_config(sys.argv[1])\nexcept UsageError as exc:\n    print('refused:', exc)\n")


@pytest.fixture
def shared() -> Path:
    """A world-traversable directory (the job's user must reach the files in it)."""
    base = Path(tempfile.mkdtemp(prefix="liquid-hfconfig-test-"))
    base.chmod(0o755)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.fixture(autouse=True)
def child_python(monkeypatch) -> None:
    """The reader runs as nobody: a Python nobody may execute, finding this checkout."""
    monkeypatch.setattr(asuser, "PYTHON", PYTHON, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def read_bounded(path: str) -> subprocess.CompletedProcess:
    """read_hf_config(path) in a child with 1 GiB of address space and 20 s (the old code read
    /dev/zero until memory ran out and blocked on a FIFO forever)."""
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    try:
        return subprocess.run([sys.executable, "-c", limit + READ, path], capture_output=True, text=True, timeout=20,
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"read_hf_config({path}) blocked for 20 s")


def test_a_device_or_fifo_is_refused_by_type_without_reading_it(shared: Path) -> None:
    fifo = shared / "config.json"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        proc = read_bounded(path)
        assert proc.returncode == 0 and "refused:" in proc.stdout and "not a regular file" in proc.stdout, proc


def test_a_file_that_grows_past_the_bound_while_read_is_refused(shared: Path) -> None:
    with pytest.raises(asuser.UserFileError, match="more than"):
        asuser.read_regular("/proc/self/status", 10)     # stat says 0 bytes; reading says more


def script_job(job_id: int, config_path: Path):
    script = f"#!/bin/sh\n#SBATCH --gpus=h100:4\n#LIQUID hf-config={config_path} batch-size=8\npython train.py\n"
    return FakeSlurm([replace(job(job_id, comment=""), user="nobody")], cluster(), scripts={job_id: script})


@as_root
def test_the_daemon_reads_hf_config_as_the_jobs_user(shared: Path) -> None:
    secret = shared / "root-only.json"
    secret.write_text(json.dumps(CONFIG_JSON))
    secret.chmod(0o600)                         # root's file: its numbers must not reach nobody's record
    client = script_job(80, secret)
    run_pass(client)
    record = Record.parse(client.only(80)["Comment"])
    assert "est" not in record.fields and record.get("err"), record.render()
    assert record.get("placed")                 # fail open: the job still goes in
    # the same file readable by the user is read (as the user) and estimated from
    secret.chmod(0o644)
    client = script_job(81, secret)
    run_pass(client)
    record = Record.parse(client.only(81)["Comment"])
    assert record.get("est") and "err" not in record.fields, record.render()


@as_root
def test_the_daemon_never_reads_a_fifo_a_user_names(shared: Path) -> None:
    fifo = shared / "config.json"
    os.mkfifo(fifo, 0o666)
    client = script_job(82, fifo)
    run_pass(client)                            # the old code blocked here until a writer came
    record = Record.parse(client.only(82)["Comment"])
    assert "est" not in record.fields and record.get("err") and record.get("placed"), record.render()


@as_root
def test_explain_run_by_root_reads_hf_config_as_the_jobs_user(shared: Path) -> None:
    secret = shared / "root-only.json"
    secret.write_text(json.dumps(CONFIG_JSON))
    secret.chmod(0o600)
    record = f"liquid/1 mode=adjust asked=gpu:h100:4 | hf-config={secret} batch-size=8"
    out = explain_for("nobody", record)
    assert "estimate" not in out and out["explanation"].startswith("cannot re-estimate"), out
    secret.chmod(0o644)
    assert "estimate" in explain_for("nobody", record)


def explain_for(user: str, record: str) -> dict:
    from slurm_liquid.explain import explain

    return explain(replace(a_job(record), user=user), CONFIG)


@as_root
def test_an_unknown_user_or_a_stopped_reader_is_bounded(shared: Path, monkeypatch) -> None:
    good = shared / "config.json"
    good.write_text(json.dumps(CONFIG_JSON))
    good.chmod(0o644)
    with asuser.reading_as("no-such-user-here"), pytest.raises(asuser.UserFileError, match="unknown"):
        asuser.read_user_file(str(good), 4096)
    with asuser.reading_as("nobody"):
        assert json.loads(asuser.read_user_file(str(good), 4096)) == CONFIG_JSON
    # a reader that never answers (a hung file system, or its user stopped it) is killed in time
    monkeypatch.setattr(asuser, "PYTHON", "/bin/sleep", raising=False)
    monkeypatch.setattr(asuser, "reader_argv", lambda max_bytes: ["/bin/sleep", "60"], raising=False)
    with asuser.reading_as("nobody"), pytest.raises(asuser.UserFileError, match="timeout"):
        asuser.read_user_file(str(good), 4096, timeout=1.0)


def test_an_answer_past_its_bound_is_cut_off() -> None:
    flood = asuser.run_as(None, [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
                          b"", timeout=20, max_out=100_000)
    assert flood.status == "too-long" and len(flood.out) <= 100_000
    quiet = asuser.run_as(None, [sys.executable, "-c", "import time; time.sleep(30)"], b"", timeout=20,
                          max_out=10, stall_s=1.0)
    assert quiet.status == "stalled"
