"""Staging on the real cluster: datasets copied to node-local disk while jobs wait for GPUs.

The test cluster stages into /var/tmp/liquid-staging inside each node container with a 0.2 GB quota
(containers/slurm/liquid.toml [staging]); /shared is the volume every node mounts, standing for the
parallel file system. Jobs wait for GPUs behind `blockers` that fill all sixteen, so the daemon
predicts their nodes and the agents stage there before they start, as on a busy cluster.
"""

from __future__ import annotations

import time

import pytest

from slurm_liquid.ledger import Record
from slurm_liquid.ledger.staging import lead_of, parse_staged
from slurm_liquid.staging.store import key_of
from tests.integration.cluster import Cluster, wait_for
from tests.integration.test_submission import daemon_running, finished, sbatch, write  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
AREA = "/var/tmp/liquid-staging"
SPEC = "model=bert-base batch-size=64 seq-len=128 min-gpus=4 max-gpus=4"   # keeps gpu:4 in adjust mode
CHECK = """#!/bin/sh
echo "data=$LIQUID_DATA"
case "$LIQUID_DATA" in {area}/*) echo where=local ;; *) echo where=shared ;; esac
diff -r "$LIQUID_DATA" {source} >/dev/null 2>&1 && echo content=same
sleep {sleep}
"""


RESTART = ("entrypoint.sh agent-stop; for i in $(seq 50); do pgrep -f 'slurm-liquid[ ]agent' >/dev/null || break; "
           "sleep 0.2; done; entrypoint.sh agent-start")


def sh(cluster: Cluster, host: str, command: str, user: str | None = None, timeout: float = 60):
    argv = ["runuser", "-u", user, "--", "sh", "-c", command] if user else ["sh", "-c", command]
    return cluster.exec(host, *argv, timeout=timeout)


@pytest.fixture
def agents(cluster: Cluster) -> None:
    for node in NODES:
        assert cluster.exec(node, "entrypoint.sh", "agent-start").returncode == 0


def make_dataset(cluster: Cluster, path: str, owner: str = "alice", files: int = 40, size: int = 4096) -> None:
    """Many small files only `owner` can read (the directory is 0700)."""
    proc = sh(cluster, "slurmctld", f"rm -rf {path} && mkdir -p {path}/sub && for i in $(seq 1 {files}); do "
              f"head -c {size} /dev/urandom > {path}/sub/f$i; done && echo hi > {path}/top && chmod 700 {path}",
              user=owner)
    assert proc.returncode == 0, proc.stderr


def fill(cluster: Cluster, seconds: int) -> list[int]:
    """Jobs that take every GPU for `seconds` (a busy cluster)."""
    ids = [sbatch(cluster, "bob", "--time=2", "--gres=gpu:4", f"--comment=liquid: {SPEC}", "--wrap", f"sleep {seconds}")[0]
           for _ in NODES]
    wait_for("the blockers to run", lambda: all(j.is_running for j in cluster.client.jobs(ids)), timeout=60)
    return ids


def staged_job(cluster: Cluster, name: str, source: str, sleep: int = 1, user: str = "alice") -> int:
    write(cluster, f"/shared/{name}.sh", CHECK.format(area=AREA, source=source, sleep=sleep))
    return sbatch(cluster, user, "--time=2", "--gres=gpu:4", f"--output=/shared/{name}.out",
                  f"--comment=liquid: {SPEC} dataset={source}", f"/shared/{name}.sh")[0]


def output(cluster: Cluster, name: str) -> dict[str, str]:
    text = sh(cluster, "slurmctld", f"cat /shared/{name}.out").stdout
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_waiting_job_finds_its_data_on_local_disk_and_the_next_job_reuses_it(
        cluster: Cluster, daemon_running: None, agents: None) -> None:
    source = "/shared/st-images"
    make_dataset(cluster, source)
    fill(cluster, 20)
    first = staged_job(cluster, "st-first", source)
    job = wait_for("the staged job to finish", lambda: (finished(cluster, [first]) or [None])[0], timeout=150, every=2)
    said = output(cluster, "st-first")
    assert job.state == "COMPLETED" and said.get("where") == "local" and said.get("content") == "same", said
    node = job.nodes[0]
    part = parse_staged(Record.parse(job.comment).get("staged")).get(node)
    assert part and ":late" not in part, job.comment
    assert lead_of(part, job.start_time.timestamp()) >= 0          # on disk before the job started

    # the copy is alice's alone: bob can neither read nor replace it
    local = said["data"]
    assert sh(cluster, node, f"cat {local}/top", user="alice").stdout.strip() == "hi"
    for attempt in (f"cat {local}/top", f"ls {local}", f"rm -rf {local}", f"mv {local} /tmp/x",
                    f"mkdir {AREA}/u1001/x", f"touch {local}/new"):
        assert sh(cluster, node, attempt, user="bob").returncode != 0, attempt
    assert sh(cluster, node, f"cat {local}/top", user="alice").stdout.strip() == "hi"

    # the same dataset again: the copy already on a node is reused (the placer prefers that node)
    fill(cluster, 15)
    second = staged_job(cluster, "st-second", source)
    job2 = wait_for("the second job to finish", lambda: (finished(cluster, [second]) or [None])[0], timeout=150, every=2)
    said2 = output(cluster, "st-second")
    assert said2.get("where") == "local" and said2.get("content") == "same", said2
    part2 = parse_staged(Record.parse(job2.comment).get("staged")).get(job2.nodes[0], "")
    if job2.nodes[0] == node:
        assert said2["data"] == local and ":hit:" in part2, job2.comment
    else:   # predicted elsewhere (another blocker ended first): staged there in time all the same
        assert ":late" not in part2, job2.comment


