"""The node agent on the real cluster: it maps real Slurm job processes to jobs and records usage in sacct.

The emulated GPUs have no NVML, so the agents run with the stand-in reader (containers/slurm/liquid.toml:
`gpu_source = "standin:/tmp/liquid-standin"`): a job's process writes what it pretends to use on the
GPUs Slurm gave it, and every record says `by=standin`. Everything else is real: the processes are
found in /proc and mapped through their slurmstepd, the node epilog tells the agent the job ended,
and the usage reaches the job's AdminComment in slurmdbd through sacctmgr.
"""

from __future__ import annotations

import json

import pytest

from slurm_liquid.ledger import Tag, Usage
from tests.integration.cluster import Cluster, wait_for
from tests.integration.test_submission import daemon_running, sbatch, write  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

# What a training process would use, said to the stand-in reader: `used` MiB on the first of the
# GPUs Slurm gave this process (+1000 per further GPU), 80 % busy, 64 MiB of host memory.
STANDIN = """\
import json, os, sys, time
used, seconds = float(sys.argv[1]), float(sys.argv[2])
env = os.environ
gpus = [g for g in (env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES", "")).split(",") if g]
for i, gpu in enumerate(gpus):
    path = f"/tmp/liquid-standin/{env['SLURM_JOB_ID']}-{os.getpid()}-{gpu}.json"
    with open(path + ".tmp", "w") as handle:
        json.dump({"pid": os.getpid(), "gpu": int(gpu), "used_mib": used + 1000 * i, "util": 80}, handle)
    os.replace(path + ".tmp", path)
ballast = bytearray(64 * 2 ** 20)
time.sleep(seconds)
"""


def usage_of(cluster: Cluster, job_id: int) -> tuple[Usage, str] | None:
    """The job's usage once every node of the job has recorded its part."""
    jobs = cluster.client.accounting([job_id])
    if not jobs or not jobs[0].is_finished:
        return None
    usage = Usage.parse(jobs[0].admin_comment)
    return (usage, jobs[0].admin_comment) if usage and set(usage.nodes) == set(jobs[0].nodes) else None


