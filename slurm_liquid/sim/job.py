"""One simulated job: trains by the measured traces while it holds GPUs (SIMULATOR.md 3.4-4)."""

from __future__ import annotations

from slurm_liquid.views import Allocation
from slurm_liquid.sim.apps import AppModel, BatchConfig
from slurm_liquid.sim.workload import JobSpec


class SimJob:
    """Mutable state of one job; the engine drives it, policies only see `JobView`s of it."""

    __slots__ = ("spec", "index", "app", "max_gpus", "time_limit", "allocation", "counts", "config",
                 "iter_time", "rescale_left", "progress", "epoch", "completion", "attained", "restarts",
                 "started_at", "slowdown", "scales_batch", "changes", "_rate_key", "_rate")

    def __init__(self, spec: JobSpec, index: int, app: AppModel, max_gpus: int | None,
                 time_limit: float | None, scales_batch: bool = False) -> None:
        self.spec = spec
        self.index = index
        self.app = app
        self.max_gpus = max_gpus
        self.time_limit = time_limit
        self.allocation: Allocation = ()
        self.counts: tuple[int, ...] = ()
        self.config: BatchConfig | None = None
        self.iter_time = 0.0
        self.rescale_left = 0.0
        self.progress = 0.0
        self.epoch = 0
        self.completion: float | None = None
        self.attained = 0.0
        self.restarts: int | None = None
        self.started_at: float | None = None
        self.slowdown = 0.0  # cross-switch slowdown of the current allocation
        self.scales_batch = scales_batch  # picks its goodput-best batch at every start and epoch
        self.changes: tuple[float, ...] = ()  # when it was moved while it ran (the daemon's change limits)
        self._rate_key: tuple | None = None
        self._rate = 0.0

    @property
    def gpus(self) -> int:
        return sum(self.counts)

    @property
    def done(self) -> bool:
        return self.completion is not None

    def reallocate(self, allocation: Allocation, now: float, penalty: float, slowdown: float) -> None:
        """Move to `allocation` (empty: suspend). Every non-empty move pays the restart penalty."""
        if self.allocation and allocation:
            self.changes = (*self.changes[-15:], now)
        self.allocation = allocation
        self.counts = tuple(g for _, g in allocation)
        self._rate_key = None
        if not allocation:
            self.config = None
            self.started_at = None
            return
        self._configure()
        self.rescale_left = penalty
        self.restarts = 0 if self.restarts is None else self.restarts + 1
        self.started_at = now
        self.slowdown = slowdown

    def _configure(self) -> None:
        if self.scales_batch:
            self.config = self.app.goodput_config(self.counts, self.epoch)
        else:
            self.config = self.app.batch_config(self.spec.batch_size, sum(self.counts))
        self.iter_time = self.app.iteration_time(self.counts, self.config)

    def _rate_now(self, factor: float) -> float:
        key = (self.epoch, factor)
        if key != self._rate_key:
            self._rate = self.app.gain(self.config.batch, self.epoch) / self.iter_time * factor
            self._rate_key = key
        return self._rate

    def advance(self, clock: float, seconds: float, interference: float = 0.0) -> float:
        """Train for `seconds` from `clock`; returns the progress made (in progress units)."""
        if not self.counts or self.completion is not None:
            return 0.0
        gpus = sum(self.counts)
        delay = min(self.rescale_left, seconds)
        self.rescale_left -= delay
        self.attained += delay * gpus
        clock += delay
        seconds -= delay
        boundaries = self.app.epoch_bounds
        last = self.app.max_epochs
        before = self.progress
        factor = (1.0 - interference) * (1.0 - self.slowdown)
        while seconds > 0 and self.completion is None:
            rate = self._rate_now(factor)
            target = boundaries[self.epoch + 1]
            if self.progress + rate * seconds < target:
                self.progress += rate * seconds
                self.attained += seconds * gpus
                break
            # The artifact rounds epoch crossings to whole seconds (half to even).
            delta = round((target - self.progress) / rate)
            self.epoch += 1
            self.progress = target
            self.attained += delta * gpus
            if self.epoch == last:
                self.completion = clock + delta
            elif self.scales_batch:  # the gradient statistics change with the epoch, so may the best batch
                self._configure()
            clock += delta
            seconds -= delta
        return self.progress - before
