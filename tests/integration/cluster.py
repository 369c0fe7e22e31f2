"""Helpers for tests against the containerized Slurm cluster."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from slurm_liquid.slurm import CliBackend

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "containers" / "cluster"
SLURM_OF_SUITE = {"trixie": "24.11", "bookworm": "22.05", "sid": "26.05"}
T = TypeVar("T")


@dataclass
class Cluster:
    suite: str
    client: CliBackend

    @property
    def slurm(self) -> str:
        return SLURM_OF_SUITE[self.suite]

    def exec(self, host: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(CLUSTER), "--suite", self.suite, "exec", host, "--", *argv],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90, every: float = 1.0,
             explain: Callable[[], str] | None = None) -> T:
    """Poll until `probe` returns something truthy; fail naming `what` after `timeout` seconds.

    `explain`, when given, is asked on a timeout for what the cluster looked like (queue, nodes,
    logs), so that a failure in CI says why without a rerun.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = ""
            if explain is not None:
                try:
                    detail = "\n" + explain()
                except Exception as exc:  # the explanation must never hide the timeout itself
                    detail = f"\n(could not explain: {exc!r})"
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(every)


def snapshot(cluster: Cluster, log_lines: int = 40) -> str:
    """The queue, the nodes and the daemon's last log lines, as text for a failure message."""
    parts = []
    for title, argv in (("squeue", ["squeue", "-o", "%i %u %T %b %N %M %r %k"]),
                        ("sinfo", ["sinfo", "-N", "-o", "%N %T %G %E"]),
                        ("daemon log", ["tail", "-n", str(log_lines), "/var/log/slurm/liquid-daemon.log"])):
        proc = cluster.exec("slurmctld", *argv)
        parts.append(f"--- {title} ---\n{proc.stdout}{proc.stderr}")
    return "\n".join(parts)


def quiesce(cluster: Cluster, timeout: float = 120) -> None:
    """Cancel every job an earlier test left and wait until the queue is empty and every node idle.

    Tests that need the whole cluster (a job growing to two nodes) start from a known state instead
    of depending on how earlier tests cleaned up.
    """
    left = cluster.exec("slurmctld", "squeue", "-h", "-o", "%i").stdout.split()
    if left:
        cluster.exec("slurmctld", "scancel", *left)

    def quiet() -> bool:
        queue = cluster.exec("slurmctld", "squeue", "-h", "-o", "%i")
        nodes = cluster.exec("slurmctld", "sinfo", "-h", "-N", "-o", "%T")
        return (queue.returncode == 0 and not queue.stdout.strip() and nodes.returncode == 0
                and all(state.strip() == "idle" for state in nodes.stdout.split()))

    wait_for("the queue to empty and every node to be idle", quiet, timeout=timeout, every=2,
             explain=lambda: snapshot(cluster))
