"""The Lightning callback's body, built on whichever `Callback` base it is given (lightning.pytorch,
pytorch_lightning, or a stand-in in the tests), so that it can be tested without torch.

The hooks and Trainer attributes used are those of Lightning 2.x (2.0 to 2.5 have the same ones):
on_train_start(trainer, pl_module), on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx),
on_validation_end(trainer, pl_module), on_train_end(trainer, pl_module); trainer.global_step,
max_steps, estimated_stepping_batches, current_epoch, world_size, is_global_zero, should_stop,
save_checkpoint(path), default_root_dir, checkpoint_callback, strategy.reduce_boolean_decision(decision,
all=...). Source: https://github.com/Lightning-AI/pytorch-lightning/blob/759eefc3ed1ffc3e4623f9e4cf72c766dd74c252/src/lightning/pytorch/callbacks/callback.py
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from slurm_liquid import progress
from slurm_liquid.integrations._common import (REQUEUE_WAIT_S, Throughput, batch_len, finite_int, hint_resume,
                                               quietly, wait_for_requeue)
from slurm_liquid.progress import Reporter, _warn_once

RESUME_HOW = "trainer.fit(model, ckpt_path=slurm_liquid.integrations.lightning.resume_checkpoint())"
PREFIX = "slurm-liquid-"


def checkpoint_name(step: int) -> str:
    """`slurm-liquid-<job>-step<N>.ckpt`: a new file per checkpoint, so a save cut short by the requeue
    never damages the one the last report names; the job id keeps jobs sharing a folder apart."""
    job = progress.current_job_id()
    return f"{PREFIX}{'' if job is None else f'{job}-'}step{step}.ckpt"


def callback_class(base: type) -> type:
    """The LiquidCallback class on top of Lightning's `Callback` (`base`)."""

    class LiquidCallback(base):  # type: ignore[misc, valid-type]
        """Reports steps, samples per second and checkpoints to slurm-liquid; on its checkpoint request,
        saves `slurm-liquid-<job>-step<N>.ckpt` in `dirpath` (default: the ModelCheckpoint's folder, else
        `<default_root_dir>/checkpoints`), reports it, stops the training and waits for the requeue.

        `batch_size`: samples per batch on one process, when they cannot be read off the batch (the first
        dimension of its first tensor). `requeue_wait_s`, `reporter`, `clock`, `sleep`: see the HF one."""

        def __init__(self, dirpath: str | os.PathLike[str] | None = None, *, batch_size: int | None = None,
                     requeue_wait_s: float = REQUEUE_WAIT_S, reporter: Reporter | None = None,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> None:
            super().__init__()
            # Now, before fit(): SIGUSR1's default action would kill the job, and Lightning's own SLURM
            # auto-requeue (which would requeue the job itself, outside the daemon's resize) registers
            # only where no SIGUSR1 handler is installed yet.
            progress.install()
            self.dirpath = None if dirpath is None else os.fspath(dirpath)
            self.batch_size = batch_size
            self.requeue_wait_s = requeue_wait_s
            self.reporter = reporter or Reporter()
            self.meter = Throughput(clock)
            self._clock, self._sleep = clock, sleep
            self._total: int | None = None
            self._seen_step: int | None = None
            self._saved: str | None = None   # the checkpoint this callback last reported
            self.stopping = False

        # -- reporting ----------------------------------------------------------------------------

        def _report(self, trainer: Any, **extra: Any) -> bool:
            if not trainer.is_global_zero:
                return False
            with quietly("progress report"):
                return self.reporter.report(trainer.global_step, self._total,
                                            epoch=finite_int(trainer.current_epoch), **extra)
            return False

        def _find_total(self, trainer: Any) -> int | None:
            if finite_int(trainer.max_steps):  # -1: not set
                return finite_int(trainer.max_steps)
            with quietly("estimated_stepping_batches"):
                return finite_int(trainer.estimated_stepping_batches) or None  # inf with an endless loader
            return None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.meter.restart()
            self.stopping = False
            self._seen_step = trainer.global_step
            self._total = self._find_total(trainer)
            if trainer.is_global_zero:
                with quietly("resume check"):
                    hint_resume(trainer.global_step, RESUME_HOW)
                    self._saved = progress.resume().checkpoint
            self._report(trainer)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            rate = None
            with quietly("throughput"):
                per_process = self.batch_size or batch_len(batch)
                rate = self.meter.tick(None if per_process is None else per_process * max(trainer.world_size, 1))
            if self._report(trainer, samples_per_s=rate):
                self.meter.written()
            # Decide only where an optimizer step just ended (not between accumulated batches): every rank
            # passes here at the same steps, which the collective below needs.
            if self.stopping or trainer.global_step == self._seen_step:
                return
            self._seen_step = trainer.global_step
            if trainer.strategy.reduce_boolean_decision(progress.checkpoint_requested(), all=False):
                progress.clear()  # before the save: a request arriving during it is not lost
                self._checkpoint_and_stop(trainer)

        def _checkpoint_and_stop(self, trainer: Any) -> None:
            folder = self.dirpath or getattr(trainer.checkpoint_callback, "dirpath", None) \
                or os.path.join(trainer.default_root_dir, "checkpoints")
            path = os.path.abspath(os.path.join(folder, checkpoint_name(trainer.global_step)))
            try:
                trainer.save_checkpoint(path)  # on every rank: strategies with sharded state need them all
            except Exception as err:  # noqa: BLE001 - a crash now would end the job instead of resizing it
                _warn_once("lightning-save", f"cannot save the checkpoint {path} ({type(err).__name__}: {err}); "
                           "the job restarts from its previous checkpoint")
            else:
                if self._report(trainer, checkpoint=path):
                    self._drop_previous(path)
            # Stop whether or not the save worked: the daemon requeues the job anyway once its grace ends.
            trainer.should_stop = True
            self.stopping = True

        def _drop_previous(self, path: str) -> None:
            """Remove the checkpoint the last report named, now that none does, if this callback made it."""
            old, self._saved = self._saved, path
            # A file only: sharded strategies save folders, left to the user.
            if old and old != path and os.path.basename(old).startswith(PREFIX) \
                    and os.path.dirname(old) == os.path.dirname(path) and os.path.isfile(old):
                with quietly("removing the previous checkpoint"):
                    os.unlink(old)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            self.meter.restart()  # validation inside an epoch is not training time

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.stopping:
                wait_for_requeue(self.requeue_wait_s, clock=self._clock, sleep=self._sleep)
            elif trainer.is_global_zero:
                with quietly("progress report"):
                    self.reporter.report(trainer.global_step, self._total,
                                         epoch=finite_int(trainer.current_epoch), force=True)

    LiquidCallback.__module__ = "slurm_liquid.integrations.lightning"
    return LiquidCallback
