"""How Slurm commands are run: argument lists only, always with a timeout.

`LocalRunner` runs them on this host; `ContainerRunner` runs them inside a container of the
test cluster (`docker exec`), so tests and the demo drive a real Slurm from outside it.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from typing import Protocol, Sequence

from slurm_liquid.slurm.errors import SlurmCommandError

log = logging.getLogger(__name__)


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout: float, stdin: str | None = None) -> str:
        """Run `argv`; return its stdout, or raise SlurmCommandError."""
        ...


@dataclass(frozen=True)
class LocalRunner:
    prefix: tuple[str, ...] = ()

    def __call__(self, argv: Sequence[str], *, timeout: float, stdin: str | None = None) -> str:
        full = [*self.prefix, *argv]
        log.debug("running %s", full)
        try:
            proc = subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise SlurmCommandError(argv, f"could not run: {full[0]} is not installed or not on PATH") from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(argv, f"did not answer within {timeout:g} s") from None
        if proc.returncode != 0:
            raise SlurmCommandError(argv, f"failed with exit code {proc.returncode}", proc.returncode, proc.stderr)
        return proc.stdout


def ContainerRunner(container: str, docker: str = "docker") -> LocalRunner:
    """Run Slurm commands inside `container` (e.g. the test cluster's `liquid-trixie-slurmctld`)."""
    return LocalRunner(prefix=(docker, "exec", "-i", container))
