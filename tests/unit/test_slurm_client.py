"""The client's commands, backend choice and error handling, over recorded outputs and real processes."""

from __future__ import annotations

import json
import logging
import os
import sys
import types
import pytest

from slurm_liquid.slurm import CliBackend, LocalRunner, SlurmCommandError, SlurmError, connect
from slurm_liquid.slurm.pyslurm_backend import PyslurmBackend
from tests.unit.recorded import RecordedRunner


@pytest.mark.parametrize("version, nodes_command", [("22.05", "sinfo"), ("24.11", "scontrol")])
def test_nodes_come_from_the_command_each_version_has(version: str, nodes_command: str) -> None:
    runner = RecordedRunner(version)
    nodes = CliBackend(runner).nodes()
    assert len(nodes) == 4
    assert [c[0] for c in runner.calls] == ["scontrol", nodes_command]


def test_writes_are_argument_lists() -> None:
    runner = RecordedRunner("24.11")
    client = CliBackend(runner)
    client.update_job(7, TresPerNode="gres/gpu:2", NumNodes=1, ReqNodeList="gpu[01-02]")
    client.set_comment(7, "liquid:v1 a b; rm -rf /")
    client.hold(7)
    client.release(7)
    client.requeue_hold(7)
    client.signal(7, "USR1")
    client.signal(7, "SIGTERM", batch_only=True)
    client.cancel(7)
    assert client.submit("#!/bin/sh\ntrue\n", ["-G", "1"]) == 42
    assert runner.calls == [
        ["scontrol", "update", "JobId=7", "TresPerNode=gres/gpu:2", "NumNodes=1", "ReqNodeList=gpu[01-02]"],
        ["scontrol", "update", "JobId=7", "Comment=liquid:v1 a b; rm -rf /"],
        ["scontrol", "hold", "7"],
        ["scontrol", "release", "7"],
        ["scontrol", "requeuehold", "7"],
        ["scancel", "--signal=USR1", "--full", "7"],
        ["scancel", "--signal=SIGTERM", "--batch", "7"],
        ["scancel", "7"],
        ["sbatch", "--parsable", "-G", "1"],
    ]


@pytest.mark.parametrize("call, message", [
    (lambda c: c.update_job(7), "at least one field"),
    (lambda c: c.update_job(7, **{"Bad Key": "1"}), "invalid job field"),
    (lambda c: c.update_job(7, Comment="two\nlines"), "invalid job field"),
    (lambda c: c.set_comment(7, "x" * 1025), "1025 characters; Slurm takes at most 1024"),
    (lambda c: c.signal(7, "USR1; reboot"), "invalid signal"),
])
def test_bad_requests_are_refused_before_reaching_slurm(call, message: str) -> None:
    runner = RecordedRunner("24.11")
    with pytest.raises(SlurmError, match=message):
        call(CliBackend(runner))
    assert runner.calls == []


def test_job_ids_filter_and_empty_lists() -> None:
    runner = RecordedRunner("24.11")
    client = CliBackend(runner)
    assert client.jobs([]) == [] and client.accounting([]) == [] and runner.calls == []
    client.jobs([5, 3, 5])
    assert runner.calls[-1] == ["squeue", "--json", "--jobs=3,5"]


def test_local_runner_reports_failures_with_the_command_and_stderr() -> None:
    run = LocalRunner()
    assert run([sys.executable, "-c", "print('ok')"], timeout=10) == "ok\n"
    with pytest.raises(SlurmCommandError) as err:
        run([sys.executable, "-c", "import sys; sys.stderr.write('sbatch: error: Invalid gres\\n'); sys.exit(1)"],
            timeout=10)
    assert err.value.returncode == 1 and "exit code 1: sbatch: error: Invalid gres" in str(err.value)
    with pytest.raises(SlurmCommandError, match="did not answer within 0.2 s"):
        run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)
    with pytest.raises(SlurmCommandError, match="not installed or not on PATH"):
        run(["squeue-that-does-not-exist", "--json"], timeout=5)


def test_unreadable_output_is_a_clear_error() -> None:
    class Garbage(RecordedRunner):
        def __call__(self, argv, *, timeout, stdin=None):
            return "squeue: error: slurm_load_jobs error: Unable to contact slurm controller"

    with pytest.raises(SlurmError, match="output of `squeue --json`: not valid JSON"):
        CliBackend(Garbage("24.11")).jobs()


def test_topology_of_a_cluster_without_topology_plugin_is_flat() -> None:
    class NoTopology(RecordedRunner):
        def __call__(self, argv, *, timeout, stdin=None):
            return "" if argv[:3] == ["scontrol", "show", "topology"] else super().__call__(argv, timeout=timeout)

    topology = CliBackend(NoTopology("24.11")).topology()
    assert len({topology.leaf_of(n) for n in ["gpu01", "gpu02", "gpu03", "gpu04"]}) == 1


