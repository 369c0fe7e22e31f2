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


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90, every: float = 1.0) -> T:
    """Poll until `probe` returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
