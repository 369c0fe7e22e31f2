"""The simulator's oracle speed model: exact answers read from the measured traces.

Optimus (+Oracle) uses it as its `SpeedModel`; FIFO's wall-time limits are derived from
it. Answers are memoized per (application, batch, GPUs).
"""

from __future__ import annotations

from functools import lru_cache

from slurm_liquid.policy.base import JobView
from slurm_liquid.sim.apps import AppModel, load_app


def packed(gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """`gpus` packed onto whole nodes: (G, G, ..., remainder)."""
    full, rest = divmod(gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


@lru_cache(maxsize=None)
def _iteration_time(app: AppModel, batch: int, gpus: int, gpus_per_node: int) -> float:
    # The artifact's predictor forces one accumulation step on a single GPU, even at the
    # initial batch size; kept because the published Optimus numbers depend on it.
    config = app.batch_config(batch, gpus, force_accum=gpus == 1)
    st, sy = app.step_time(packed(gpus, gpus_per_node), config.atomic)
    return st + config.accum * (st - sy)


@lru_cache(maxsize=None)
def isolated_runtime(app: AppModel, batch: int, gpus: int, gpus_per_node: int) -> float:
    """Seconds a job needs alone on `gpus` packed GPUs (no waiting, no restart penalty)."""
    config = app.batch_config(batch, gpus)
    st, sy = app.step_time(packed(gpus, gpus_per_node), config.atomic)
    step = st + config.accum * (st - sy)
    bounds = app.epoch_bounds
    # Whole seconds per epoch, as the engine rounds each epoch crossing.
    return float(sum(round((bounds[e + 1] - bounds[e]) * step / app.gain(config.batch, e)) for e in range(app.max_epochs)))


class OracleSpeedModel:
    """A `SpeedModel` with perfect knowledge of step times and remaining work."""

    def __init__(self, gpus_per_node: int) -> None:
        self.gpus_per_node = gpus_per_node

    def iteration_time(self, job: JobView, gpus: int) -> float:
        return _iteration_time(load_app(job.app), int(job.batch_size), gpus, self.gpus_per_node)

    def remaining_iterations(self, job: JobView) -> float:
        app = load_app(job.app)
        last = app.max_epochs - 1
        if job.epoch >= last:
            return 1.0
        # One epoch short (to row E-1, not the end), exactly as the artifact codes it.
        return app.iterations(job.batch_size, last) - app.iterations(job.batch_size, job.epoch)
