"""A replica of the DL2 paper's own simulated setting (pengyanghua/DL2), as simulator workloads.

`slurm-liquid simulate --workload dl2-paper-small|dl2-paper-large [--seed N]` runs here instead of
the Pollux engine, because the job model is another one: parameter-server (PS) / worker jobs whose
throughput depends on both counts, not all-reduce jobs on measured placements. What is replicated
(facts read from the public artifact, which has no licence: its numbers and rules, not its code):

- **Jobs**: the paper's 8 job types. A worker needs [2 CPU slots, 4 GPU slots] (cnn-text-
  classification and dssm workers: no GPU), a PS [2 CPU, 0 GPU]; each node has 8 CPU and 8 GPU slots.
  A job of type t has `EPOCH_FRACTION[t] x max_epochs` epochs; in a slot of 1200 s it makes
  speed(PS, workers) x 1200 / `EPOCH_SIZE[t]` of them, where speed is a linear radial-basis
  interpolation (scipy `Rbf`, as the artifact's `speed.py`) of the measured (PS, workers) ->
  samples/s table in `data/dl2/speed.csv` (see its README for the points kept).
- **Time**: 20-minute slots; every slot rebuilds every allocation from nothing, and a change costs
  nothing. A job that finishes inside a slot is charged the fraction of the slot it needed; its JCT
  is (that end - arrival slot) in slots, times 1200 s (the artifact's FINE_GRAIN_JCT).
- **Arrivals**: the artifact's `Google_Trace` pattern (jobs per slot, capped at the setting's
  maximum, read from a random offset in 0-4); the default `Ali_Trace` is empty in the public artifact.
  Job types uniform at random; lengths fixed per type (the artifact's FIX_JOB_LEN).
- **Settings**: small (48 nodes, 60 jobs, at most 3 arrivals per slot, at most 32 workers/PS per job,
  80000 epochs at most, as `params_template.py`) and large (500 nodes, 200 jobs, 10 arrivals,
  16 workers, 30000 epochs, `parameters.py`).
- **Placement**: each task goes to the node with the least used slots (CPU + GPU, ties to the lowest
  id); a policy that fails to place a task there stops for the slot, as the artifact's do.

Policies (`PaperPolicy`): `drf` (the artifact's: one worker + one PS at a time, by dominant share,
up to the worker cap), `optimus` (the artifact's: a worker and a PS first, then the task with the
largest cut in remaining time), `drf-best-split` (a reference: DRF's task counts, split between PS
and workers as the speed table says is fastest), `hull` (a reference and DL2's teacher: a worker and a
PS each, then the tasks that add the most throughput, placed so the least-used-node rule packs them)
and `dl2` (`slurm_liquid.policy.dl2.psworker`).
"""

from __future__ import annotations

import csv
import heapq
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from slurm_liquid.errors import UsageError
from slurm_liquid.sim.engine import SimResult

DATA = Path(__file__).resolve().parent / "data" / "dl2"
SLOT_S = 1200.0  # TS_DURATION
MODELS = ("resnet-50", "vgg-16", "resnext-110", "inception-bn", "seq2seq", "cnn-text-classification", "dssm", "wlm")
EPOCH_SIZE = (115, 115, 390, 120, 780, 193, 349, 165)  # samples per "epoch" (trace.py epoch_sizes)
EPOCH_FRACTION = (0.3, 0.96, 0.05, 0.54, 0.95, 0.46, 0.33, 0.23)  # of max_epochs (trace.py num_epochs)
WORKER_SLOTS = ((2, 4), (2, 4), (2, 4), (2, 4), (2, 4), (2, 0), (2, 0), (2, 4))  # (CPU, GPU) slots
PS_SLOTS = (2, 0)
NODE_SLOTS = 8  # per resource and node
# The artifact's Google_Trace arrival patterns (jobs per slot) for at most 3 and at most 10 per slot.
GOOGLE_ARRIVALS = {
    3: (2, 57, 3, 3, 3, 4, 3, 3, 2, 2, 2, 2, 3, 3, 3, 2, 3, 3, 3, 3, 3, 2, 2, 3, 4, 3, 2, 2, 2, 1, 2, 2, 2, 2, 2,
        2, 3, 3, 1, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 1, 2, 1, 2, 3, 3, 3, 3, 3, 2, 2, 2, 2, 3, 2, 1, 2, 1, 2, 2, 2,
        2, 2, 2, 3, 2),
    10: (6, 134, 8, 7, 8, 10, 9, 7, 6, 5, 6, 5, 7, 8, 9, 6, 8, 8, 8, 8, 7, 5, 5, 7, 9, 7, 5, 5, 5, 3, 5, 6, 4, 6,
         6, 6, 7, 7, 4, 5, 5, 3, 5, 5, 4, 6, 5, 6, 5, 3, 4, 4, 6, 7, 7, 7, 7, 7, 6, 6, 6, 6, 7, 6, 4, 6, 4, 5, 4,
         6, 5, 6, 5, 7, 6),
}


