"""The simulator's oracle speed model: exact answers read from the measured traces.

Optimus (+Oracle) uses it as its `SpeedModel`; FIFO's wall-time limits are derived from
it. Answers are memoized per (application, batch, GPUs on each node).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from slurm_liquid.views import JobView
from slurm_liquid.sim.apps import AppModel, load_app


def packed(gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """`gpus` packed onto whole nodes: (G, G, ..., remainder)."""
    full, rest = divmod(gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


@lru_cache(maxsize=None)
def _iteration_time(app: AppModel, batch: int, placement: tuple[int, ...]) -> float:
    # The artifact's predictor forces one accumulation step on a single GPU, even at the
    # initial batch size; kept because the published Optimus numbers depend on it.
    gpus = sum(placement)
    config = app.batch_config(batch, gpus, force_accum=gpus == 1)
    return app.iteration_time(placement, config)


@lru_cache(maxsize=None)
def isolated_runtime(app: AppModel, batch: int, gpus: int, gpus_per_node: int) -> float:
    """Seconds a job needs alone on `gpus` packed GPUs (no waiting, no restart penalty)."""
    config = app.batch_config(batch, gpus)
    step = app.iteration_time(packed(gpus, gpus_per_node), config)
    bounds = app.epoch_bounds
    # Whole seconds per epoch, as the engine rounds each epoch crossing.
    return float(sum(round((bounds[e + 1] - bounds[e]) * step / app.gain(config.batch, e)) for e in range(app.max_epochs)))


@lru_cache(maxsize=None)
def _progress_time(app: AppModel, epoch: int, placement: tuple[int, ...]) -> float:
    config = app.goodput_config(placement, epoch)
    return app.iteration_time(placement, config) / app.gain(config.batch, epoch)


class OracleSpeedModel:
    """A `SpeedModel` with perfect knowledge of step times and remaining work.

    With `batch_scaling` (jobs pick their goodput-best batch, `ClusterConfig.batch_scaling`) an
    "iteration" is one unit of statistical progress (a step at the initial batch), timed at the
    batch the job would pick in its current epoch; products and ratios keep their meaning."""

    def __init__(self, gpus_per_node: int, batch_scaling: bool = False) -> None:
        self.gpus_per_node = gpus_per_node
        self.batch_scaling = batch_scaling

    def iteration_time(self, job: JobView, gpus: int) -> float:
        return self._time(job, packed(gpus, self.gpus_per_node))

    def placed_iteration_time(self, job: JobView, placement: Sequence[int]) -> float:
        """Seconds per step on GPUs spread as `placement` (GPUs on each node)."""
        return self._time(job, tuple(sorted((int(g) for g in placement if g > 0), reverse=True)) or (1,))

    def _time(self, job: JobView, placement: tuple[int, ...]) -> float:
        if self.batch_scaling:
            return _progress_time(load_app(job.app), job.epoch, placement)
        return _iteration_time(load_app(job.app), int(job.batch_size), placement)

    def remaining_iterations(self, job: JobView) -> float:
        app = load_app(job.app)
        if self.batch_scaling:
            return app.target_progress - app.epoch_bounds[job.epoch]
        last = app.max_epochs - 1
        if job.epoch >= last:
            return 1.0
        # One epoch short (to row E-1, not the end), exactly as the artifact codes it.
        return app.iterations(job.batch_size, last) - app.iterations(job.batch_size, job.epoch)
