"""The submission path on the real cluster: cli_filter.lua + job_submit.lua + the daemon + sacct records.

The test cluster runs slurm-liquid enforcing (containers/slurm/liquid.toml: adjust at submission,
leases of 20 s, daemon heartbeat every 2 s), with the Lua plugins from etc/slurm/.
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest

from slurm_liquid.ledger import Record, Tag
from tests.integration.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration
HELPER = "/usr/local/bin/slurm-liquid"


def write(cluster: Cluster, path: str, text: str) -> None:
    proc = cluster.exec("slurmctld", "python3", "-c",
                        "import os, sys; open(sys.argv[1], 'w').write(sys.argv[2]); os.chmod(sys.argv[1], 0o644)",
                        path, text)
    assert proc.returncode == 0, proc.stderr


def sbatch(cluster: Cluster, user: str, *argv: str, wrapper: bool = False) -> tuple[int, str]:
    """Submit as `user` from the login host; returns (job id, what sbatch printed on stderr)."""
    command = [HELPER, "sbatch"] if wrapper else ["sbatch"]
    proc = cluster.exec("slurmctld", "runuser", "-u", user, "--", *command, "--parsable", "--chdir=/shared",
                        "--output=/dev/null", *argv)
    assert proc.returncode == 0, f"sbatch failed: {proc.stderr}"
    return int(proc.stdout.strip().split(";")[0]), proc.stderr


def finished(cluster: Cluster, ids: list[int]):
    jobs = cluster.client.accounting(ids)
    return jobs if len(jobs) == len(ids) and all(j.is_finished for j in jobs) else None


def daemon(cluster: Cluster, action: str) -> None:
    proc = cluster.exec("slurmctld", "entrypoint.sh", f"daemon-{action}")
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def daemon_running(cluster: Cluster) -> Iterator[None]:
    daemon(cluster, "start")
    yield
    daemon(cluster, "start")   # whatever a test did to it


def script(body: str, directives: str = "", sbatch_lines: str = "") -> str:
    return f"#!/bin/sh\n{sbatch_lines}{directives}{body}\n"


# (how, user, sbatch arguments, #SBATCH lines, #LIQUID lines, --liquid-* flags or comment)
MIXED = [
    ("directive", "alice", [], "#SBATCH --gres=gpu:4\n", "#LIQUID model=bert-large batch-size=32 seq-len=512 precision=amp\n", None),
    ("directive", "bob", [], "#SBATCH --gres=gpu:1\n", "#LIQUID model=resnet50 batch-size=256 precision=bf16 min-gpus=2\n", None),
    ("directive", "alice", ["--gres=gpu:2"], "", "#LIQUID model=gpt2-medium batch-size=32 seq-len=1024 precision=bf16 min-gpus=4\n", None),
    ("directive", "bob", ["--gpus=3"], "", "#LIQUID model=vit-base batch-size=128 precision=amp min-gpus=3 max-gpus=3\n", None),
    ("directive", "alice", ["--gres=gpu:1"], "", "#LIQUID model=resnet18 batch-size=32\n", None),
    ("directive", "bob", ["-N", "2", "--gres=gpu:4"], "", "#LIQUID model=gpt2-large batch-size=64 seq-len=1024 precision=bf16 min-gpus=8 max-gpus=8\n", None),
    ("directive", "alice", ["--gres=gpu:2"], "", "#LIQUID model=bert-base batch-size=64 seq-len=128 min-gpus=2 max-gpus=2\n", None),
    ("comment", "bob", ["--gres=gpu:2"], "", "", "liquid: model=resnet101 batch-size=128 precision=amp min-gpus=2"),
    ("comment", "alice", ["--gres=gpu:1"], "", "", "liquid: model=mobilenet_v2 batch-size=64"),
    ("comment", "bob", ["--gres=gpu:4"], "", "", "liquid: model=roberta-large batch-size=64 seq-len=512 precision=bf16 min-gpus=4 max-gpus=4"),
    ("comment", "alice", ["--gpus=2"], "", "", "liquid: model=efficientnet_b0 batch-size=128 min-gpus=2 max-gpus=2"),
    ("comment", "bob", ["--gres=gpu:3"], "", "", "liquid: model=vgg16 batch-size=64 precision=amp min-gpus=3 max-gpus=3"),
    ("comment", "alice", ["--gres=gpu:1"], "", "", "liquid: model=deepspeech2 batch-size=32"),
    ("wrapper", "bob", ["--gres=gpu:4"], "", "", ["--liquid-model", "bert-large", "--liquid-batch-size", "64", "--liquid-min-gpus", "2", "--liquid-max-gpus", "2"]),
    ("wrapper", "alice", ["--gres=gpu:1"], "", "", ["--liquid-model=resnet50", "--liquid-batch-size=64"]),
    ("wrapper", "bob", ["--gres=gpu:2"], "", "", ["--liquid-model", "gpt2", "--liquid-batch-size", "16", "--liquid-min-gpus", "6", "--liquid-max-gpus", "6"]),
    ("wrapper", "alice", ["--gres=gpu:1"], "", "", ["--liquid-model", "ncf", "--liquid-batch-size", "1024"]),
    ("wrapper", "bob", ["--gres=gpu:2"], "", "", ["--liquid-model", "densenet121", "--liquid-batch-size", "128", "--liquid-min-gpus=4", "--liquid-max-gpus=4"]),
    ("wrapper", "alice", ["--gres=gpu:1"], "", "", ["--liquid-model", "inception_v3", "--liquid-batch-size", "64", "--liquid-checkpointing"]),
    ("wrapper", "bob", ["--gpus=1"], "", "", ["--liquid-model", "yolov5s", "--liquid-batch-size", "32"]),
]
PLAIN = [("alice", ["--gres=gpu:2"]), ("bob", ["--gres=gpu:1"]), ("alice", ["--gres=shard:2"])]


def test_mixed_batch_is_placed_recorded_and_completes(cluster: Cluster, daemon_running: None) -> None:
    topology = cluster.client.topology()
    liquid: dict[int, str] = {}
    for number, (how, user, args, sbatch_lines, directives, extra) in enumerate(MIXED):
        path = f"/shared/mixed-{number}.sh"
        write(cluster, path, script("sleep 4", directives, sbatch_lines))
        if how == "comment":
            job_id, _ = sbatch(cluster, user, f"--comment={extra}", *args, path)
        elif how == "wrapper":
            job_id, _ = sbatch(cluster, user, *extra, *args, path, wrapper=True)
        else:
            job_id, _ = sbatch(cluster, user, *args, path)
        liquid[job_id] = how
    plain = [sbatch(cluster, user, *args, "--wrap", "sleep 3")[0] for user, args in PLAIN]

    jobs = wait_for("the mixed batch to finish", lambda: finished(cluster, [*liquid, *plain]), timeout=300, every=3)
    by_id = {j.job_id: j for j in jobs}
    assert all(j.state == "COMPLETED" for j in jobs), {j.job_id: j.state for j in jobs if j.state != "COMPLETED"}
    assert len(liquid) >= 20
    for job_id, how in liquid.items():
        job = by_id[job_id]
        record = Record.parse(job.comment)
        assert record is not None, f"job {job_id} ({how}) has no record in sacct: {job.comment!r}"
        assert record.get("est") and record.get("placed"), f"job {job_id} ({how}): {job.comment}"
        assert Tag.parse(job.admin_comment).state == "placed", job.admin_comment
        leaves = {topology.leaf_of(n) for n in job.nodes}
        if job.gpus > 1 and job.gpus <= 8:
            assert len(leaves) == 1, f"job {job_id} with {job.gpus} GPUs spans {sorted(leaves)}: {job.nodes}"
        if job.shards == 0:
            assert sorted(job.nodes) == sorted(_nodes(record.get("placed"))), (job.nodes, record.get("placed"))
    for job_id in plain:
        # no record and no tag; the node agent may have added what the job used (tests/integration/test_agent.py)
        assert Record.parse(by_id[job_id].comment) is None and Tag.parse(by_id[job_id].admin_comment) is None

    # Every way of saying what the job is reaches the same record; explain expands one.
    wrapped = next(j for j, how in liquid.items() if how == "wrapper")
    shown = cluster.exec("slurmctld", "runuser", "-u", "bob", "--", HELPER, "explain", str(wrapped))
    assert shown.returncode == 0, shown.stderr
    assert "record: liquid/1" in shown.stdout and "why:" in shown.stdout and "per-GPU memory" in shown.stdout


def _nodes(placed: str) -> list[str]:
    from slurm_liquid.ledger.placed import parse_placed

    return list(parse_placed(placed))


def test_adjust_rewrites_the_request_and_says_so(cluster: Cluster, daemon_running: None) -> None:
    # Adjust mode resizes only a job whose launcher follows the allocation with a fixed global batch.
    write(cluster, "/shared/adjust.sh", script("sleep 1", "#LIQUID model=bert-large batch-size=32 seq-len=512 precision=amp "
                                               "attention=eager follows-allocation\n", "#SBATCH --gres=gpu:4\n"))
    job_id, said = sbatch(cluster, "alice", "/shared/adjust.sh")
    lines = [line for line in said.splitlines() if "slurm-liquid" in line]
    assert len(lines) == 1 and "adjusted gpu:4 -> --gres=gpu:1" in lines[0], said
    job = wait_for("the adjusted job to finish", lambda: finished(cluster, [job_id]), timeout=120)[0]
    assert job.gpus == 1 and Record.parse(job.comment).get("set") == "gpu:1"


def test_malformed_directive_is_named_once_and_the_job_runs_as_asked(cluster: Cluster, daemon_running: None) -> None:
    write(cluster, "/shared/malformed.sh", script("sleep 1", "#LIQUID model=resnet50 batch-size=-5\n"))
    job_id, said = sbatch(cluster, "bob", "--gres=gpu:2", "/shared/malformed.sh")
    lines = [line for line in said.splitlines() if "slurm-liquid" in line]
    assert len(lines) == 1 and "batch-size" in lines[0] and "submitted as asked" in lines[0], said
    job = wait_for("the malformed job to finish", lambda: finished(cluster, [job_id]), timeout=120)[0]
    assert job.state == "COMPLETED" and job.gpus == 2
    assert Record.parse(job.comment).get("err") == "batch-size"


@pytest.mark.parametrize("helper", ["missing", "crashing", "hanging"])
def test_sbatch_submits_when_the_helper_is_broken(cluster: Cluster, daemon_running: None, helper: str) -> None:
    moved = cluster.exec("slurmctld", "mv", HELPER, HELPER + ".off")
    assert moved.returncode == 0, moved.stderr
    try:
        if helper != "missing":
            body = "echo 'set gres gpu:99'; exit 3" if helper == "crashing" else "sleep 30"
            # A crashing helper's half-written answer must not be trusted either: exit code first.
            write(cluster, HELPER, f"#!/bin/sh\n{body}\n")
            assert cluster.exec("slurmctld", "chmod", "755", HELPER).returncode == 0
        write(cluster, "/shared/broken-helper.sh", script("sleep 1", "#LIQUID model=resnet50 batch-size=64\n"))
        started = time.monotonic()
        job_id, _ = sbatch(cluster, "alice", "--gres=gpu:1", "/shared/broken-helper.sh")
        took = time.monotonic() - started
    finally:
        cluster.exec("slurmctld", "mv", "-f", HELPER + ".off", HELPER)
    job = wait_for("the job to finish", lambda: finished(cluster, [job_id]), timeout=120)[0]
    assert job.state == "COMPLETED" and job.gpus == 1
    assert took < 15, f"sbatch took {took:.0f} s with a {helper} helper"


def test_new_jobs_start_within_a_minute_when_the_daemon_is_dead(cluster: Cluster, daemon_running: None) -> None:
    daemon(cluster, "stop")  # SIGKILL: no clean goodbye, the heartbeat file stays behind
    write(cluster, "/shared/orphan.sh", script("sleep 15", "#LIQUID model=resnet50 batch-size=64\n"))
    submitted = time.monotonic()
    job_id, _ = sbatch(cluster, "bob", "--gres=gpu:1", "/shared/orphan.sh")
    wait_for("the job to start without the daemon", lambda: (cluster.client.job(job_id).is_running
                                                              or cluster.client.job(job_id).is_finished), timeout=60)
    assert time.monotonic() - submitted < 60
    # Back from the dead, the daemon notes what happened to a job it held, and places nothing.
    daemon(cluster, "start")
    job = wait_for("the job to finish", lambda: finished(cluster, [job_id]), timeout=120)[0]
    assert job.state == "COMPLETED"
    tag = Tag.parse(job.admin_comment)
    assert tag.state in ("untouched", "released") and not tag.placed, job.admin_comment
    if tag.state == "released":  # it was held in the seconds before the heartbeat went stale
        assert "lease" in Record.parse(job.comment).get("note"), job.comment
