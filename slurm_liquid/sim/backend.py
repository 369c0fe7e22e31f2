"""The simulator as a back end of the one scheduling loop (`slurm_liquid.loop`).

Besides the cluster view, it reports each training job's speed the way a live job does
(`slurm_liquid.progress`: samples per second on its current allocation, steps done and in all), so
a measured speed model learns in simulation from the same kind of evidence as on the cluster.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Iterator

from slurm_liquid.loop.core import Report, Round
from slurm_liquid.views import ClusterView
from slurm_liquid.sim.job import SimJob

if TYPE_CHECKING:   # the engine runs a back end of its own; a type, not an import cycle
    from slurm_liquid.sim.engine import Simulator


@lru_cache(maxsize=4096)
def _epoch_steps(app, batch: int) -> tuple[float, ...]:
    """Cumulative optimizer steps at `batch` at the start of each epoch, and at the end."""
    steps = [0.0]
    for e in range(app.max_epochs):
        steps.append(steps[-1] + (app.epoch_bounds[e + 1] - app.epoch_bounds[e]) / app.gain(batch, e))
    return tuple(steps)


def steps_done(job: SimJob) -> tuple[int, int]:
    """(optimizer steps done, steps in all) at the batch the job trains at now, as its progress report
    says: each epoch's progress over the statistical gain of one step at that batch."""
    app = job.app
    batch = int(job.config.batch) if job.config is not None else job.spec.batch_size
    epoch = min(job.epoch, app.max_epochs - 1)
    cumulative = _epoch_steps(app, batch)
    done = cumulative[epoch] + max(job.progress - app.epoch_bounds[epoch], 0.0) / app.gain(batch, epoch)
    return int(done), max(int(cumulative[-1]), 1)


class SimBackend:
    """Drives one `Simulator` run; `reports()` lists the jobs that trained in the last slot."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.view: ClusterView | None = sim.reset()

    def observe(self) -> ClusterView | None:
        return self.view

    def apply(self, done: Round) -> None:
        self.view = self.sim.step(done.actions)

    def reports(self) -> Iterator[Report]:
        from slurm_liquid.speed import Observation

        for job in self.sim.active:
            # A job still paying its restart has made no step on this allocation yet.
            if not job.counts or job.rescale_left > 0 or job.config is None or job.iter_time <= 0:
                continue
            factor = 1.0 - job.slowdown
            step, total = steps_done(job)
            yield Report(job.spec.name,
                         Observation(job=job.spec.name, gpus=job.gpus, nodes=len(job.counts),
                                     batch=int(job.config.batch),
                                     samples_per_s=job.config.batch / job.iter_time * factor, at=self.sim.clock),
                         step, total, job.spec.application)
