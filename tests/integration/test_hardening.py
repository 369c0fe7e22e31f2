"""No user can stop, stall or steer the daemon, on the real cluster (issue findings 1, 2, 3, 5, 6).

The test cluster's daemon (containers/slurm/liquid.toml): leases of 20 s, a pass at least every 5 s,
an elastic slot every 15 s, at most one change per job per 20 s.
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest

from slurm_liquid.ledger import Tag, TagState
from tests.integration.cluster import Cluster, wait_for
from tests.integration.test_submission import daemon, sbatch, write

pytestmark = pytest.mark.integration
LEASE_S = 20
LOG = "/var/log/slurm/liquid-daemon.log"


@pytest.fixture
def drf_daemon(cluster: Cluster) -> Iterator[Cluster]:
    """The daemon with DRF, unguarded (a lone elastic job grows to its maximum: the decisions are predictable;
    DRF's own restart guard, 2.0, would hold back the short test jobs' growth)."""
    daemon(cluster, "stop")
    assert cluster.exec("slurmctld", "entrypoint.sh", "daemon-start", "--policy", "drf", "--payback", "0").returncode == 0
    ids: list[int] = []
    cluster.submitted = ids
    yield cluster
    for job_id in ids:
        cluster.exec("slurmctld", "scancel", str(job_id))
    daemon(cluster, "stop")
    daemon(cluster, "start")


def submit(cluster: Cluster, user: str, *argv: str) -> int:
    job_id = sbatch(cluster, user, *argv)[0]
    cluster.submitted.append(job_id)
    return job_id


def tag_of(cluster: Cluster, job_id: int) -> Tag | None:
    job = cluster.client.job(job_id)
    return Tag.parse(job.admin_comment) if job else None


def placed(cluster: Cluster, job_id: int):
    tag = tag_of(cluster, job_id)
    return tag if tag and tag.state == TagState.PLACED else None


def daemon_alive(cluster: Cluster) -> bool:
    beat = cluster.exec("slurmctld", "cat", "/var/spool/slurm-liquid/heartbeat").stdout.split()
    running = cluster.exec("slurmctld", "pgrep", "-f", "slurm-liquid daemon").returncode == 0
    return running and bool(beat) and time.time() - int(beat[0]) < 8


def idle(cluster: Cluster) -> None:
    wait_for("an idle cluster", lambda: not [j for j in cluster.client.jobs() if not j.is_finished]
             and all(n.gpus_alloc == 0 for n in cluster.client.nodes()), timeout=180, every=2)


def test_poison_jobs_in_the_queue_do_not_stop_healthy_placements(drf_daemon: Cluster) -> None:
    """Finding 1: a far-future begin time or a non-UTF-8 byte in a job name or comment crashed the
    daemon on every pass; the lease design started jobs, but nothing was placed any more."""
    cluster = drf_daemon
    idle(cluster)
    liquid = "#!/bin/sh\n#LIQUID model=resnet18 batch-size=64\nsleep 60\n"
    write(cluster, "/shared/hardening-ok.sh", liquid)
    submit(cluster, "alice", "--gres=gpu:1", "--begin=uts99999999999999", "/shared/hardening-ok.sh")
    submit(cluster, "alice", "--gres=gpu:1", "--job-name=bad\udcff\udcfename", "/shared/hardening-ok.sh")
    submit(cluster, "bob", "--gres=gpu:1", "--comment=liquid: model=resnet18 batch-size=64 \udcff", "/shared/hardening-ok.sh")
    time.sleep(3)   # a pass over the poison first
    healthy = submit(cluster, "alice", "--gres=gpu:1", "/shared/hardening-ok.sh")
    started = time.monotonic()
    tag = wait_for("the healthy job to be placed", lambda: placed(cluster, healthy), timeout=LEASE_S + 10)
    assert time.monotonic() - started < LEASE_S and tag.trusted is not None
    assert wait_for("it to run", lambda: cluster.client.job(healthy).is_running, timeout=30)
    assert daemon_alive(cluster)


def test_a_long_checkpoint_grace_does_not_delay_other_placements(drf_daemon: Cluster) -> None:
    """Finding 2: `signal=USR1@86400` made a resize wait a day inside the daemon: no heartbeat, no
    placements, no lease renewals. Now the grace is capped ([elastic] max_grace_s) and spent between
    passes: a new job is placed within one pass while the elastic job's resize waits for its checkpoint."""
    cluster = drf_daemon
    idle(cluster)
    # Ignores the signal and never reports a checkpoint: the resize waits out the whole grace.
    write(cluster, "/shared/hardening-grace.sh",
          "#!/bin/bash\n#LIQUID model=resnet18 batch-size=128 elastic=1:4 signal=USR1@60\ntrap '' USR1\nsleep 600\n")
    elastic = submit(cluster, "alice", "--gres=gpu:1", "--requeue", "/shared/hardening-grace.sh")
    wait_for("the elastic job to run", lambda: cluster.client.job(elastic).is_running, timeout=60)

    def resize_started():
        log = cluster.exec("slurmctld", "grep", "-a", f"started {{{elastic}:", LOG).stdout
        return bool(log.strip())

    wait_for("the daemon to start a resize (checkpoint signalled)", resize_started, timeout=120, every=2)
    write(cluster, "/shared/hardening-new.sh", "#!/bin/sh\n#LIQUID model=resnet18 batch-size=64\nsleep 30\n")
    new = submit(cluster, "bob", "--gres=gpu:1", "/shared/hardening-new.sh")
    started = time.monotonic()
    wait_for("the new job to be placed", lambda: placed(cluster, new), timeout=30, every=0.5)
    assert time.monotonic() - started < 10          # one pass (poll 5 s, or at once on the event)
    job = cluster.client.job(elastic)
    assert job.is_running and job.restarts == 0      # still inside its grace: the wait blocked nothing
    assert daemon_alive(cluster)