@dataclass(frozen=True)
class PaperSetting:
    name: str
    nodes: int
    jobs: int
    max_arrivals: int
    max_tasks: int  # MAX_NUM_WORKERS: the cap on a job's workers and on its PS
    max_epochs: int
    window: int  # DL2's scheduling window (SCHED_WINDOW_SIZE)


SETTINGS = {
    "dl2-paper-small": PaperSetting("dl2-paper-small", 48, 60, 3, 32, 80_000, 20),
    "dl2-paper-large": PaperSetting("dl2-paper-large", 500, 200, 10, 16, 30_000, 40),
}


@lru_cache(maxsize=None)
def _speed_table(path: Path = DATA / "speed.csv") -> dict[str, object]:
    from scipy.interpolate import Rbf

    points: dict[str, list[tuple[float, float, float]]] = {}
    try:
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                points.setdefault(row["model"], []).append(
                    (float(row["ps"]), float(row["workers"]), float(row["samples_per_s"])))
    except (OSError, KeyError, ValueError) as exc:
        raise UsageError(f"cannot read the DL2 speed table {path}: {exc}") from None
    missing = [m for m in MODELS if m not in points]
    if missing:
        raise UsageError(f"{path}: no speed points for {', '.join(missing)}")
    return {m: Rbf(*np.asarray(pts).T, function="linear") for m, pts in points.items()}


@lru_cache(maxsize=None)
def samples_per_s(model: int, ps: int, workers: int) -> float:
    """Interpolated throughput of `workers` workers and `ps` PS (0 without either; never negative:
    the linear RBF extrapolates beyond the measured 23 tasks and can dip below zero there)."""
    if ps <= 0 or workers <= 0:
        return 0.0
    return max(0.0, float(_speed_table()[MODELS[model]](ps, workers)))


def epochs_per_slot(model: int, ps: int, workers: int) -> float:
    """Epochs a job of type `model` makes in one slot on `ps` PS and `workers` workers."""
    return samples_per_s(model, ps, workers) * SLOT_S / EPOCH_SIZE[model]


@dataclass
class PaperJob:
    """One PS/worker job; `ps`, `workers` are what it holds in the current slot."""

    id: str
    index: int
    model: int
    arrival: int  # slot
    epochs: float
    ps: int = 0
    workers: int = 0
    progress: float = 0.0
    end: float | None = None  # slot time of completion (FINE_GRAIN_JCT)

    def epochs_per_slot(self, ps: int | None = None, workers: int | None = None) -> float:
        ps = self.ps if ps is None else ps
        workers = self.workers if workers is None else workers
        return epochs_per_slot(self.model, ps, workers)

    def remaining(self) -> float:
        return self.epochs - self.progress

    def share(self, nodes: int) -> float:
        """Dominant resource share of what it holds."""
        w, p = WORKER_SLOTS[self.model], PS_SLOTS
        return max((self.workers * w[r] + self.ps * p[r]) / (nodes * NODE_SLOTS) for r in range(2))


