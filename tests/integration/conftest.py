"""The real containerized Slurm cluster, brought up once per Slurm version under test.

LIQUID_SUITES picks the versions (default "trixie bookworm": Slurm 24.11 and 22.05). When the
cluster cannot start, the tests fail under CI=true and are skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slurm_liquid.slurm import CliBackend, ContainerRunner
from tests.integration.cluster import CLUSTER, Cluster

SUITES = os.environ.get("LIQUID_SUITES", "trixie bookworm").split()


def _up(suite: str) -> Cluster:
    try:
        proc = subprocess.run([sys.executable, str(CLUSTER), "--suite", suite, "up"], capture_output=True,
                              text=True, timeout=2400, stdin=subprocess.DEVNULL)
        failure = proc.stderr.strip()[-3000:] if proc.returncode else None
    except subprocess.TimeoutExpired:
        failure = "containers/cluster up did not finish within 40 minutes"
    if failure:
        message = f"the {suite} Slurm cluster did not start:\n{failure}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    sys.stderr.write(proc.stderr)
    return Cluster(suite, CliBackend(ContainerRunner(f"liquid-{suite}-slurmctld"), timeout_s=30))


@pytest.fixture(scope="session", params=SUITES)
def cluster(request: pytest.FixtureRequest) -> Cluster:
    return _up(request.param)


@pytest.fixture(scope="session", params=SUITES[:1])
def default_cluster(request: pytest.FixtureRequest) -> Cluster:
    """The first suite of LIQUID_SUITES only (Slurm 24.11 by default): for long end-to-end tests whose
    version-specific steps other tests run on every suite (CI's time is bounded)."""
    return _up(request.param)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The chaos soak last: its faults (a full staging disk among them) must not leave state that the
    other tests of its cluster then meet (test_staging saw the shared path once after it)."""
    items.sort(key=lambda item: "test_chaos.py" in item.nodeid)