def snapshot(cluster: Cluster, node: str, *args: str) -> dict:
    proc = cluster.exec(node, "slurm-liquid", "agent", "--once", "--record", "off", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_agents_map_real_jobs_and_record_what_they_used_in_sacct(cluster: Cluster, daemon_running: None) -> None:
    for node in ("gpu01", "gpu02", "gpu03", "gpu04"):
        started = cluster.exec(node, "entrypoint.sh", "agent-start")
        assert started.returncode == 0, started.stderr
    write(cluster, "/shared/standin_gpu.py", STANDIN)
    run = "python3 /shared/standin_gpu.py"
    # a liquid job on two GPUs of one node, a plain job over two nodes, a shard job, a CPU-only job
    # (no batch-size: retraining skips it, so its made-up 30 GB teach the loop test nothing)
    single, _ = sbatch(cluster, "alice", "--gres=gpu:2", "--cpus-per-task=2",
                       "--comment=liquid: model=resnet50 min-gpus=2 max-gpus=2",
                       "--wrap", f"{run} 30000 12")
    multi, _ = sbatch(cluster, "bob", "-N", "2", "--gres=gpu:1", "--wrap",
                      f"srun -N 2 --ntasks-per-node=1 {run} 20000 12")
    shard, _ = sbatch(cluster, "alice", "--gres=shard:8", "--wrap", f"{run} 5000 12")
    cpu_only, _ = sbatch(cluster, "bob", "--wrap", "sleep 5")

    # While they run: each job's processes are found and mapped through their slurmstepd (the
    # containers have no job cgroups), with the stand-in readings charged to the right job.
    job = wait_for("the two-GPU job to run", lambda: next(
        (j for j in cluster.client.jobs([single]) if j.is_running and j.nodes), None), timeout=60)
    node = job.nodes[0]
    seen = wait_for(f"the agent on {node} to see job {single} on its GPUs", lambda: (
        lambda s: s if str(single) in s["jobs"] and any(g["peak_mib"] >= 30000 for g in s["jobs"][str(single)]["gpus"].values())
        else None)(snapshot(cluster, node)), timeout=30)
    measured = seen["jobs"][str(single)]
    assert seen["gpu_source"] == "standin" and measured["via"] == "slurmstepd"
    # which GPUs are the job's comes from slurmctld (no devices cgroup here), not its environment
    assert measured["gpus_from"] == "slurm" and seen["errors"] == {}, seen
    assert len(measured["gpus"]) == 2 and measured["host_peak_mib"] >= 64
    # the same node without NVML (what a GPU-less node or a broken driver looks like): it says so
    # and still maps the job and measures host memory
    blind = snapshot(cluster, node, "--gpu-source", "nvml")
    assert blind["gpu_source"] == "none" and "NVML" in blind["problem"]
    assert str(single) in blind["jobs"]

    recorded = {job_id: wait_for(f"job {job_id}'s usage in sacct", lambda j=job_id: usage_of(cluster, j), timeout=120, every=2)
                for job_id in (single, multi, shard)}
    jobs = {j.job_id: j for j in cluster.client.accounting([single, multi, shard, cpu_only])}

    usage, admin_comment = recorded[single]
    assert (usage.by, usage.gpus, usage.peak_mib, usage.shared) == ("standin", 2, 31000, False)
    # 80 % once the process said so; a sample or two before that (start-up) reads 0 %
    assert 60 <= usage.util <= 80 and usage.host_mib >= 64 and usage.samples >= 5
    assert usage.nodes == jobs[single].nodes
    assert Tag.parse(admin_comment).state == "placed", admin_comment     # the daemon's tag is kept

    usage, admin_comment = recorded[multi]
    assert (usage.gpus, usage.peak_mib, usage.nodes) == (2, 20000, tuple(sorted(jobs[multi].nodes)))
    assert len(usage.nodes) == 2 and admin_comment.count("liquid-used/1") == 1
    assert Tag.parse(admin_comment) is None                            # a plain job: measured, never tagged

    usage, _ = recorded[shard]
    assert (usage.gpus, usage.peak_mib, usage.shared) == (1, 5000, True)

    assert Usage.parse(jobs[cpu_only].admin_comment) is None          # no GPU: nothing to learn from

    # users cannot forge what was used: AdminComment is refused to them
    forged = cluster.exec("slurmctld", "runuser", "-u", "alice", "--", "sacctmgr", "-i", "modify", "job", "where",
                          f"jobid={single}", "set", "AdminComment=liquid-used/1 by=nvml gpus=1 peak=1 util=1")
    assert forged.returncode != 0
    assert Usage.parse(cluster.client.accounting([single])[0].admin_comment).peak_mib == 31000


# Small jobs that fit one GPU (or a share of one); the stand-in makes each use 1.3 x what the
# estimator's prior says, a bias the retrained correction must learn from sacct alone.
LOOP = ["model=resnet18 batch-size=64", "model=resnet50 batch-size=32", "model=mobilenet_v2 batch-size=128",
        "model=bert-base batch-size=16 seq-len=128", "model=resnet34 batch-size=64", "model=vgg11 batch-size=32",
        "model=densenet121 batch-size=32", "model=efficientnet_b0 batch-size=64"]
BIAS = 1.3
SITE = "/etc/slurm/liquid-site.toml"


def test_retraining_from_sacct_learns_a_bias_the_prior_has(cluster: Cluster, daemon_running: None) -> None:
    for node in ("gpu01", "gpu02", "gpu03", "gpu04"):
        assert cluster.exec(node, "entrypoint.sh", "agent-start").returncode == 0
    write(cluster, "/shared/standin_gpu.py", STANDIN)
    ids = []
    for spec in LOOP:
        shown = cluster.exec("slurmctld", "slurm-liquid", "estimate", "--site", SITE, "--correction", "none",
                             "--comment", f"liquid: {spec}", "--json")
        assert shown.returncode in (0, 1), shown.stderr
        prior = json.loads(shown.stdout)
        assert prior["gpus"] == 1, prior
        used = round(prior["gpu_mem_mib"] * BIAS)
        job_id, _ = sbatch(cluster, "alice", "--gres=gpu:1", f"--comment=liquid: {spec} min-gpus=1 max-gpus=1",
                           "--wrap", f"python3 /shared/standin_gpu.py {used} 6")
        ids.append(job_id)
    wait_for("every job's usage in sacct", lambda: all(usage_of(cluster, j) for j in ids), timeout=180, every=3)

    since = "1d"
    trained = cluster.exec("slurmctld", "slurm-liquid", "estimate", "--site", SITE, "train", "--from-sacct",
                           "--since", since, "--allow-standin", "--install", f"/tmp/loop-correction-{ids[0]}.json", "--json",
                           timeout=300)
    assert trained.returncode == 0, trained.stderr
    report = json.loads(trained.stdout)
    # other tests' liquid jobs may join in; ours are at least these
    assert report["rows"] >= len(LOOP)
    assert report["new"]["mre"] < report["prior"]["mre"] and report["prior"]["under"] > 0.5
    assert report["better"] and report["installed"], report["verdict"]
    again = cluster.exec("slurmctld", "slurm-liquid", "estimate", "--site", SITE, "--correction",
                         f"/tmp/loop-correction-{ids[0]}.json", "--comment", f"liquid: {LOOP[1]}", "--json")
    corrected = json.loads(again.stdout)
    assert corrected["correction_factor"] > 1.1, corrected      # it learnt that jobs use more


def test_a_job_is_still_recorded_when_its_nodes_agent_is_killed_and_restarted(cluster: Cluster) -> None:
    for node in ("gpu01", "gpu02", "gpu03", "gpu04"):
        assert cluster.exec(node, "entrypoint.sh", "agent-start").returncode == 0
    write(cluster, "/shared/standin_gpu.py", STANDIN)
    job_id, _ = sbatch(cluster, "bob", "--gres=gpu:1", "--wrap", "python3 /shared/standin_gpu.py 9000 15")
    job = wait_for("the job to run", lambda: next(
        (j for j in cluster.client.jobs([job_id]) if j.is_running and j.nodes), None), timeout=60)
    node = job.nodes[0]
    wait_for(f"the agent on {node} to see job {job_id}", lambda: str(job_id) in snapshot(cluster, node)["jobs"],
             timeout=30)
    killed = cluster.exec(node, "pkill", "-KILL", "-f", "slurm-liquid agent")
    assert killed.returncode == 0, killed.stderr
    assert cluster.exec(node, "entrypoint.sh", "agent-start").returncode == 0
    usage, _ = wait_for(f"job {job_id}'s usage in sacct", lambda: usage_of(cluster, job_id), timeout=120, every=2)
    assert (usage.gpus, usage.peak_mib, usage.nodes) == (1, 9000, (node,))