def paper_trace(setting: PaperSetting, seed: int = 0) -> list[PaperJob]:
    """The artifact's trace generator (Google_Trace arrivals, types uniform, fixed lengths per type)."""
    if seed < 0:
        raise UsageError(f"--seed must be non-negative, got {seed}")
    rng = np.random.default_rng(seed)
    pattern = GOOGLE_ARRIVALS[setting.max_arrivals]
    offset = int(rng.integers(5))
    jobs: list[PaperJob] = []
    ts = 0
    while len(jobs) < setting.jobs:
        for _ in range(min(setting.max_arrivals, pattern[(ts + offset) % len(pattern)])):
            if len(jobs) == setting.jobs:
                break
            t = int(rng.integers(len(MODELS)))
            jobs.append(PaperJob(f"{MODELS[t]}-{len(jobs)}", len(jobs), t, ts, float(int(EPOCH_FRACTION[t] * setting.max_epochs))))
        ts += 1
    return jobs


class Slot:
    """What a policy sees and changes in one slot: the active jobs (arrival order), empty at first,
    and `add`, which places one more task on the least-used node."""

    def __init__(self, setting: PaperSetting, ts: int, jobs: Sequence[PaperJob]) -> None:
        self.setting = setting
        self.ts = ts
        self.jobs = list(jobs)
        self.used = np.zeros((setting.nodes, 2), dtype=int)
        self._heap = [(0, n) for n in range(setting.nodes)]  # (used slots, node): least used first
        for job in self.jobs:
            job.ps = job.workers = 0

    def can_grow(self, job: PaperJob, role: str) -> bool:
        cap = self.setting.max_tasks
        return (role == "ps" and job.ps < cap) or (role == "worker" and job.workers < cap) or \
            (role == "bundle" and job.ps < cap and job.workers < cap)

    @staticmethod
    def need(job: PaperJob, role: str) -> tuple[int, int]:
        """(CPU, GPU) slots of one more worker, PS or both ("bundle")."""
        return {"worker": WORKER_SLOTS[job.model], "ps": PS_SLOTS,
                "bundle": tuple(a + b for a, b in zip(WORKER_SLOTS[job.model], PS_SLOTS))}[role]

    def add(self, job: PaperJob, role: str) -> bool:
        """One more worker, PS or both ("bundle", on one node) for `job`; False if the least-used node
        cannot take it (the artifact's policies then stop for the slot)."""
        need = self.need(job, role)
        _, node = heapq.heappop(self._heap)
        fits = all(self.used[node, r] + need[r] <= NODE_SLOTS for r in range(2))
        if fits:
            self.used[node] += need
            job.workers += role in ("worker", "bundle")
            job.ps += role in ("ps", "bundle")
        heapq.heappush(self._heap, (int(self.used[node].sum()), node))
        return fits


class PaperPolicy(Protocol):
    name: str

    def reset(self) -> None: ...

    def schedule(self, slot: Slot) -> None:
        """Give the slot's jobs their tasks through `slot.add` (every job starts the slot with none)."""
        ...


class PaperDRF:
    """The artifact's DRF: one worker + one PS at a time to the job with the least dominant share
    (ties: earliest arrival), until the least-used node cannot take one, or every job is capped."""

    name = "drf"

    def reset(self) -> None:
        pass

    def key(self, job: PaperJob, slot: Slot) -> float:
        """Queue order for the job's next bundle, least first: its dominant share."""
        return job.share(slot.setting.nodes)

    def schedule(self, slot: Slot) -> None:
        queue = [(0.0, j.arrival, j.index, j) for j in slot.jobs]
        heapq.heapify(queue)
        while queue:
            _, arrival, index, job = heapq.heappop(queue)
            if not slot.add(job, "bundle"):
                break
            if slot.can_grow(job, "bundle"):
                heapq.heappush(queue, (self.key(job, slot), arrival, index, job))


class PaperBestSplit(PaperDRF):
    """A reference, not the artifact's: DRF's task count per job, split between PS and workers (at
    least one of each) the way the speed table makes fastest. The per-role cap is not applied to the
    split (DRF's count already respects it), and a split uses no more GPUs than DRF's (a PS needs
    none) and the same CPUs, so it fits the cluster in total. Beyond the table's 23 measured tasks
    the speed is the RBF's extrapolation, as in the artifact."""

    name = "drf-best-split"

    def schedule(self, slot: Slot) -> None:
        super().schedule(slot)
        for job in slot.jobs:
            best_split(job)


