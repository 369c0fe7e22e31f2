"""Optional backend over pyslurm, the Python binding of libslurm.

pyslurm must be built for the exact Slurm major version it talks to, and PyPI only has
builds for 25.11, so `connect()` picks this backend only when pyslurm imports and its
version matches the running Slurm. It sends the daemon's frequent writes (hold, release,
requeue, update, signal) as RPCs instead of spawning `scontrol`; reads stay on the JSON
path, which is the one tested against every Slurm version.
"""

from __future__ import annotations

import signal as signals
from typing import Any

from slurm_liquid.slurm.cli_backend import CliBackend
from slurm_liquid.slurm.errors import SlurmError
from slurm_liquid.slurm.models import SlurmVersion


def pyslurm_version(module: Any) -> SlurmVersion:
    """The Slurm version pyslurm was built for; 0.0.0 (matching no Slurm) when it does not say."""
    try:
        return SlurmVersion.parse(str(getattr(module, "__version__", "0.0.0")))
    except SlurmError:
        return SlurmVersion(0, 0, 0)


class PyslurmBackend(CliBackend):
    name = "pyslurm"

    def __init__(self, pyslurm: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self._pyslurm = pyslurm

    def _rpc(self, what: str, job_id: int, call) -> None:
        try:
            call(self._pyslurm.Job(int(job_id)))
        except Exception as exc:  # pyslurm raises its own RPCError; keep the message, name the job
            raise SlurmError(f"pyslurm {what} of job {job_id} failed: {exc}") from exc

    def hold(self, job_id: int) -> None:
        self._rpc("hold", job_id, lambda job: job.hold())

    def release(self, job_id: int) -> None:
        self._rpc("release", job_id, lambda job: job.release())

    def requeue_hold(self, job_id: int) -> None:
        self._rpc("requeue", job_id, lambda job: job.requeue(hold=True))

    def cancel(self, job_id: int) -> None:
        self._rpc("cancel", job_id, lambda job: job.cancel())

    def signal(self, job_id: int, signal: str, batch_only: bool = False) -> None:
        name = signal if signal.startswith("SIG") else f"SIG{signal}"
        number = getattr(signals, name, None)
        if number is None:
            raise SlurmError(f"invalid signal name {signal!r}")
        self._rpc("signal", job_id, lambda job: job.send_signal(int(number), steps="batch" if batch_only else "all"))
