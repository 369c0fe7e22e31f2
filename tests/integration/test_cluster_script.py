"""containers/cluster against the real Docker engine: failures give one clear message, never a hang."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cluster_script import SCRIPT, load
from tests.integration.cluster import REPO, Cluster

pytestmark = pytest.mark.integration


def test_failed_image_build_shows_the_failing_step(cluster: Cluster, tmp_path, monkeypatch) -> None:
    script = load()
    (tmp_path / "Dockerfile.broken").write_text(f"FROM debian:{cluster.suite}\nRUN echo apt-broke-here && false\n")
    monkeypatch.setattr(script, "HERE", tmp_path)
    with pytest.raises(script.ClusterError) as err:
        script.docker_build("Dockerfile.broken", "slurm-liquid-broken:test", tmp_path)
    message = str(err.value)
    assert message.startswith("image build of slurm-liquid-broken:test (Dockerfile.broken) failed (exit 1)")
    assert "apt-broke-here" in message


def test_a_node_that_never_comes_up_is_named_within_the_timeout(cluster: Cluster) -> None:
    # DRAIN, not DOWN: with ReturnToService=2 a late registration of a just-started node undoes a DOWN.
    assert cluster.exec("slurmctld", "scontrol", "update", "NodeName=gpu04", "State=DRAIN",
                        "Reason=test-never-up").returncode == 0
    try:
        proc = subprocess.run([sys.executable, str(SCRIPT), "--suite", cluster.suite, "wait", "--timeout", "6"],
                              capture_output=True, text=True, timeout=120)
    finally:
        cluster.exec("slurmctld", "scontrol", "update", "NodeName=gpu04", "State=RESUME")
    assert proc.returncode == 1
    assert "cluster: error: the cluster was not ready within 6 s (nodes not idle: gpu04=drain" in proc.stderr
    assert "Last log lines of gpu04" in proc.stderr


def test_status_and_exec(cluster: Cluster) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--suite", cluster.suite, "status"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "slurmctld  running" in proc.stdout and "gpu:h100:4" in proc.stdout
    assert cluster.exec("gpu02", "hostname").stdout.strip() == "gpu02"
    assert cluster.exec("gpu02", "false").returncode == 1


def test_working_tree_etc_is_what_the_cluster_sees(cluster: Cluster) -> None:
    """etc/ is mounted from the working tree, and etc/slurm/* would be installed into /etc/slurm."""
    for host in ("slurmctld", "gpu03"):
        mounted = cluster.exec(host, "cat", "/etc/slurm-liquid/README.md")
        assert mounted.returncode == 0 and mounted.stdout == (REPO / "etc" / "README.md").read_text()
        assert cluster.exec(host, "test", "-f", "/etc/slurm/liquid.conf").returncode == 0
