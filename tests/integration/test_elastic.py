"""Elastic jobs on the real cluster: the daemon resizes them by checkpoint, requeue and resize.

The jobs are the CPU stand-in trainer (examples/elastic/standin_trainer.py): it takes as long per step
as the measured application did on the GPUs it holds, checkpoints on SIGUSR1 and resumes after a
requeue. Each job logs every start and its one completion into /shared, so a test can tell that no job
ran to the end twice. The test cluster's daemon config (containers/slurm/liquid.toml): DL2, a slot
every 15 s, at most one change per job per 20 s.
"""

from __future__ import annotations

import statistics
import time
from typing import Iterator

import pytest

from slurm_liquid.policy.dl2.history import history_slots, load_history
from slurm_liquid.ledger import Record
from tests.integration.cluster import Cluster, quiesce, snapshot, wait_for
from tests.integration.test_submission import daemon, finished, sbatch, write

pytestmark = pytest.mark.integration
TRAINER = "/opt/slurm-liquid/examples/elastic/standin_trainer.py"
RUNS = "/shared/elastic-runs"


# The model and batch a stand-in of each traced application declares.
APPS = {"cifar10": ("resnet18", 128), "imagenet": ("resnet50", 200)}
# Jobs that growth pays for: DL2 weighs a resize against its restart (30 s on the test cluster, as
# measured live), and a cifar10 stand-in of a minute gains less than that from a second GPU (1.57x).
# These run 2 minutes on one GPU and 65 s on two (imagenet's trace, 1.84x).
GROWS = {"app": "imagenet", "steps": 520, "speedup": 4.0}


def elastic_script(steps: int, speedup: float, low: int = 1, high: int = 8, app: str = "cifar10") -> str:
    # The daemon signals the whole job: the shell ignores USR1 (else it dies of it), the trainer catches it.
    # The log lines tell starts from ends.
    model, batch = APPS[app]
    return (f"#!/bin/bash\n#LIQUID model={model} batch-size={batch} elastic={low}:{high} signal=USR1@15\n"
            f"trap '' USR1\necho start >> {RUNS}/$SLURM_JOB_ID\n"
            f"/opt/slurm-liquid/bin/python {TRAINER} --app {app} --steps {steps} --batch-size {batch} "
            f"--speedup {speedup} --checkpoint-dir /shared/checkpoints --report-interval 1 || exit $?\n"
            f"echo done >> {RUNS}/$SLURM_JOB_ID\n")


def run_log(cluster: Cluster, job_id: int) -> list[str]:
    proc = cluster.exec("slurmctld", "cat", f"{RUNS}/{job_id}")
    return proc.stdout.split() if proc.returncode == 0 else []


@pytest.fixture
def elastic_cluster(cluster: Cluster) -> Iterator[Cluster]:
    # /shared outlives a recreated cluster, whose job ids start again at 1: clear what old jobs left.
    cleared = cluster.exec("slurmctld", "rm", "-rf", RUNS, "/shared/checkpoints", "/shared/slurm-liquid/progress")
    assert cleared.returncode == 0, cleared.stderr
    for path in (RUNS, "/shared/slurm-liquid/progress"):
        assert cluster.exec("slurmctld", "install", "-d", "-m", "1777", path).returncode == 0
    yield cluster
    daemon(cluster, "stop")
    daemon(cluster, "start")


def run_workload(cluster: Cluster, policy: str, jobs: int = 3, steps: int = 1500, speedup: float = 2.0,
                 app: str = "cifar10") -> tuple[dict[int, float], list]:
    """Submit `jobs` elastic stand-ins under `policy`; returns {job: JCT s} and the sacct records."""
    daemon(cluster, "stop")
    daemon(cluster, "start")  # default policy from liquid.toml, or the override below
    if policy != "dl2":
        daemon(cluster, "stop")
        assert cluster.exec("slurmctld", "entrypoint.sh", "daemon-start", "--policy", policy).returncode == 0
    ids = []
    for number in range(jobs):
        write(cluster, f"/shared/elastic-{policy}-{number}.sh", elastic_script(steps, speedup, app=app))
        ids.append(sbatch(cluster, ("alice", "bob")[number % 2], "--gres=gpu:1", "--requeue",
                          f"/shared/elastic-{policy}-{number}.sh")[0])
        time.sleep(2)
    done = wait_for(f"the {policy} workload to finish", lambda: finished(cluster, ids), timeout=900, every=5)
    jct = {j.job_id: (j.end_time - j.submit_time).total_seconds() for j in done}
    return jct, done


