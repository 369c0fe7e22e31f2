"""slurm-liquid progress reports and resizes for the Hugging Face Trainer.

    from slurm_liquid.integrations.huggingface import LiquidCallback, resume_checkpoint

    trainer = Trainer(model, args, train_dataset=..., callbacks=[LiquidCallback()])
    trainer.train(resume_from_checkpoint=resume_checkpoint())

The callback reports the step (`state.global_step` of `state.max_steps`), the epoch and the samples per
second it measures itself (its own step timestamps x the global batch: per-device batch x gradient
accumulation x world size). When the daemon asks for a checkpoint (SIGUSR1) every rank agrees at the
next optimizer step, the Trainer saves its usual `checkpoint-<step>` folder (`control.should_save`),
the callback reports that folder and stops the training (`control.should_training_stop`), and waits for
the requeue. Every checkpoint the Trainer saves for its own reasons is reported too, so a job requeued
for any reason resumes from its newest. Only the main process writes reports; they are rate-limited
by `progress.Reporter`, and a failing report never stops the training.

`args.output_dir` must be on a file system every node shares: the job may restart on other nodes.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as err:  # one message that says what to install
    raise ImportError("slurm_liquid.integrations.huggingface needs the Hugging Face `transformers` library "
                      f"(pip install transformers): {err}") from err

from slurm_liquid import progress
from slurm_liquid.integrations._common import (REQUEUE_WAIT_S, Throughput, finite_int, hint_resume, quietly,
                                               resume_checkpoint, wait_for_requeue)
from slurm_liquid.progress import Reporter, _warn_once

__all__ = ["LiquidCallback", "resume_checkpoint"]

RESUME_HOW = "trainer.train(resume_from_checkpoint=slurm_liquid.integrations.huggingface.resume_checkpoint())"


def any_rank(flag: bool) -> bool:
    """True on every rank if it is True on any: the signal may reach ranks at different steps, and a save
    or a stop on some ranks only would hang the others. One one-element all-reduce per step."""
    dist = sys.modules.get("torch.distributed")  # the Trainer imported torch; never import it here
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return flag
    torch = sys.modules["torch"]
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    votes = torch.tensor([int(flag)], device=device)
    dist.all_reduce(votes, op=dist.ReduceOp.MAX)
    return bool(votes.item())


def world_size(args: TrainingArguments) -> int:
    try:
        return max(int(args.world_size), 1)
    except ImportError:  # TrainingArguments asks torch; without it (no training possible) the launcher's env
        value = os.environ.get("WORLD_SIZE", "")
        return int(value) if value.isdigit() and int(value) > 0 else 1


def global_batch(args: TrainingArguments, state: TrainerState) -> int:
    """Samples per optimizer step over all ranks. `state.train_batch_size` is the Trainer's per-process
    batch (x GPUs under DataParallel, after auto_find_batch_size), set when training starts."""
    per_process = getattr(state, "train_batch_size", None) or args.per_device_train_batch_size
    return int(per_process) * max(int(args.gradient_accumulation_steps), 1) * world_size(args)


class LiquidCallback(TrainerCallback):
    """See the module docstring. `requeue_wait_s`: how long to wait for the requeue after stopping;
    `reporter` and `clock`: for tests (a `progress.Reporter`, a monotonic clock)."""

    def __init__(self, *, requeue_wait_s: float = REQUEUE_WAIT_S, reporter: Reporter | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        # Catch SIGUSR1 now, before the model loads: its default action would kill the job.
        progress.install()
        self.requeue_wait_s = requeue_wait_s
        self.reporter = reporter or Reporter()
        self.meter = Throughput(clock)
        self._clock, self._sleep = clock, sleep
        self.saving = False    # the daemon asked; the Trainer saves at the end of this step
        self.stopping = False  # saved: training stops, then waits for the requeue

    def _report(self, state: TrainerState, **extra: Any) -> bool:
        if not state.is_world_process_zero:
            return False
        with quietly("progress report"):
            return self.reporter.report(state.global_step, finite_int(state.max_steps) or None,
                                        epoch=finite_int(state.epoch), **extra)
        return False

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        self.meter.restart()
        self.saving = self.stopping = False
        if state.is_world_process_zero:
            with quietly("resume check"):
                hint_resume(state.global_step, RESUME_HOW)
        self._report(state)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl:
        if any_rank(progress.checkpoint_requested()):
            progress.clear()  # before the save: a request arriving during it is not lost
            self.saving = True
        if self.saving:  # again while not saved: save_strategy="best" drops it at steps that are no new best
            control.should_save = True
        rate = None
        with quietly("throughput"):
            rate = self.meter.tick(global_batch(args, state))
        if self._report(state, samples_per_s=rate):
            self.meter.written()
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> TrainerControl:
        # Trainer._save_checkpoint has written <output_dir>/checkpoint-<global_step> before this call.
        path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if state.is_world_process_zero:
            if os.path.isdir(path):
                self._report(state, checkpoint=os.path.abspath(path))
            else:
                _warn_once("hf-no-checkpoint", f"the Trainer's checkpoint is not at {path} (a hyperparameter "
                           "search run directory?); it is not reported, so a resize restarts from the last one")
        self.meter.restart()
        if self.saving:
            self.saving, self.stopping = False, True
            control.should_training_stop = True
        return control

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> TrainerControl:
        if self.stopping:  # the checkpoint is saved: no second save or evaluation at this same step
            control.should_save = control.should_evaluate = False
        return control

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        self.meter.restart()

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        if self.stopping:
            wait_for_requeue(self.requeue_wait_s, clock=self._clock, sleep=self._sleep)
        elif state.is_world_process_zero:
            with quietly("progress report"):
                self.reporter.report(state.global_step, finite_int(state.max_steps) or None,
                                     epoch=finite_int(state.epoch), force=True)
