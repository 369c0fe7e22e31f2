"""The Slurm client interface, and the choice of backend behind it."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Iterable, Protocol, Sequence

from slurm_liquid.slurm.cli_backend import CliBackend
from slurm_liquid.slurm.errors import SlurmError
from slurm_liquid.slurm.models import Job, Node, Partition, SlurmVersion
from slurm_liquid.slurm.runner import CommandRunner

if TYPE_CHECKING:
    from slurm_liquid.topology import Topology

log = logging.getLogger(__name__)
BACKENDS = ("auto", "cli", "pyslurm")


class SlurmClient(Protocol):
    """What slurm-liquid needs from Slurm; every backend offers exactly this."""

    name: str

    def version(self) -> SlurmVersion: ...
    def jobs(self, job_ids: Iterable[int] | None = None) -> list[Job]: ...
    def job(self, job_id: int) -> Job | None: ...
    def gres_detail(self, job_ids: Iterable[int]) -> dict[int, dict[str, str]]: ...
    def accounting(self, job_ids: Iterable[int] | None = None, since: datetime | None = None,
                   until: datetime | None = None) -> list[Job]: ...
    def nodes(self) -> list[Node]: ...
    def partitions(self) -> list[Partition]: ...
    def topology(self) -> "Topology": ...
    def submit(self, script: str, args: Sequence[str] = ()) -> int: ...
    def hold(self, job_id: int) -> None: ...
    def release(self, job_id: int) -> None: ...
    def requeue_hold(self, job_id: int) -> None: ...
    def cancel(self, job_id: int) -> None: ...
    def signal(self, job_id: int, signal: str, batch_only: bool = False) -> None: ...
    def update_job(self, job_id: int, **fields: str | int) -> None: ...
    def update_jobs(self, job_ids: Sequence[int], **fields: str | int) -> None: ...
    def resize(self, job_id: int, gpus_per_node: int, num_nodes: int | None = None,
               nodes: Sequence[str] | None = None, gpu_type: str | None = None) -> None: ...
    def set_comment(self, job_id: int, comment: str) -> None: ...
    def batch_script(self, job_id: int) -> str: ...
    def set_recorded_admin_comment(self, job_id: int, admin_comment: str) -> None: ...


def connect(backend: str = "auto", runner: CommandRunner | None = None, timeout_s: float = 30.0) -> SlurmClient:
    """A client for the local Slurm (or the one `runner` reaches).

    `auto` takes pyslurm when it imports and matches the running Slurm's major version,
    and otherwise the CLI/JSON backend, logging why.
    """
    if backend not in BACKENDS:
        raise SlurmError(f"unknown Slurm backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    cli = CliBackend(runner=runner, timeout_s=timeout_s)
    if backend == "cli":
        return cli
    reason = _pyslurm_unusable(cli)
    if reason is None:
        from slurm_liquid.slurm.pyslurm_backend import PyslurmBackend
        import pyslurm

        log.info("Slurm backend: pyslurm %s", pyslurm.__version__)
        return PyslurmBackend(pyslurm, runner=runner, timeout_s=timeout_s)
    if backend == "pyslurm":
        raise SlurmError(f"the pyslurm backend was asked for but {reason}")
    log.info("Slurm backend: CLI/JSON (%s)", reason)
    return cli


def _pyslurm_unusable(cli: CliBackend) -> str | None:
    """Why pyslurm cannot serve this Slurm, or None when it can."""
    try:
        import pyslurm
    except ImportError as exc:
        return f"pyslurm does not import ({exc})"
    from slurm_liquid.slurm.pyslurm_backend import pyslurm_version

    mine, running = pyslurm_version(pyslurm), cli.version()
    if (mine.major, mine.minor) != (running.major, running.minor):
        return f"pyslurm {mine} is built for another Slurm than the running {running}"
    return None