def test_elastic_workload_completes_once_under_dl2_and_static(elastic_cluster: Cluster, tmp_path) -> None:
    cluster = elastic_cluster
    results = {}
    # Static has only to show that it never touches a job: short cifar10 jobs (26 s) show it as well, and
    # save CI a minute and a half per Slurm version.
    for policy, spec in (("dl2", GROWS), ("static", {"steps": 500})):
        jct, done = run_workload(cluster, policy, **spec)
        for job in done:
            assert job.state == "COMPLETED", (policy, job.job_id, job.state)
            log = run_log(cluster, job.job_id)
            assert log.count("done") == 1, (policy, job.job_id, log)          # ran to the end exactly once
            assert log.count("start") == job.restarts + 1, (policy, job.job_id, log, job.restarts)
        results[policy] = (statistics.mean(jct.values()), sum(j.restarts for j in done), done)
    dl2_jobs = results["dl2"][2]
    # DL2 grew the lone jobs on an idle cluster: the resizes are in the records and in Slurm's restarts.
    resized = [j for j in dl2_jobs if Record.parse(j.comment) and Record.parse(j.comment).get("resized")]
    assert resized and all(j.restarts >= 1 for j in resized), [j.comment for j in dl2_jobs]
    assert max(j.gpus for j in dl2_jobs) > 1
    assert results["static"][1] == 0      # static never touches a job
    # The same accounting is a warm-up history for DL2 (`policy train --teacher sacct`): with --duplicates
    # every run of a resized job is a record of its own, so the replay sees its GPU count change.
    ids = ",".join(str(j.job_id) for j in dl2_jobs)
    saved = cluster.exec("slurmctld", "sacct", "--json", "--allocations", "--duplicates", "-j", ids)
    assert saved.returncode == 0, saved.stderr
    (tmp_path / "history.json").write_text(saved.stdout)
    runs = load_history(tmp_path / "history.json")
    assert len(runs) > len(dl2_jobs)      # the runs before each resize are records too
    seen: dict[str, set[int]] = {}
    for view, counts in history_slots(runs, interval=5.0):
        for job, gpus in zip(view.jobs, counts):
            seen.setdefault(job.id, set()).add(gpus)
    assert any(len(counts - {0}) > 1 for counts in seen.values()), seen
    print(f"\naverage JCT on Slurm {cluster.slurm}: dl2 {results['dl2'][0]:.0f} s "
          f"({results['dl2'][1]} resizes), static {results['static'][0]:.0f} s (short cifar10 jobs)")


