"""MeasuredSpeedModel: each job's speed fitted from its own progress reports, with a prior.

A report is a claim (the job's user writes it): `check` refuses anything implausible before it is
stored, and what is stored is bounded (`max_observations` widths per job, each a running average,
so a job that reports every second weighs no more than one that reports every minute). Each job's
ThroughputParams are refitted only when its averages moved (a new width, or a mean that moved by
more than REFIT_TOLERANCE), lazily when a policy next asks: a slot over hundreds of jobs that
merely repeat their speeds refits nothing.

What a policy may trust is explicit: `reach` is the widest GPU count it may give a job now (one
step past the widest width the job was measured at), `source` says whether an answer is measured
or the prior's.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from slurm_liquid.views import JobView
from slurm_liquid.speed.fit import Points, fit_many
from slurm_liquid.speed.journal import SpeedJournal
from slurm_liquid.speed.params import ThroughputParams
from slurm_liquid.speed.prior import Prior

log = logging.getLogger(__name__)

MAX_GPUS = 4096
MAX_SAMPLES_PER_S = 1e7
MAX_BATCH = 10 ** 8
MIN_STEP_S, MAX_STEP_S = 1e-5, 86400.0     # a claimed step outside these is not a measurement
MAX_CLAIM = 10 ** 15                        # steps and totals (as progress.MAX_CLAIM)
MAX_JOB_ID = 64
AVERAGE_OVER = 16       # a width's average weighs at most this many past reports (it follows drift)
REFIT_TOLERANCE = 0.02  # log step time: a mean that moved less than ~2% since the last fit is not refitted
MAX_JOBS = 100_000


@dataclass(frozen=True, slots=True)
class Observation:
    """One progress report, read as a claim: `samples_per_s` at global batch `batch` on `gpus`
    GPUs over `nodes` nodes (the allocation as Slurm sees it), at time `at` (seconds)."""

    job: str
    gpus: int
    nodes: int
    batch: int
    samples_per_s: float
    at: float


def _int(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high    # not bool, not a float that looks whole


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check(obs: Observation, gpus_per_node: int | None = None) -> str | None:
    """Why `obs` is not believed, or None when it is plausible."""
    if not isinstance(obs.job, str) or not 0 < len(obs.job) <= MAX_JOB_ID or not obs.job.isprintable():
        return "job id must be a short printable string"
    if not _int(obs.gpus, 1, MAX_GPUS):
        return f"gpus must be an integer in 1..{MAX_GPUS}"
    if not _int(obs.nodes, 1, obs.gpus):
        return "nodes must be an integer in 1..gpus"
    if gpus_per_node and obs.gpus > obs.nodes * gpus_per_node:
        return f"{obs.gpus} GPUs cannot fit on {obs.nodes} node(s) of {gpus_per_node}"
    if not _int(obs.batch, 1, MAX_BATCH):
        return f"batch must be an integer in 1..{MAX_BATCH}"
    if not _real(obs.samples_per_s) or not 0 < obs.samples_per_s <= MAX_SAMPLES_PER_S:
        return f"samples_per_s must be finite, positive and at most {MAX_SAMPLES_PER_S:g}"
    step = obs.batch / obs.samples_per_s
    if not MIN_STEP_S <= step <= MAX_STEP_S:
        return f"a step of {step:.3g} s at batch {obs.batch} is not plausible"
    if not _real(obs.at) or abs(obs.at) > 1e11:
        return "at must be a finite time"
    return None


@dataclass
class _Width:
    count: int
    mean: float       # mean log step time (seconds)
    at: float         # last report


@dataclass
class _Job:
    widths: dict[tuple[int, int, int], _Width] = field(default_factory=dict)
    step: int | None = None
    total: int | None = None
    batch: int | None = None               # the latest observed batch
    app: str | None = None                 # as the policy's JobView names it (for the prior)
    job_batch: int | None = None           # the batch the policy's JobView gives
    fitted: ThroughputParams | None = None
    vector: np.ndarray | None = None       # the last fit, where a refit starts
    at_fit: dict[tuple[int, int, int], float] = field(default_factory=dict)
    fit_key: tuple | None = None           # (app, batch) the last fit used
    dirty: bool = True
    updated: float = 0.0

    @property
    def measured(self) -> bool:
        return bool(self.widths)


class MeasuredSpeedModel:
    """A `views.SpeedModel` fitted from the jobs' own reports (see the module docstring)."""

    def __init__(self, gpus_per_node: int, prior: Prior | None = None,
                 journal: str | os.PathLike[str] | None = None, max_observations: int = 64,
                 *, compact_after: int = 50_000, across_nodes: float | None = 1.1) -> None:
        self.gpus_per_node = max(int(gpus_per_node), 1)
        self.prior = prior if prior is not None else Prior.default()
        self.max_observations = max(int(max_observations), 1)
        self.compact_after = max(int(compact_after), 1)
        self._compact_at = self.compact_after
        # A job measured on one node only is predicted across nodes with this ratio of cross- to in-node
        # sync (Pollux's 1.1: optimistic, so that a policy tries one node more and learns); None: with
        # the prior's ratio (3.7 to 6.1 in the traces). See speed/fit.py.
        self.across_nodes = across_nodes
        self.fits = 0                       # how many fits ran (for benchmarks and tests)
        self._jobs: dict[str, _Job] = {}
        self._dirty: set[str] = set()       # jobs whose averages moved since their last fit
        self._warned: set[str] = set()
        self.journal = SpeedJournal(journal) if journal is not None else None
        if self.journal is not None:
            self._replay()

    # -- observations ------------------------------------------------------------------------------
    def observe(self, obs: Observation, step: int | None = None, total: int | None = None, *,
                model: str | None = None) -> bool:
        """Store one report; False (and nothing stored) when it is not plausible. `model` (the
        trusted model name, optional) chooses the prior now instead of at the policy's first question."""
        why = check(obs, self.gpus_per_node)
        if why is None and not (step is None or _int(step, 0, MAX_CLAIM)):
            why = f"step must be an integer in 0..{MAX_CLAIM}"
        if why is None and not (total is None or _int(total, 1, MAX_CLAIM)):
            why = f"total must be an integer in 1..{MAX_CLAIM}"
        if why is None and not (model is None or (isinstance(model, str) and len(model) <= 200)):
            why = "model must be a name of at most 200 characters"
        if why is not None:
            self._refuse(obs.job if isinstance(obs.job, str) else "?", why)
            return False
        self._store(obs.job, obs.gpus, obs.nodes, obs.batch, math.log(obs.batch / obs.samples_per_s), 1,
                    float(obs.at))
        if step is not None or total is not None:
            self._progress(obs.job, step, total)
        if model is not None:
            self._name(obs.job, model, None)
        if self.journal is not None:
            record = {"j": obs.job, "g": obs.gpus, "n": obs.nodes, "b": obs.batch,
                      "s": float(obs.samples_per_s), "t": float(obs.at)}
            if model is not None:
                record["m"] = model
            if step is not None:
                record["step"] = step
            if total is not None:
                record["total"] = total
            self.journal.append(record)
            self._maybe_compact()
        return True

    def record_progress(self, job_id: str, step: int | None, total: int | None) -> bool:
        """A report with steps but no speed (samples_per_s missing): only remaining_iterations uses it."""
        if not isinstance(job_id, str) or not 0 < len(job_id) <= MAX_JOB_ID or not job_id.isprintable() \
                or not (step is None or _int(step, 0, MAX_CLAIM)) or not (total is None or _int(total, 1, MAX_CLAIM)):
            return False
        self._progress(job_id, step, total)
        if self.journal is not None:
            self.journal.append({"j": job_id, "step": step, "total": total})
            self._maybe_compact()
        return True

    def forget(self, job_id: str) -> None:
        """A finished job: drop its observations (its journal lines go at the next compaction)."""
        self._dirty.discard(job_id)
        if self._jobs.pop(job_id, None) is not None and self.journal is not None:
            self.journal.append({"forget": job_id})
            self._maybe_compact()

    def _refuse(self, job: str, why: str) -> None:
        if job not in self._warned and len(self._warned) < 10_000:
            self._warned.add(job)
            log.warning("job %s: speed report not believed: %s", job[:MAX_JOB_ID], why)

    def _job(self, job_id: str) -> _Job:
        state = self._jobs.get(job_id)
        if state is None:
            if len(self._jobs) >= MAX_JOBS:   # jobs never forgotten (a daemon that lost track): drop the stalest
                stalest = min(self._jobs, key=lambda k: self._jobs[k].updated)
                del self._jobs[stalest]
                self._dirty.discard(stalest)
            state = self._jobs[job_id] = _Job()
        return state

    def _store(self, job_id: str, gpus: int, nodes: int, batch: int, log_t: float, count: int, at: float) -> None:
        state = self._jobs.get(job_id) or self._job(job_id)
        key = (gpus, nodes, batch)
        width = state.widths.get(key)
        if width is None:
            if len(state.widths) >= self.max_observations:
                del state.widths[min(state.widths, key=lambda k: state.widths[k].at)]
            width = state.widths[key] = _Width(count, log_t, at)
        else:
            held = width.count if width.count < AVERAGE_OVER else AVERAGE_OVER
            width.mean += (log_t - width.mean) * count / (held + count)
            width.count += count
            if at > width.at:
                width.at = at
        if at >= state.updated:
            state.batch = batch
            state.updated = at
        before = state.at_fit.get(key)
        if before is None or abs(width.mean - before) > REFIT_TOLERANCE:
            state.dirty = True
            self._dirty.add(job_id)

    def _progress(self, job_id: str, step: int | None, total: int | None) -> None:
        state = self._jobs.get(job_id) or self._job(job_id)
        if step is not None:
            state.step = step
        if total is not None:
            state.total = total

    def _name(self, job_id: str, app: str | None, batch: int | None) -> _Job:
        """Remember the model and batch the policy (or the daemon) gives for a job: its prior."""
        state = self._job(job_id)
        if app is not None and state.app != app or batch is not None and state.job_batch != batch:
            state.app = app if app is not None else state.app
            state.job_batch = batch if batch is not None else state.job_batch
            if state.measured and state.fit_key != (state.app, self._batch(state)):
                state.dirty = True
                self._dirty.add(job_id)
        return state

    # -- the journal -------------------------------------------------------------------------------
    def _replay(self) -> None:
        assert self.journal is not None
        # The GPUs-per-node bound was checked when each line was observed; the daemon learns its nodes
        # only after it starts (it builds the model with 1), so replay does not check it again.
        log, store = math.log, self._store
        for record in self.journal.load():
            job = record.get("j")
            g = record.get("g")
            if g is not None:
                # the journal is root's, but a line is only believed as a report would be (check(),
                # written out here: a daemon restart reads 100k lines)
                n, b, sps, at, count = record.get("n"), record.get("b"), record.get("s"), record.get("t"), \
                    record.get("k", 1)
                if not (type(job) is str and 0 < len(job) <= MAX_JOB_ID and type(g) is int and 0 < g <= MAX_GPUS
                        and type(n) is int and 0 < n <= g and type(b) is int
                        and 0 < b <= MAX_BATCH and type(sps) in (float, int) and 0 < sps <= MAX_SAMPLES_PER_S
                        and MIN_STEP_S <= b / sps <= MAX_STEP_S and type(at) in (float, int) and -1e11 <= at <= 1e11
                        and type(count) is int and 0 < count <= MAX_CLAIM and job.isprintable()):
                    continue
                store(job, g, n, b, log(b / sps), count, float(at))
                model = record.get("m")
                if model is not None and type(model) is str and len(model) <= 200:
                    self._name(job, model, None)
            elif "forget" in record:
                gone = record["forget"]
                if type(gone) is str:
                    self._jobs.pop(gone, None)
                    self._dirty.discard(gone)
                continue
            step, total = record.get("step"), record.get("total")
            if (step is not None or total is not None) and type(job) is str and 0 < len(job) <= MAX_JOB_ID \
                    and (step is None or _int(step, 0, MAX_CLAIM)) and (total is None or _int(total, 1, MAX_CLAIM)):
                self._progress(job, step, total)
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        """Rewrite the journal from the state once it holds more than twice the live lines (and more
        than `compact_after`); the bound is recomputed then, so a report costs O(1) in between."""
        journal = self.journal
        if journal is None or journal.broken or journal.lines <= self._compact_at:
            return
        live = sum(len(s.widths) + 1 for s in self._jobs.values())
        if journal.lines > 2 * live:
            journal.rewrite(self._records())
        self._compact_at = max(self.compact_after, 2 * live)

    def _records(self):
        for job_id, state in self._jobs.items():
            for (gpus, nodes, batch), width in state.widths.items():
                record = {"j": job_id, "g": gpus, "n": nodes, "b": batch, "s": batch / math.exp(width.mean),
                          "t": width.at, "k": width.count}
                if state.app is not None:
                    record["m"] = state.app
                yield record
            if state.step is not None or state.total is not None:
                yield {"j": job_id, "step": state.step, "total": state.total}

    # -- answers -----------------------------------------------------------------------------------
    def params(self, job: JobView) -> ThroughputParams:
        """The job's ThroughputParams: fitted when it has reported, else the prior's."""
        state = self._name(job.id, job.app, job.batch_size if job.batch_size and job.batch_size > 0 else None)
        if not state.measured:
            return self.prior.params(state.app, self._batch(state))[0]
        if state.dirty or state.fitted is None or state.fit_key != (state.app, self._batch(state)):
            self._dirty.add(job.id)
            self.refit()
        assert state.fitted is not None
        return state.fitted

    def prepare(self, jobs: Iterable[JobView]) -> int:
        """Take each job's model and batch from the policy's view and fit all that need it at once
        (one batched fit instead of one per first question); how many were fitted."""
        for job in jobs:
            self._name(job.id, job.app, job.batch_size if job.batch_size and job.batch_size > 0 else None)
        return self.refit()

    def refit(self) -> int:
        """Fit every job whose averages moved since its last fit, all at once; how many were fitted.
        Called by the first question about such a job; a caller may call it ahead of a slot."""
        pending = [(job_id, self._jobs[job_id]) for job_id in self._dirty if job_id in self._jobs]
        pending = [(job_id, state) for job_id, state in pending if state.measured]
        problems = []
        for _, state in pending:
            keys = list(state.widths)
            # the latest batch last: the prior's network floor is taken at it
            keys.sort(key=lambda k: k[2] == state.batch)
            widths = [state.widths[k] for k in keys]
            held = np.array([min(w.count, AVERAGE_OVER) for w in widths], dtype=float)
            points = Points(np.array([k[0] for k in keys], dtype=float), np.array([k[1] for k in keys], dtype=float),
                            np.array([k[2] for k in keys], dtype=float), np.array([w.mean for w in widths]),
                            held / (held + 1))
            key = (state.app, self._batch(state))
            start = state.vector if state.fit_key == key else None
            problems.append((points, self.prior.params(*key)[0], start))
            state.fit_key = key
            state.at_fit = {k: w.mean for k, w in zip(keys, widths)}
        for (_, state), params in zip(pending, fit_many(problems, self.across_nodes)):
            state.fitted, state.vector, state.dirty = params, params.to_vector(), False
        self._dirty.clear()
        self.fits += len(pending)
        return len(pending)

    @staticmethod
    def _batch(state: _Job) -> int | None:
        return state.job_batch or state.batch

    def iteration_time(self, job: JobView, gpus: int) -> float:
        """Seconds per step of `job` at its batch on `gpus` GPUs packed onto whole nodes."""
        g = max(int(gpus), 1)
        return self._step_time(job, g, -(-g // self.gpus_per_node))

    def placed_iteration_time(self, job: JobView, placement: Sequence[int]) -> float:
        """Seconds per step of `job` at its batch on GPUs spread as `placement` (GPUs on each node)."""
        used = [int(g) for g in placement if g > 0]
        return self._step_time(job, max(sum(used), 1), max(len(used), 1))

    def _step_time(self, job: JobView, gpus: int, nodes: int) -> float:
        params = self.params(job)
        return params.step_time(gpus, nodes, self._batch(self._jobs[job.id]) or 1)

    def remaining_iterations(self, job: JobView) -> float:
        """Steps left: the job's latest report of step and total, else the prior's guess."""
        state = self._name(job.id, job.app, job.batch_size if job.batch_size and job.batch_size > 0 else None)
        if state.step is not None and state.total is not None:
            return float(max(state.total - state.step, 1))
        return self.prior.remaining(state.app, self._batch(state), job.epoch)

    def reach(self, job: JobView) -> int:
        """The widest GPU count a policy may give `job` now: one step past the widest width it was
        measured at or holds (double it, by at most one node); a job not running and never measured
        starts at most at its request. Never below its minimum, never past its maximum."""
        state = self._jobs.get(job.id)
        if state is not None and state.measured:
            widest = max(max(k[0] for k in state.widths), job.allocated)
        else:
            # Not measured yet: its prior decides, from the width it holds, one step at a time (a job
            # that never reports still grows, only no faster); a job not running starts at its request.
            widest = job.allocated
        limit = min(2 * widest, widest + self.gpus_per_node) if widest else job.gpus
        return max(min(limit, job.upper), job.min_gpus, 1)

    def source(self, job_id: str) -> str:
        """"measured (N obs, widths 1,2,4)" or the prior's label, for the record and the logs."""
        state = self._jobs.get(job_id)
        if state is not None and state.measured:
            count = sum(w.count for w in state.widths.values())
            widths = ",".join(str(g) for g in sorted({k[0] for k in state.widths}))
            return f"measured ({count} obs, widths {widths})"
        if state is None:
            return self.prior.params(None, None)[1]
        return self.prior.params(state.app, self._batch(state))[1]

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
