"""What the Hugging Face and Lightning callbacks share (standard library only).

A resize, as the callbacks see it: the daemon sends SIGUSR1; at the next optimizer step every rank
agrees to checkpoint (the signal may reach the ranks at different steps); the checkpoint is saved and
reported; training stops; the process then waits for the daemon's requeue, which comes about a second
after the report. It must not exit by itself meanwhile: a job that ends before the requeue is
COMPLETED, not resized (docs/elastic.md). After the requeue `resume_checkpoint()` names the checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Mapping
from typing import Any, Callable, Iterator

from slurm_liquid import progress
from slurm_liquid.progress import _warn_once

# The daemon requeues within a turn of its loop (about a second) of the checkpoint report, or after the
# job's grace (at most [elastic] max_grace_s, 300 s shipped); a daemon restart keeps the open resize.
REQUEUE_WAIT_S = 600.0


def resume_checkpoint() -> str | None:
    """The checkpoint this job last reported (Slurm keeps the job id across a requeue), or None:
    on a first start, outside Slurm, or when the reported path is gone (then said once on stderr).
    Pass it to `Trainer.train(resume_from_checkpoint=...)` or `Trainer.fit(ckpt_path=...)`."""
    start = progress.resume()
    if start.checkpoint is None:
        return None
    if not os.path.exists(start.checkpoint):
        _warn_once("resume-missing", f"the checkpoint this job reported, {start.checkpoint} (step {start.step}), "
                   "does not exist here (is it on a file system every node shares?); training starts afresh")
        return None
    return start.checkpoint


def hint_resume(step_now: int, how: str) -> None:
    """Say once when a job that reported a checkpoint starts training before it: the user forgot to
    pass the checkpoint to the library, and every resize would restart the training."""
    start = progress.resume()
    if start.checkpoint is not None and step_now < start.step:
        _warn_once("resume-hint", f"this job reported a checkpoint at step {start.step} ({start.checkpoint}) "
                   f"but training starts at step {step_now}; to resume after a resize use {how}")


@contextlib.contextmanager
def quietly(what: str) -> Iterator[None]:
    """Progress reporting must never stop the training: an unexpected error is said once, then ignored."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - whatever it is, the training goes on
        _warn_once("callback-" + what, f"{what} failed ({type(err).__name__}: {err}); training goes on")


class Throughput:
    """Samples per second since the last written report, from the callback's own step timestamps
    (not the library's logs, which may be off or rare). The first step after a start, an evaluation
    or a save opens a window instead of counting, so startup and pauses do not count as training."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._since: float | None = None
        self._last: float | None = None
        self._samples = 0.0

    def restart(self) -> None:
        self._since = None

    def tick(self, samples: float | None) -> float | None:
        """One step of `samples` (None: unknown) ended now; the rate over the window, or None."""
        now = self._last = self.clock()
        if self._since is None or samples is None:
            self._since, self._samples = now, 0.0
            return None
        self._samples += samples
        elapsed = now - self._since
        return self._samples / elapsed if elapsed > 0 else None

    def written(self) -> None:
        """A report went out: the next rate covers the steps after it."""
        if self._last is not None:
            self._since, self._samples = self._last, 0.0


def batch_len(batch: Any, depth: int = 0) -> int | None:
    """Samples in a batch: the first dimension of its first tensor-like (anything with a non-empty
    `shape`), looked for in dicts, lists and tuples; None when there is none."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    if depth > 4:
        return None
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    for value in values:
        found = batch_len(value, depth + 1)
        if found:
            return found
    return None


def finite_int(value: Any) -> int | None:
    """An int from a step count or epoch the library gives (floats, inf for 'unknown'), else None."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return int(value) if math.isfinite(value) and value >= 0 else None


def wait_for_requeue(timeout_s: float = REQUEUE_WAIT_S, *, clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> None:
    """After training stopped at a requested checkpoint: wait for the daemon's requeue (Slurm's SIGTERM)
    instead of returning into the user's script, which would end the job. Outside a Slurm job, no wait.

    SIGTERM gets its default action first: Lightning (and others) catch it and only note it, which
    would keep this process until Slurm's SIGKILL, KillWait later. Nothing is left to save now."""
    if progress.current_job_id() is None or timeout_s <= 0:
        return
    previous = None
    with contextlib.suppress(ValueError, OSError):  # not the main thread: keep the handler there is
        previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _warn_once("requeue-wait", f"training stopped for a resize; waiting up to {timeout_s:.0f} s for slurm-liquid "
               "to requeue this job onto its new GPUs")
    end = clock() + timeout_s
    while (left := end - clock()) > 0:
        sleep(min(left, 1.0))
    if previous is not None:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGTERM, previous)
    _warn_once("requeue-timeout", f"no requeue came within {timeout_s:.0f} s; training stopped early at the "
               "checkpoint, and control returns to the script")