def test_an_elastic_job_starts_at_the_gpus_that_are_free_inside_its_range(elastic_cluster: Cluster) -> None:
    # 14 of 16 GPUs busy with plain jobs: an elastic job asking 4 (elastic=1:8) starts now on the two
    # free ones, its count set by the daemon before it ever ran (no restart), and its record says so;
    # the job itself sees two GPUs. A rigid job asking 4 beside it waits.
    cluster = elastic_cluster
    quiesce(cluster)
    blockers = [sbatch(cluster, "bob", "-w", node, f"--gres=gpu:{gpus}", "--wrap", "sleep 300")[0]
                for node, gpus in (("gpu01", 4), ("gpu02", 4), ("gpu03", 4), ("gpu04", 2))]
    ids = []
    try:
        wait_for("the plain jobs to run", lambda: all(cluster.client.job(b).is_running for b in blockers),
                 timeout=60, every=1, explain=lambda: snapshot(cluster))
        write(cluster, "/shared/elastic-start.sh",
              "#!/bin/bash\n#LIQUID model=resnet18 batch-size=128 elastic=1:8\n"
              f"echo \"$SLURM_JOB_GPUS\" > {RUNS}/$SLURM_JOB_ID.gpus\nsleep 120\n")
        write(cluster, "/shared/rigid-start.sh", "#!/bin/bash\n#LIQUID model=resnet18 batch-size=128\nsleep 120\n")
        ids = [sbatch(cluster, "alice", "--gres=gpu:4", "--requeue", "/shared/elastic-start.sh")[0],
               sbatch(cluster, "alice", "--gres=gpu:4", "/shared/rigid-start.sh")[0]]
        elastic = wait_for("the elastic job to start on the two free GPUs", lambda: (
            lambda j: j if j.is_running else None)(cluster.client.job(ids[0])), timeout=60, every=1,
            explain=lambda: snapshot(cluster))
        assert (elastic.gpus, list(elastic.nodes), elastic.restarts) == (2, ["gpu04"], 0), elastic
        assert Record.parse(elastic.comment).get("started") == "2of4", elastic.comment
        seen = wait_for("the job to write what it sees", lambda: (lambda p: p.stdout.strip() or None)(
            cluster.exec("slurmctld", "cat", f"{RUNS}/{ids[0]}.gpus")), timeout=30)
        assert len(seen.split(",")) == 2, seen
        assert cluster.client.job(ids[1]).is_pending
    finally:
        cluster.exec("slurmctld", "scancel", *(str(i) for i in [*blockers, *ids]))


def test_an_elastic_job_alone_in_the_queue_starts_on_a_whole_node(elastic_cluster: Cluster) -> None:
    # [elastic] start_wider (the shipped default; off in the test cluster's file): on an idle cluster an
    # elastic job asking 1 GPU (elastic=1:8) starts on all 4 GPUs of one node, its count set by the
    # daemon before it ever ran (no restart), and the job itself sees four GPUs.
    cluster = elastic_cluster
    daemon(cluster, "stop")
    started = cluster.exec("slurmctld", "entrypoint.sh", "daemon-start", "--policy", "static", "--start-wider")
    assert started.returncode == 0, started.stderr
    quiesce(cluster)
    write(cluster, "/shared/elastic-wide.sh",
          "#!/bin/bash\n#LIQUID model=resnet18 batch-size=128 elastic=1:8\n"
          f"echo \"$SLURM_JOB_GPUS\" > {RUNS}/$SLURM_JOB_ID.gpus\nsleep 60\n")
    job_id = sbatch(cluster, "alice", "--gres=gpu:1", "--requeue", "/shared/elastic-wide.sh")[0]
    try:
        job = wait_for("the elastic job to start", lambda: (lambda j: j if j.is_running else None)(
            cluster.client.job(job_id)), timeout=60, every=1, explain=lambda: snapshot(cluster))
        assert (job.gpus, len(job.nodes), job.restarts) == (4, 1, 0), job
        assert Record.parse(job.comment).get("started") == "4of1", job.comment
        seen = wait_for("the job to write what it sees", lambda: (lambda p: p.stdout.strip() or None)(
            cluster.exec("slurmctld", "cat", f"{RUNS}/{job_id}.gpus")), timeout=30)
        assert len(seen.split(",")) == 4, seen
    finally:
        cluster.exec("slurmctld", "scancel", str(job_id))


def test_a_daemon_killed_mid_resize_leaves_no_job_held(elastic_cluster: Cluster) -> None:
    cluster = elastic_cluster
    daemon(cluster, "stop")
    started = cluster.exec("slurmctld", "env", "SLURM_LIQUID_FAILPOINT=after-requeue:600",
                           "entrypoint.sh", "daemon-start")
    assert started.returncode == 0, started.stderr
    write(cluster, "/shared/elastic-fault.sh", elastic_script(**GROWS))
    job_id = sbatch(cluster, "alice", "--gres=gpu:1", "--requeue", "/shared/elastic-fault.sh")[0]

    def stalled():
        job = cluster.client.job(job_id)
        return job if job.is_pending and job.held and job.restarts >= 1 else None

    wait_for("the daemon to requeue-hold the job and stall", stalled, timeout=180, every=2)
    daemon(cluster, "stop")                      # killed between requeuehold and release
    daemon(cluster, "start")                     # reconcile finishes the change
    job = wait_for("the job to finish", lambda: finished(cluster, [job_id]), timeout=600, every=5)[0]
    assert job.state == "COMPLETED"
    assert run_log(cluster, job_id).count("done") == 1


