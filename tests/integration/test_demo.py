"""`make demo`'s elastic section on the real cluster: with the daemon's shipped policy and guard, the two
elastic jobs are resized, and the table shows it. On the default Slurm only: test_elastic.py resizes on
every version."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, quiesce
from tests.integration.test_submission import daemon

pytestmark = pytest.mark.integration
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_the_demo_resizes_an_elastic_job_and_shows_it(default_cluster: Cluster, capsys) -> None:
    cluster = default_cluster
    spec = importlib.util.spec_from_file_location("demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    quiesce(cluster)
    daemon(cluster, "start")   # the policy and guard of the cluster's liquid.toml: DL2, its own (none)
    for path in ("/shared/checkpoints", "/shared/slurm-liquid/progress"):
        cluster.exec("slurmctld", "rm", "-rf", path)
    assert cluster.exec("slurmctld", "install", "-d", "-m", "1777", "/shared/slurm-liquid/progress").returncode == 0
    rows = demo.elastic_rows(f"liquid-{cluster.suite}-slurmctld", cluster.client, timeout=600)
    shown = capsys.readouterr().out
    assert rows is not None, shown
    resized = [row for row in rows if row[2] >= 1 and row[4] != "-"]
    assert resized, shown                                  # a job was requeued and its record says to what
    assert any(row[4] in line and str(row[0]) in line for row in resized for line in shown.splitlines())