@pytest.mark.parametrize("case", ["missing", "unreadable", "over-quota"])
def test_a_dataset_that_cannot_be_staged_leaves_the_job_as_asked(cluster: Cluster, daemon_running: None,
                                                                agents: None, case: str) -> None:
    source = {"missing": "/shared/st-nothing-here", "unreadable": "/shared/st-bobs",
              "over-quota": "/shared/st-huge"}[case]
    if case == "unreadable":
        make_dataset(cluster, source, owner="bob", files=3)
    elif case == "over-quota":     # 0.3 GB against a 0.2 GB quota (sparse: nothing is read to find out)
        assert sh(cluster, "slurmctld", f"rm -rf {source}; mkdir {source} && truncate -s 300M {source}/blob",
                  user="alice").returncode == 0
    name = f"st-{case}"
    job_id = staged_job(cluster, name, source, sleep=8)
    job = wait_for(f"the job with a {case} dataset to finish", lambda: (finished(cluster, [job_id]) or [None])[0],
                   timeout=120, every=2)
    said = output(cluster, name)
    assert job.state == "COMPLETED" and said.get("data") == source and said.get("where") == "shared", said
    assert Record.parse(job.comment).get("err") == f"dataset:{case}", job.comment


def test_killing_the_agent_mid_copy_leaves_no_half_copy_visible(cluster: Cluster, daemon_running: None,
                                                                agents: None) -> None:
    source = "/shared/st-slow"
    make_dataset(cluster, source, files=20, size=500_000)        # 10 MB at 1 MB/s: ten seconds of copying
    slow = "sed 's/^quota_gb = .*/&\\nbandwidth_mb_s = 1/' /etc/slurm/liquid.toml > /tmp/liquid-slow.toml"
    try:
        for node in NODES:
            assert sh(cluster, node, f"{slow} && {RESTART} --config /tmp/liquid-slow.toml").returncode == 0
        job_id = staged_job(cluster, "st-slow", source, sleep=60)
        job = wait_for("the job to run", lambda: next((j for j in cluster.client.jobs([job_id]) if j.is_running), None))
        node = job.nodes[0]
        wait_for("the copy to begin", lambda: ".tmp-" in sh(cluster, node, f"ls -a {AREA}/u1001").stdout, timeout=30)
        time.sleep(2)
        assert sh(cluster, node, "pkill -KILL -f 'slurm-liquid[ ]agent'").returncode == 0
        time.sleep(1)
        assert sh(cluster, node, "pgrep -f 'slurm_liquid[.]staging[.]worker'").stdout.strip() == ""   # went with it
        key = key_of(1001, source, "copy")
        entries = sh(cluster, node, f"ls -a {AREA}/u1001").stdout.split()
        assert any(e.startswith(f".tmp-{key}") for e in entries) and not any(e.startswith(key) for e in entries), entries
        env = sh(cluster, node, f"cat /run/slurm-liquid-agent/staged/{job_id}").stdout
        assert AREA not in env                                    # the job is told the shared path
        # a new step of the running job sees the shared path too
        step = sh(cluster, "slurmctld", f"srun --jobid={job_id} --overlap -N1 -n1 sh -c 'echo $LIQUID_DATA'",
                  user="alice")
        assert step.stdout.strip() == source, step.stdout + step.stderr
        # the agent back: the half copy is removed at start, and the copy is made again, whole
        assert sh(cluster, node, "entrypoint.sh agent-start --config /tmp/liquid-slow.toml").returncode == 0
        wait_for("a whole copy", lambda: any(e.startswith(key) for e in
                                             sh(cluster, node, f"ls -a {AREA}/u1001").stdout.split()), timeout=60)
        assert not any(e.startswith(".tmp-") for e in sh(cluster, node, f"ls -a {AREA}/u1001").stdout.split())
        step = sh(cluster, "slurmctld", f"srun --jobid={job_id} --overlap -N1 -n1 sh -c "
                  f"'diff -r $LIQUID_DATA {source} && echo $LIQUID_DATA'", user="alice")
        assert step.stdout.strip().startswith(AREA), step.stdout + step.stderr
    finally:
        for node in NODES:
            sh(cluster, node, RESTART)