def best_split(job: PaperJob) -> None:
    """Re-split the job's tasks between PS and workers (at least one of each) as the speed table makes
    fastest (ties: fewer PS)."""
    tasks = job.ps + job.workers
    if tasks >= 2:
        splits = [(p, tasks - p) for p in range(1, tasks)]
        job.ps, job.workers = max(splits, key=lambda pw: (job.epochs_per_slot(*pw), -pw[0]))


class PaperOptimus:
    """The artifact's Optimus: every job first gets a worker and a PS; then, repeatedly, the task
    (worker or PS) with the largest cut in the job's remaining time, while one is positive."""

    name = "optimus"

    def reset(self) -> None:
        pass

    @staticmethod
    def _gain(job: PaperJob, cap: int) -> tuple[float, str]:
        if job.workers == 0:
            return math.inf, "worker"
        if job.ps == 0:
            return math.inf, "ps"
        now = job.epochs_per_slot()
        best = (-math.inf, "worker")
        for role, (p, w) in (("worker", (job.ps, job.workers + 1)), ("ps", (job.ps + 1, job.workers))):
            after = job.epochs_per_slot(p, w)
            if now <= 0:
                gain = math.inf if after > 0 else 0.0
            else:
                gain = job.remaining() / now - (job.remaining() / after if after > 0 else math.inf)
            if gain >= best[0]:  # ties to the PS, as the artifact
                best = (gain, role)
        return best

    def schedule(self, slot: Slot) -> None:
        cap = slot.setting.max_tasks
        queue = []
        for job in slot.jobs:
            gain, role = self._gain(job, cap)
            queue.append((-gain, job.index, role, job))
        heapq.heapify(queue)
        while queue:
            neg, _, role, job = heapq.heappop(queue)
            if -neg <= 0:
                break
            if not slot.can_grow(job, role):
                continue
            if not slot.add(job, role):
                break
            gain, role = self._gain(job, cap)
            heapq.heappush(queue, (-gain, job.index, role, job))


CPU_TASKS_PER_NODE = NODE_SLOTS // 2  # a worker or a PS holds 2 CPU slots
GPU_WORKERS_PER_NODE = NODE_SLOTS // 4  # a GPU worker holds 4 GPU slots


def uses_gpu(job: PaperJob) -> bool:
    """Whether the job's workers hold GPU slots (cnn-text-classification and dssm workers do not)."""
    return WORKER_SLOTS[job.model][1] > 0


def capacity(setting: PaperSetting) -> tuple[int, int]:
    """(tasks, GPU workers) the whole cluster holds."""
    return setting.nodes * CPU_TASKS_PER_NODE, setting.nodes * GPU_WORKERS_PER_NODE


@lru_cache(maxsize=None)
def next_step(model: int, cap: int, ps: int, workers: int) -> tuple[int, int, float] | None:
    """From (ps, workers), the (PS, workers) with at least as many of each (at most `cap`) whose speed
    gains the most epochs per slot per added task, and that speed; None if no addition is faster.
    Several tasks at once where a split only pays off together (resnet-50: 1 -> 3 PS). Steps from
    (1, 1) trace the upper concave hull of the speed over the monotone additions."""
    now = epochs_per_slot(model, ps, workers)
    best: tuple[float, int, int, float] | None = None
    for p in range(max(ps, 1), cap + 1):
        for w in range(max(workers, 1), cap + 1):
            added = p + w - ps - workers
            speed = epochs_per_slot(model, p, w)
            if added > 0 and speed > now and (best is None or (speed - now) / added > best[0]):
                best = ((speed - now) / added, p, w, speed)
    return None if best is None else best[1:]


def peak_speed(model: int, cap: int) -> float:
    """Epochs per slot of the fastest (PS, workers) with at most `cap` of each."""
    return max(epochs_per_slot(model, p, w) for p in range(1, cap + 1) for w in range(1, cap + 1))


