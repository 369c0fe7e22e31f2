"""The Slurm client against a real Slurm: every read and write, on every Slurm version under test."""

from __future__ import annotations

import json

import pytest

from slurm_liquid.slurm import SlurmCommandError, SlurmError
from tests.integration.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration


def script(body: str) -> str:
    return f"#!/bin/bash\n{body}\n"


def finished(cluster: Cluster, job_id: int):
    """The job's accounting record once it has ended, else None."""
    jobs = [j for j in cluster.client.accounting([job_id]) if j.is_finished]
    return jobs[0] if jobs else None


def test_version_matches_the_suite(cluster: Cluster) -> None:
    version = cluster.client.version()
    assert f"{version.major}.{version.minor:02d}" == cluster.slurm


def test_nodes_partitions_and_topology(cluster: Cluster) -> None:
    nodes = {n.name: n for n in cluster.client.nodes()}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    for node in nodes.values():
        assert (node.gpus, node.gpu_type, node.shards, node.cpus, node.mem_mib) == (4, "h100", 64, 8, 16000)
        assert node.partitions[0] == "gpu" and set(node.partitions) <= {"gpu", "small"}
    partition = next(p for p in cluster.client.partitions() if p.name == "gpu")
    assert partition.name == "gpu" and partition.is_default and partition.total_gpus == 16
    assert partition.nodes == ("gpu01", "gpu02", "gpu03", "gpu04")
    topology = cluster.client.topology()
    assert topology.leaf_of("gpu01") == topology.leaf_of("gpu02") == "leaf1"
    assert topology.leaf_of("gpu03") == topology.leaf_of("gpu04") == "leaf2"


def test_submitted_job_is_read_back_live_and_from_accounting(cluster: Cluster) -> None:
    client = cluster.client
    job_id = client.submit(script("sleep 2"), ["-N", "2", "--gres=gpu:h100:2", "--comment=note:v1 demo",
                                              "--job-name=readback", "--output=/dev/null"])
    live = client.job(job_id)
    assert live is not None and live.job_id == job_id and live.name == "readback"
    assert live.gpus_per_node == 2 and live.comment == "note:v1 demo"
    done = wait_for(f"job {job_id} in accounting", lambda: finished(cluster, job_id))
    assert done.state == "COMPLETED" and done.exit_code == 0
    assert done.gpus == 4 and len(done.nodes) == 2 and done.num_nodes == 2
    assert done.comment == "note:v1 demo"
    assert done.start_time is not None and done.end_time is not None and done.end_time >= done.start_time


def test_failed_job_reports_its_exit_code(cluster: Cluster) -> None:
    job_id = cluster.client.submit(script("exit 3"), ["-G", "1", "--output=/dev/null"])
    done = wait_for(f"job {job_id} to fail", lambda: finished(cluster, job_id))
    assert done.state == "FAILED" and done.exit_code == 3


def test_hold_update_comment_release(cluster: Cluster) -> None:
    client = cluster.client
    job_id = client.submit(script("sleep 1"), ["--hold", "--gres=gpu:1", "--output=/dev/null"])
    held = client.job(job_id)
    assert held.is_pending and held.held
    client.resize(job_id, gpus_per_node=3, nodes=["gpu04"])
    client.set_comment(job_id, "note:v1 placed=gpu04")
    client.release(job_id)
    done = wait_for(f"released job {job_id} to end", lambda: finished(cluster, job_id))
    assert done.nodes == ("gpu04",) and done.gpus == 3 and done.comment == "note:v1 placed=gpu04"


def test_requeue_hold_and_resize_keeps_the_job_id(cluster: Cluster) -> None:
    client = cluster.client
    job_id = client.submit(script("sleep 300"), ["--gres=gpu:1", "--output=/dev/null"])
    wait_for(f"job {job_id} to run", lambda: client.job(job_id).is_running)
    client.requeue_hold(job_id)
    requeued = wait_for(f"job {job_id} to be requeued and held",
                        lambda: (j := client.job(job_id)) and j.is_pending and j.held and j)
    assert requeued.restarts == 1
    client.resize(job_id, gpus_per_node=2)
    client.release(job_id)
    running = wait_for(f"job {job_id} to run again", lambda: (j := client.job(job_id)) and j.is_running and j,
                       timeout=180)
    assert running.gpus == 2 and running.restarts == 1
    client.cancel(job_id)
    cancelled = wait_for(f"job {job_id} to be cancelled", lambda: finished(cluster, job_id))
    assert cancelled.state == "CANCELLED"


def test_signal_reaches_the_batch_script(cluster: Cluster) -> None:
    client = cluster.client
    marker = f"/shared/signal-{cluster.suite}-$SLURM_JOB_ID"
    body = f"trap 'echo got-usr1 > {marker}; exit 0' USR1\nfor i in $(seq 300); do sleep 1; done"
    job_id = client.submit(script(body), ["-G", "1", "--output=/dev/null"])
    wait_for(f"job {job_id} to run", lambda: client.job(job_id).is_running)
    client.signal(job_id, "USR1", batch_only=True)
    done = wait_for(f"job {job_id} to end after SIGUSR1", lambda: finished(cluster, job_id), timeout=60)
    assert done.state == "COMPLETED"
    content = cluster.exec("slurmctld", "cat", marker.replace("$SLURM_JOB_ID", str(job_id)))
    assert content.stdout.strip() == "got-usr1"


def test_other_users_jobs_are_visible(cluster: Cluster) -> None:
    proc = cluster.exec("slurmctld", "runuser", "-u", "alice", "--", "sbatch", "--parsable", "--hold",
                        "--output=/dev/null", "--wrap=true")
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout.strip())
    job = cluster.client.job(job_id)
    assert job.user == "alice" and job.held
    cluster.client.cancel(job_id)


def test_failures_name_the_command_and_the_reason(cluster: Cluster) -> None:
    client = cluster.client
    with pytest.raises(SlurmCommandError) as err:
        client.update_job(999999, TimeLimit="10")
    assert "scontrol update JobId=999999" in str(err.value) and err.value.returncode != 0
    assert err.value.stderr  # Slurm's own words are kept
    with pytest.raises(SlurmError, match="at most 1024"):
        client.set_comment(1, "x" * 1025)
    with pytest.raises(SlurmCommandError, match="sbatch --parsable"):
        client.submit(script("true"), ["--gres=gpu:h100:99"])
    assert client.jobs([999999]) == []
    assert client.job(999999) is None


def test_installed_command_inside_the_cluster(cluster: Cluster) -> None:
    """The package installed into the image from the wheelhouse runs on the login host."""
    proc = cluster.exec("slurmctld", "slurm-liquid", "slurm", "nodes", "--json")
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)
    assert [n["name"] for n in nodes] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert all(n["gpus"] == 4 for n in nodes)
    version = cluster.exec("slurmctld", "slurm-liquid", "slurm", "version", "--json")
    assert json.loads(version.stdout) == {"slurm": str(cluster.client.version()), "backend": "cli"}
