"""Errors of the Slurm client: each says which command failed and why."""

from __future__ import annotations

from typing import Sequence

from slurm_liquid.errors import LiquidError


class SlurmError(LiquidError):
    """Slurm could not do what we asked, or answered something we cannot read."""


class SlurmCommandError(SlurmError):
    """A Slurm command exited non-zero, timed out or is missing."""

    def __init__(self, argv: Sequence[str], reason: str, returncode: int | None = None, stderr: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        detail = f": {self.stderr.splitlines()[-1]}" if self.stderr else ""
        super().__init__(f"`{' '.join(self.argv)}` {reason}{detail}")