def test_an_edited_comment_changes_nothing_the_daemon_does(drf_daemon: Cluster) -> None:
    """Finding 3: a 1-GPU job whose owner edited its Comment to `elastic=4:4` after placement got a
    root `scontrol update TresPerNode=gres/gpu:4`."""
    cluster = drf_daemon
    idle(cluster)
    write(cluster, "/shared/hardening-rigid.sh", "#!/bin/sh\n#LIQUID model=resnet18 batch-size=128\nsleep 90\n")
    job_id = submit(cluster, "alice", "--gres=gpu:1", "--requeue", "/shared/hardening-rigid.sh")
    wait_for("the job to be placed and run", lambda: placed(cluster, job_id) and cluster.client.job(job_id).is_running,
             timeout=60)
    before = cluster.client.job(job_id)     # adjust mode may have made it a GPU share
    edit = cluster.exec("slurmctld", "runuser", "-u", "alice", "--", "scontrol", "update", f"JobId={job_id}",
                        "Comment=liquid/1 placed=gpu01:1 | model=resnet18 batch-size=128 elastic=4:4 signal=USR1@1")
    assert edit.returncode == 0, edit.stderr
    assert "elastic=4:4" in cluster.client.job(job_id).comment
    time.sleep(35)                                   # two slots of DRF, which grows a lone elastic job
    job = cluster.client.job(job_id)
    assert job.is_running and job.restarts == 0
    assert (job.gpus, job.shards, job.nodes) == (before.gpus, before.shards, before.nodes)


def test_a_lost_requeue_answer_never_leaves_the_job_held(cluster: Cluster) -> None:
    """Finding 5: a requeuehold that took effect but whose answer was lost, then a failed state check,
    was journaled `failed` and the job stayed held for ever. Now the change stays open and the next
    turn finishes it."""
    from tests.integration.test_elastic import RUNS, elastic_script, run_log

    idle(cluster)
    cluster.exec("slurmctld", "install", "-d", "-m", "1777", RUNS)
    daemon(cluster, "stop")
    started = cluster.exec("slurmctld", "env", "SLURM_LIQUID_FAILPOINT=requeue-answer-lost",
                           "entrypoint.sh", "daemon-start", "--policy", "drf", "--payback", "0")
    assert started.returncode == 0, started.stderr
    job_id = None
    try:
        write(cluster, "/shared/hardening-lost.sh", elastic_script(steps=1200, speedup=2.0, low=1, high=4))
        job_id = sbatch(cluster, "alice", "--gres=gpu:1", "--requeue", "/shared/hardening-lost.sh")[0]
        grown = wait_for("the job to be resized and run again", lambda: (lambda j: j if j.is_running
                         and j.restarts >= 1 else None)(cluster.client.job(job_id)), timeout=240, every=2)
        assert grown.gpus > 1 and not grown.held
        assert run_log(cluster, job_id).count("start") >= 2 and "done" not in run_log(cluster, job_id)
    finally:
        if job_id is not None:
            cluster.exec("slurmctld", "scancel", str(job_id))
        daemon(cluster, "stop")
        daemon(cluster, "start")


def test_a_job_is_only_ever_pinned_inside_its_partition(drf_daemon: Cluster) -> None:
    """Finding 6: placement ignored partitions; a job was pinned by ReqNodeList to a node of another
    partition and stayed pending. Partition `small` is gpu[03-04]; best fit over all nodes would pick
    gpu01 (one GPU free)."""
    cluster = drf_daemon
    idle(cluster)
    submit(cluster, "bob", "-w", "gpu01", "--gres=gpu:3", "--wrap", "sleep 120")
    submit(cluster, "bob", "-w", "gpu04", "--gres=gpu:1", "--wrap", "sleep 120")
    wait_for("the fillers to run", lambda: sum(n.gpus_alloc for n in cluster.client.nodes()) == 4, timeout=60)
    write(cluster, "/shared/hardening-small.sh", "#!/bin/sh\n#LIQUID model=resnet18 batch-size=64\nsleep 30\n")
    job_id = submit(cluster, "alice", "-p", "small", "--gres=gpu:1", "/shared/hardening-small.sh")
    tag = wait_for("the job to be placed", lambda: placed(cluster, job_id), timeout=LEASE_S + 10)
    assert set(tag.placement().nodes) <= {"gpu03", "gpu04"}, tag
    job = wait_for("it to run there", lambda: (lambda j: j if j.is_running else None)(cluster.client.job(job_id)),
                   timeout=30)
    assert set(job.nodes) <= {"gpu03", "gpu04"}
