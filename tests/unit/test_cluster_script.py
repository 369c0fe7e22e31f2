"""containers/cluster: clear messages and non-zero exits when something is missing or wrong."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cluster_script import SCRIPT, load


def run_script(*args: str, path: str = "/nonexistent") -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("command", [["status"], ["up"], ["exec", "slurmctld", "--", "sinfo"], ["logs", "gpu01"]])
def test_missing_docker_is_named(command) -> None:
    proc = run_script(*command)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "cluster: error: Docker is not installed (no dockerd). Run `containers/cluster setup` as root, "
        "or install it yourself: apt-get install docker.io debootstrap"]


def test_unknown_suite_and_command_are_usage_errors() -> None:
    assert run_script("--suite", "jessie", "up").returncode == 2
    assert run_script("reboot").returncode == 2


def test_unknown_host_and_empty_exec_are_refused() -> None:
    cluster = load()
    with pytest.raises(cluster.ClusterError, match="unknown host 'gpu09'; hosts are mariadb, gpu01"):
        cluster.container("trixie", "gpu09")


def test_command_failures_and_timeouts_name_the_command() -> None:
    cluster = load()
    with pytest.raises(cluster.ClusterError, match=r"the probe failed \(exit 3\):\nboom"):
        cluster.run([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], what="the probe")
    with pytest.raises(cluster.ClusterError, match="the sleeper did not finish within 0.2 s"):
        cluster.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2, what="the sleeper")
    with pytest.raises(cluster.ClusterError, match="no-such-binary is not installed"):
        cluster.run(["no-such-binary"])


def test_requirements_come_from_pyproject() -> None:
    reqs = load().project_requirements()
    assert any(r.startswith("python-hostlist") for r in reqs) and any(r.startswith("networkx") for r in reqs)


def test_the_placeholder_wheel_stands_for_debians_torch_with_its_requirements(tmp_path) -> None:
    # pip resolves the frameworks' wheelhouse against this wheel: Debian's version and requirements, no files.
    import zipfile
    path = load().placeholder_wheel(tmp_path, "torch", "2.6.0+debian", ["sympy==1.13.1", "setuptools"])
    assert path.name == "torch-2.6.0+debian-py3-none-any.whl"
    with zipfile.ZipFile(path) as whl:
        names = whl.namelist()
        metadata = whl.read("torch-2.6.0+debian.dist-info/METADATA").decode()
    assert sorted(names) == ["torch-2.6.0+debian.dist-info/METADATA", "torch-2.6.0+debian.dist-info/RECORD",
                             "torch-2.6.0+debian.dist-info/WHEEL"]
    assert "Version: 2.6.0+debian\n" in metadata
    assert "Requires-Dist: sympy==1.13.1\nRequires-Dist: setuptools\n" in metadata


def test_framework_requirements_are_the_lines_of_frameworks_txt() -> None:
    reqs = load().framework_requirements()
    assert {r.split(">")[0] for r in reqs} == {"transformers", "accelerate", "lightning"}