def first_bundles(slot: Slot) -> tuple[list[PaperJob], int, int]:
    """The jobs that get a worker and a PS before anything else (arrival order, while the cluster's
    `capacity` lasts: the artifact's ASSIGN_BUNDLE, no job starves), and the (tasks, GPU workers) left."""
    tasks_left, gpu_left = capacity(slot.setting)
    bundled = []
    for job in sorted(slot.jobs, key=lambda j: (j.arrival, j.index)):
        if tasks_left < 2 or gpu_left < uses_gpu(job):
            break
        bundled.append(job)
        tasks_left, gpu_left = tasks_left - 2, gpu_left - uses_gpu(job)
    return bundled, tasks_left, gpu_left


def place_cpu_first(slot: Slot, targets: dict[str, tuple[int, int]]) -> None:
    """Place every job's (PS, workers) target through the least-used-node rule: CPU-only tasks (PS,
    and the workers of CPU-only job types) first, then GPU workers, one task per job and round in
    arrival order. The order matters because the rule ranks nodes by used CPU + GPU slots: a node
    holding 4 CPU-only tasks is full at 8 used slots, and once it ranks least used every later task
    fails. Spread first, CPU-only tasks leave every node within one task of the next, and the GPU
    workers then go to the nodes with CPU left; so any targets within `capacity` are placed in full
    (tests/unit/test_sim_paper.py), where placing GPU workers first loses about 5 points of mean JCT
    (`benchmarks/dl2/paper_teachers.py`)."""
    jobs = [j for j in sorted(slot.jobs, key=lambda j: (j.arrival, j.index)) if j.id in targets]
    for job in slot.jobs:
        job.ps = job.workers = 0
    for gpu_phase in (False, True):
        added = True
        while added:
            added = False
            for job in jobs:
                roles = (("worker",) if uses_gpu(job) else ()) if gpu_phase else \
                    (("ps",) if uses_gpu(job) else ("ps", "worker"))
                for role in roles:
                    held = job.ps if role == "ps" else job.workers
                    if held < targets[job.id][role == "worker"] and slot.add(job, role):
                        added = True


class PaperHull:
    """A reference, not the artifact's, and the PS/worker DL2's teacher: every active job a worker
    and a PS (arrival order), then, step after step, the job whose `next_step` gains the most epochs
    per slot per task, while the cluster's `capacity` lasts; placed with `place_cpu_first`.
    `place="ideal"` sets the targets without placing them (as `drf-best-split` does), for reference."""

    name = "hull"

    def __init__(self, place: str = "cpu-first") -> None:
        self.place = place

    def reset(self) -> None:
        pass

    @staticmethod
    def plan(slot: Slot) -> list[tuple[PaperJob, int, int]]:
        """The (job, PS, workers) targets in the order they are decided: the first bundles, then the steps."""
        setting = slot.setting
        bundled, tasks_left, gpu_left = first_bundles(slot)
        held = {job.id: (1, 1) for job in bundled}
        plan = [(job, 1, 1) for job in bundled]
        queue: list = []

        def push(job: PaperJob) -> None:
            step = next_step(job.model, setting.max_tasks, *held[job.id])
            if step is not None:
                ps, workers, speed = step
                now = job.epochs_per_slot(*held[job.id])
                heapq.heappush(queue, (-(speed - now) / (ps + workers - sum(held[job.id])), job.index, ps, workers, job))

        for job in bundled:
            push(job)
        while queue:
            _, _, ps, workers, job = heapq.heappop(queue)
            had_ps, had_workers = held[job.id]
            tasks, gpus = ps + workers - had_ps - had_workers, (workers - had_workers) * uses_gpu(job)
            if tasks <= tasks_left and gpus <= gpu_left:
                held[job.id] = (ps, workers)
                plan.append((job, ps, workers))
                tasks_left, gpu_left = tasks_left - tasks, gpu_left - gpus
                push(job)
        return plan

    def schedule(self, slot: Slot) -> None:
        targets = {job.id: (ps, workers) for job, ps, workers in self.plan(slot)}
        if self.place == "ideal":
            for job in slot.jobs:
                job.ps, job.workers = targets.get(job.id, (0, 0))
        else:
            place_cpu_first(slot, targets)