# ------------------------------------------------------------------ choosing the backend

def fake_pyslurm(version: str) -> types.ModuleType:
    module = types.ModuleType("pyslurm")
    module.__version__ = version
    module.calls = []

    class Job:
        def __init__(self, job_id: int):
            self.job_id = job_id

        def __getattr__(self, name: str):
            return lambda *args, **kwargs: module.calls.append((name, self.job_id, args, kwargs))

    module.Job = Job
    return module


def test_auto_without_pyslurm_uses_the_cli_and_says_why(monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import pyslurm -> ImportError
    with caplog.at_level(logging.INFO):
        client = connect("auto", runner=RecordedRunner("24.11"))
    assert client.name == "cli"
    assert "CLI/JSON (pyslurm does not import" in caplog.text
    with pytest.raises(SlurmError, match="pyslurm backend was asked for but pyslurm does not import"):
        connect("pyslurm", runner=RecordedRunner("24.11"))


def test_auto_with_a_mismatched_pyslurm_uses_the_cli(monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", fake_pyslurm("25.11.0"))
    with caplog.at_level(logging.INFO):
        client = connect("auto", runner=RecordedRunner("24.11"))
    assert client.name == "cli"
    assert "pyslurm 25.11.0 is built for another Slurm than the running 24.11.5" in caplog.text


def test_matching_pyslurm_sends_writes_as_rpcs(monkeypatch) -> None:
    module = fake_pyslurm("24.11.1")
    monkeypatch.setitem(sys.modules, "pyslurm", module)
    runner = RecordedRunner("24.11")
    client = connect("auto", runner=runner)
    assert isinstance(client, PyslurmBackend) and client.name == "pyslurm"
    client.hold(3)
    client.requeue_hold(3)
    client.signal(3, "USR1", batch_only=True)
    assert [c[:2] for c in module.calls] == [("hold", 3), ("requeue", 3), ("send_signal", 3)]
    assert module.calls[1][3] == {"hold": True}
    assert len(client.jobs()) > 0  # reads stay on the JSON path
    assert connect("cli", runner=runner).name == "cli"


@pytest.mark.parametrize("version, tres", [("22.05", "gres:gpu:h100:2"), ("24.11", "gres/gpu:h100:2")])
def test_resize_speaks_each_versions_gres_syntax(version: str, tres: str) -> None:
    runner = RecordedRunner(version)
    CliBackend(runner).resize(9, gpus_per_node=2, num_nodes=2, nodes=["gpu02", "gpu01"], gpu_type="h100")
    assert runner.calls[-1] == ["scontrol", "update", "JobId=9", f"TresPerNode={tres}", "NumNodes=2",
                                "ReqNodeList=gpu[01-02]"]
    with pytest.raises(SlurmError, match="cannot resize"):
        CliBackend(runner).resize(9, gpus_per_node=2, num_nodes=0)


def test_nothing_found_is_an_empty_answer() -> None:
    doc = {"errors": [{"description": "Nothing found", "error_number": 0}], "jobs": []}
    from slurm_liquid.slurm import parse

    assert parse.jobs_from_document(doc, "sacct") == []


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(SlurmError, match="unknown Slurm backend 'slurmrestd'"):
        connect("slurmrestd")


def test_real_pyslurm_when_installed() -> None:
    pyslurm = pytest.importorskip(
        "pyslurm", reason="pyslurm is not installed: PyPI builds it only for Slurm 25.11, which no Debian suite ships")
    assert hasattr(pyslurm, "Job") and hasattr(pyslurm.Job, "requeue")


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_job_ids_are_filtered_even_where_squeue_json_ignores_them(version: str) -> None:
    """Slurm 22.05's `squeue --json --jobs=N` prints every job; the client keeps only the ones asked for."""
    client = CliBackend(RecordedRunner(version))
    everything = client.jobs()
    assert len(everything) > 2
    wanted = {everything[0].job_id, everything[-1].job_id}
    assert {j.job_id for j in client.jobs(wanted)} == wanted
    assert client.jobs([999999]) == []
    assert all(j.job_id in wanted for j in client.accounting(wanted))


def test_recorded_admin_comment_goes_through_sacctmgr_as_one_argument() -> None:
    runner = RecordedRunner("24.11")
    text = "liquid/1 state=placed; liquid-used/1 by=nvml gpus=2 peak=31000 util=80 nodes=gpu01"
    CliBackend(runner).set_recorded_admin_comment(7, text)
    assert runner.calls[-1] == ["sacctmgr", "--immediate", "modify", "job", "where", "jobid=7", "set",
                                f"AdminComment={text}"]
    for bad in ("x" * 1025, "two\nlines"):
        with pytest.raises(SlurmError, match="one line of at most 1024"):
            CliBackend(runner).set_recorded_admin_comment(7, bad)


# ------------------------------------------------------------------ what a real command prints

def _fake_command(directory, name: str, body: bytes) -> None:
    """An executable `name` in `directory` that prints `body` byte for byte."""
    data = directory / f"{name}.out"
    data.write_bytes(body)
    script = directory / name
    script.write_text(f"#!/bin/sh\nexec cat '{data}'\n")
    script.chmod(0o755)


def test_invalid_utf8_in_a_job_name_or_comment_is_replaced_not_fatal(tmp_path, monkeypatch) -> None:
    """A byte like 0xff in a job's name or comment made the runner raise UnicodeDecodeError."""
    from tests.unit.recorded import FIXTURES

    doc = json.loads((FIXTURES / "24.11" / "squeue.json").read_text())
    doc["jobs"][0]["name"] = "NAME"
    doc["jobs"][1]["comment"] = "COMMENT"
    body = json.dumps(doc).encode().replace(b"NAME", b"train\xff\xfe").replace(b"COMMENT", b"liquid:v1 \xc3(")
    _fake_command(tmp_path, "squeue", body)
    _fake_command(tmp_path, "scontrol", (FIXTURES / "24.11" / "version.txt").read_bytes())
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    jobs = CliBackend(LocalRunner()).jobs()
    assert len(jobs) == len(doc["jobs"])
    assert jobs[0].name == "train\ufffd\ufffd" and jobs[1].comment == "liquid:v1 \ufffd("
    jobs[1].comment.encode("utf-8")  # safe to log, print, store and write back


def test_a_script_on_stdin_reaches_the_command_byte_for_byte(tmp_path) -> None:
    script = b"#!/bin/sh\necho caf\xe9\n"  # latin-1, read from disk with surrogateescape
    echoed = LocalRunner()([sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
                           timeout=10, stdin=script.decode("utf-8", "surrogateescape"))
    assert echoed == "#!/bin/sh\necho caf\ufffd\n"
    big = "x" * (4 * 2 ** 20)  # larger than a pipe: written while the output is read
    assert LocalRunner()(["cat"], timeout=20, stdin=big) == big


def test_output_past_the_bound_is_refused_and_the_command_stopped() -> None:
    with pytest.raises(SlurmCommandError, match="printed more than 100000 bytes"):
        LocalRunner(max_output=100_000)([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
                                        timeout=20)


def test_every_command_of_the_client_runs_with_a_timeout() -> None:
    class Timed(RecordedRunner):
        def __call__(self, argv, *, timeout, stdin=None):
            assert 0 < timeout <= 5, (argv, timeout)
            return super().__call__(argv, timeout=timeout, stdin=stdin)

    runner = Timed("22.05")
    client = CliBackend(runner, timeout_s=5)
    client.version(), client.jobs(), client.jobs([1]), client.job(1), client.accounting(), client.nodes()
    client.partitions(), client.topology(), client.batch_script(1), client.submit("#!/bin/sh\n")
    client.hold(1), client.release(1), client.requeue_hold(1), client.cancel(1), client.signal(1, "USR1")
    client.update_job(1, Comment="x"), client.resize(1, 2), client.set_comment(1, "x")
    client.set_recorded_admin_comment(1, "x")
    assert {c[0] for c in runner.calls} == {"scontrol", "squeue", "sacct", "sinfo", "sbatch", "scancel", "sacctmgr"}


def test_skipped_entries_are_kept_for_the_caller() -> None:
    class OneBadJob(RecordedRunner):
        def __call__(self, argv, *, timeout, stdin=None):
            out = super().__call__(argv, timeout=timeout, stdin=stdin)
            if argv[:2] == ["squeue", "--json"]:
                doc = json.loads(out)
                doc["jobs"][0]["job_state"] = {"current": "RUNNING"}
                out = json.dumps(doc)
            return out

    client = CliBackend(OneBadJob("24.11"))
    assert len(client.jobs()) == len(CliBackend(RecordedRunner("24.11")).jobs()) - 1
    assert len(client.skipped) == 1 and "not a string or a list" in client.skipped[0]


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), 1e9])
def test_a_command_timeout_that_never_ends_is_refused(timeout) -> None:
    with pytest.raises(SlurmError, match="timeout must be in"):
        CliBackend(RecordedRunner("24.11"), timeout_s=timeout)


def test_update_jobs_is_one_scontrol_command_for_many_jobs() -> None:
    from slurm_liquid.slurm import CliBackend

    calls: list[list[str]] = []
    client = CliBackend(runner=lambda argv, timeout, stdin=None: calls.append(argv) or "", timeout_s=5)
    client.update_jobs([3, 4, 12], StartTime="now+60")
    client.update_job(5, StartTime="now+30")
    assert calls == [["scontrol", "update", "JobId=3,4,12", "StartTime=now+60"],
                     ["scontrol", "update", "JobId=5", "StartTime=now+30"]]