def test_jobs_survive_a_slurmctld_restart_and_a_node_going_down(elastic_cluster: Cluster) -> None:
    cluster = elastic_cluster
    ids = []
    for number in range(2):
        write(cluster, f"/shared/elastic-chaos-{number}.sh", elastic_script(steps=2000, speedup=2.0, low=1, high=1))
        ids.append(sbatch(cluster, "bob", "--gres=gpu:1", "--requeue", f"/shared/elastic-chaos-{number}.sh")[0])
    first = wait_for("a job to run", lambda: next((j for j in map(cluster.client.job, ids) if j.is_running), None),
                     timeout=120)
    restart = cluster.exec("slurmctld", "sh", "-c", "pkill -x slurmctld; sleep 2; slurmctld")
    assert restart.returncode == 0, restart.stderr
    wait_for("slurmctld to answer", lambda: cluster.exec("slurmctld", "scontrol", "ping").returncode == 0, timeout=60)
    node = first.nodes[0]
    try:
        down = cluster.exec("slurmctld", "scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=chaos-test")
        assert down.returncode == 0, down.stderr
        # Slurm requeues the job; the daemon re-places it off the dead node (it was pinned there).
        moved = wait_for(f"job {first.job_id} to run again elsewhere or finish",
                         lambda: (lambda j: j if j.is_finished or (j.is_running and node not in j.nodes) else None)(
                             cluster.client.job(first.job_id)), timeout=180, every=2)
        assert moved.restarts >= 1 or moved.is_finished
        done = wait_for("both jobs to finish", lambda: finished(cluster, ids), timeout=600, every=5)
    finally:
        cluster.exec("slurmctld", "scontrol", "update", f"NodeName={node}", "State=RESUME")
        # A resumed node is NOT_RESPONDING until its slurmd answers again: leave it as the next test expects.
        wait_for(f"{node} to be back", lambda: next(n.available for n in cluster.client.nodes() if n.name == node),
                 timeout=120)
        # Slurm 22.05 may leave a GPU of this test's jobs allocated on an idle node with no job at all
        # (AllocTRES=gres/gpu=1); a slurmctld restart rebuilds allocations from the jobs it has.
        if not [j for j in cluster.client.jobs() if not j.is_finished] and \
                any(n.gpus_alloc for n in cluster.client.nodes()):
            cluster.exec("slurmctld", "sh", "-c", "pkill -x slurmctld; sleep 2; slurmctld")
            wait_for("slurmctld to answer", lambda: cluster.exec("slurmctld", "scontrol", "ping").returncode == 0,
                     timeout=60)
    for job in done:
        assert job.state == "COMPLETED", (job.job_id, job.state)
        assert run_log(cluster, job.job_id).count("done") == 1
    assert not [j for j in cluster.client.jobs(ids) if j.is_pending]


def test_the_daemon_exports_prometheus_metrics(elastic_cluster: Cluster) -> None:
    fetch = ("import urllib.request; "
             "print(urllib.request.urlopen('http://127.0.0.1:9877/metrics', timeout=10).read().decode())")
    proc = wait_for("the metrics endpoint", lambda: (lambda p: p if p.returncode == 0 else None)(
        elastic_cluster.exec("slurmctld", "python3", "-c", fetch)), timeout=30)
    for name in ("liquid_held_jobs", "liquid_placements_total", "liquid_resizes_total", "liquid_errors_total",
                 "liquid_placement_pass_seconds_count", "liquid_elastic_slot_seconds_count", 'policy="dl2"'):
        assert name in proc.stdout, name