@dataclass
class PaperRun:
    """Every job of one trace under one policy."""

    setting: PaperSetting
    trace: list[PaperJob]
    name: str = "workload"
    gpu_slots_used: list[int] = field(default_factory=list)
    changes: int = 0

    def run(self, policy: PaperPolicy, max_slots: int = 10_000) -> SimResult:
        for job in self.trace:
            job.ps = job.workers = 0
            job.progress, job.end = 0.0, None
        policy.reset()
        pending, active, done = list(self.trace), [], []
        self.gpu_slots_used, self.changes = [], 0
        ts = 0
        while (pending or active) and ts < max_slots:
            while pending and pending[0].arrival <= ts:
                active.append(pending.pop(0))
            before = {j.id: (j.ps, j.workers) for j in active}
            slot = Slot(self.setting, ts, active)
            policy.schedule(slot)
            self.gpu_slots_used.append(sum(j.workers * WORKER_SLOTS[j.model][1] for j in active))
            self.changes += sum(1 for j in active if before[j.id] != (j.ps, j.workers) and before[j.id] != (0, 0))
            for job in list(active):
                epochs = job.epochs_per_slot()
                if epochs <= 0:
                    continue
                if job.progress + epochs >= job.epochs:
                    job.end = ts - 1 + (job.epochs - job.progress) / epochs
                    job.progress = job.epochs
                    active.remove(job)
                    done.append(job)
                else:
                    job.progress += epochs
            ts += 1
        if pending or active:
            raise UsageError(f"{self.name}: {policy.name} left {len(pending) + len(active)} job(s) unfinished "
                             f"after {max_slots} slots")
        return self.result(policy.name)

    def result(self, policy_name: str) -> SimResult:
        jcts = {j.id: (j.end - j.arrival + 1.0) * SLOT_S for j in self.trace if j.end is not None}
        makespan = max((j.end + 1.0 for j in self.trace if j.end is not None), default=0.0) * SLOT_S
        total = self.setting.nodes * NODE_SLOTS * len(self.gpu_slots_used)
        return SimResult(policy=policy_name, workload=self.name, jcts=jcts,
                         avg_jct_s=sum(jcts.values()) / len(jcts) if jcts else math.nan, makespan_s=makespan,
                         gpu_utilisation=sum(self.gpu_slots_used) / total if total else 0.0,
                         restarts=self.changes, gpus_total=self.setting.nodes * NODE_SLOTS // 4,
                         times=[i * SLOT_S for i in range(len(self.gpu_slots_used))],
                         gpus_in_use=[g // 4 for g in self.gpu_slots_used])


PAPER_POLICIES = ("drf", "optimus", "drf-best-split", "hull", "dl2")


def make_paper_policy(name: str, policy_file: str | None = None) -> PaperPolicy:
    """A fresh policy for the replica; `dl2` loads `policy_file`, or the shipped file for the setting."""
    if name == "drf":
        return PaperDRF()
    if name == "optimus":
        return PaperOptimus()
    if name == "drf-best-split":
        return PaperBestSplit()
    if name == "hull":
        return PaperHull()
    if name == "dl2":
        from slurm_liquid.policy.dl2.psworker import make_psworker_dl2

        return make_psworker_dl2(policy_file)
    raise UsageError(f"unknown policy {name!r} for the DL2 paper workloads (known: {', '.join(PAPER_POLICIES)}, all)")


def run_paper(workload: str, seed: int, policies: Sequence[str], policy_file: str | None = None) -> dict[str, SimResult]:
    """policy -> result on the trace `seed` of `workload` (dl2-paper-small or dl2-paper-large)."""
    if workload not in SETTINGS:
        raise UsageError(f"unknown DL2 paper workload {workload!r} (known: {', '.join(SETTINGS)})")
    setting = SETTINGS[workload]
    run = PaperRun(setting, paper_trace(setting, seed), f"{workload}-seed{seed}")
    return {p: run.run(make_paper_policy(p, policy_file)) for p in policies}
