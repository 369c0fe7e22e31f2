"""Measured speed steers the live daemon (the speed room on the real cluster).

Two elastic stand-in jobs of the same model, side by side under Optimus (the policy that decides
from speed alone): one's step time stops improving past 2 GPUs, the other scales linearly
(`--curve`, step times per (GPUs, nodes) that are not the speed prior). Both start on 2 GPUs; the
daemon tries each width one step past what it has measured. Once it has seen their reports, the
linear job grows to its maximum (8) while the saturating one holds at most 3. A third job never
reports a speed: it is resized by its prior alone, and its record says so.
"""

from __future__ import annotations

import json

import pytest

from slurm_liquid.ledger import Record
from slurm_liquid.sim.curves import Curve, formula, shapes
from tests.integration.cluster import Cluster, quiesce, snapshot, wait_for
from tests.integration.test_elastic import RUNS, TRAINER, elastic_cluster  # noqa: F401 -- the fixture
from tests.integration.test_submission import daemon, sbatch, write

pytestmark = pytest.mark.integration
BASE_STEP_S = 0.4
SPEC = "#LIQUID model=resnet18 batch-size=128 elastic=1:{high} signal=USR1@15"


def curve(kind: str) -> str:
    return json.dumps(Curve(kind, BASE_STEP_S, {s: formula(kind, BASE_STEP_S, *s) for s in shapes(8)}).to_json())


def curve_script(kind: str) -> str:
    return (f"#!/bin/bash\n{SPEC.format(high=8)}\ntrap '' USR1\necho start >> {RUNS}/$SLURM_JOB_ID\n"
            f"/opt/slurm-liquid/bin/python {TRAINER} --curve '{curve(kind)}' --steps 100000 --batch-size 128 "
            f"--checkpoint-dir /shared/checkpoints --report-interval 1 || exit $?\n")


def silent_script() -> str:
    # Never reports: whatever the daemon decides for it comes from the prior (resnet18 -> cifar10 trace).
    return f"#!/bin/bash\n{SPEC.format(high=2)}\ntrap '' USR1\nsleep 900\n"


def test_measured_speed_grows_the_linear_job_and_holds_the_saturating_one(elastic_cluster: Cluster) -> None:
    cluster = elastic_cluster
    # The linear job needs two whole nodes: start from an empty, idle cluster whatever ran before.
    quiesce(cluster)
    daemon(cluster, "stop")
    started = cluster.exec("slurmctld", "entrypoint.sh", "daemon-start", "--policy", "optimus", "--payback", "2")
    assert started.returncode == 0, started.stderr
    ids = {}
    for name, text, gpus in (("plateau", curve_script("plateau2"), 2), ("linear", curve_script("linear"), 2),
                             ("silent", silent_script(), 1)):
        write(cluster, f"/shared/speed-{name}.sh", text)
        ids[name] = sbatch(cluster, "alice", f"--gres=gpu:{gpus}", "--requeue", f"/shared/speed-{name}.sh")[0]
    try:
        seen: dict[str, int] = {}

        def grown():
            jobs = {name: cluster.client.job(job_id) for name, job_id in ids.items()}
            for name, job in jobs.items():
                if job.is_running:
                    seen[name] = max(seen.get(name, 0), job.gpus)
            linear = jobs["linear"]
            return jobs if linear.is_running and linear.gpus == 8 else None

        jobs = wait_for("the linear job to grow to its maximum (8 GPUs)", grown, timeout=420, every=2,
                        explain=lambda: f"largest widths seen {seen}\n{snapshot(cluster)}")
        plateau = cluster.client.job(ids["plateau"])
        # It was measured on 2 (and maybe 4, one step past): never more than 3 after that.
        assert seen["plateau"] <= 4 and plateau.gpus <= 3, (seen, plateau.gpus, plateau.comment)
        linear = Record.parse(jobs["linear"].comment)
        assert linear.get("resized") == "2to4,4to8", jobs["linear"].comment
        assert linear.get("note") == "optimus-slot/speed:measured", jobs["linear"].comment
        silent = wait_for("the silent job to be resized by its prior",
                          lambda: (lambda r: r if r and r.get("resized") else None)(
                              Record.parse(cluster.client.job(ids["silent"]).comment)), timeout=120, every=2,
                          explain=lambda: snapshot(cluster))
        assert silent.get("note") == "optimus-slot/speed:trace:cifar10", silent
    finally:
        cluster.exec("slurmctld", "scancel", *(str(i) for i in ids.values()))
        wait_for("the jobs to end", lambda: all((j := cluster.client.job(i)) is None or j.is_finished
                                                for i in ids.values()), timeout=120, every=2)
