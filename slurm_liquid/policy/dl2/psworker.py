"""DL2 on parameter-server jobs: the action space of the paper, for the replica of its setting.

In the DL2 paper (and in `slurm_liquid.sim.paper`) a job holds workers and parameter servers (PS),
and the split between them matters as much as the total. The action space is the paper's: for each
job of the scheduling window (the `window` earliest-arrived active jobs that can still grow),
"add a worker", "add a PS" or "add a bundle (one of each)", plus "stop for this slot"; actions are
taken one after another within a slot (ACTION_DIM = 3 x window + 1 in the artifact). A file trained
with a sliding window (`window_slides`) lets a job at its peak speed leave the window within the slot
and the next waiting job enter (`PSState`), so a window smaller than the active jobs still reaches them all.

It reuses the DL2 network of `net.py` unchanged: one row per (job, role) plus the stop row, the
same MLP scoring every row, the softmax over the legal rows. A row is the job's features, the role
(one-hot), what the role would change (the relative change in the job's speed from the measured
table) and the cluster's free CPU and GPU; the stop row has only the cluster part and its flag.
Before the network acts, every active job gets one bundle in arrival order while the cluster takes
it (the artifact's ASSIGN_BUNDLE: no job starves), exactly the first round of the artifact's DRF.

The actions count tasks against the cluster's capacity (CPU tasks and GPU workers in total); at the
end of the slot `slurm_liquid.sim.paper.place_cpu_first` places them through the least-used-node
rule, which packs any counts within capacity. Placing each task as it is chosen, bundles first, left
capacity unused whenever a node full of CPU-only tasks ranked least used (a teacher's same targets
ran 15.9% below Optimus placed that way, 25.9% placed at the end: `benchmarks/dl2/paper_teachers.py`).

Training (`warmup`, `benchmarks/dl2/paper.py --train`): supervised warm-up on a teacher's decisions
in the replica (the artifact's DRF, its Optimus, DRF's task counts with the best split, or `hull`,
whose steps are imitated in the order it takes them), turned into this action sequence, then DAgger
rounds (`LabelledByTeacher`: the teacher's decisions on the slots the student reached).
Reinforcement learning on this action space is left for later.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from slurm_liquid.errors import UsageError
from slurm_liquid.policy.dl2.agent import Step
from slurm_liquid.policy.dl2.net import Params, forward, init_params
from slurm_liquid.sim.paper import Slot, capacity, first_bundles, next_step, place_cpu_first, uses_gpu

ROLES = ("worker", "ps", "bundle")
N_TYPES = 8
PS_FEATURES = N_TYPES + len(ROLES) + 8 + 4 + 1  # job, role, job state, cluster, stop flag
TRAINED_DIR = Path(__file__).parent / "trained"


def _after(job, role: str) -> tuple[int, int]:
    return job.ps + (role in ("ps", "bundle")), job.workers + (role in ("worker", "bundle"))


class PSState:
    """The rows of one decision within a slot (`slot`: a `slurm_liquid.sim.paper.Slot`), over the
    jobs' counted (PS, workers). The matrix is built once per slot and updated in place: an action
    changes only its job's rows and the cluster columns.

    `slide=False` is the artifact's window: the `window` earliest-arrived jobs that can still grow,
    fixed for the slot. Every slot starts each job from one bundle, so with more active jobs than
    the window the later ones keep their bundle however much room is left (imitating `hull` at the
    large setting's window of 40 ran trace 5000 in 9.9 h where `hull` runs 8.1 h). `slide=True`
    lets the window move within the slot: a job that no addition within the cap makes faster
    (`next_step` is None: it is at its peak) leaves it, and the next waiting job enters, so the
    window holds only jobs an action can still help."""

    def __init__(self, slot, window: int, slide: bool = False) -> None:
        self.slot = slot
        self.window = window
        self.slide = slide
        grow = sorted((j for j in slot.jobs if self._eligible(j)), key=lambda j: (j.arrival, j.index))
        self.jobs = grow[:window]  # JOB_SORT_PRIORITY "Arrival"
        self.waiting = grow[window:]
        self.placed = 0  # tasks the network added in this slot
        self.total = capacity(slot.setting)
        self.tasks_left = self.total[0] - sum(j.ps + j.workers for j in slot.jobs)
        self.gpu_left = self.total[1] - sum(j.workers for j in slot.jobs if uses_gpu(j))
        self._build()

    @property
    def beyond(self) -> int:
        return len(self.waiting)

    def _eligible(self, job) -> bool:
        if not any(self.slot.can_grow(job, r) for r in ROLES):
            return False
        return not self.slide or next_step(job.model, self.slot.setting.max_tasks, job.ps, job.workers) is not None

    def _build(self) -> None:
        # (tasks, GPU workers) one more worker, PS or bundle takes
        self.need = np.array([[(1, uses_gpu(j)), (1, 0), (2, uses_gpu(j))] for j in self.jobs],
                             dtype=int).reshape(-1, len(ROLES), 2)
        self.x = np.zeros((self.rows(), PS_FEATURES))
        self.x[-1, -1] = 1.0
        for i in range(len(self.jobs)):
            self._job_rows(i)
        self._cluster()

    def rows(self) -> int:
        return len(ROLES) * len(self.jobs) + 1

    def action_of(self, job, role: str) -> int | None:
        for i, j in enumerate(self.jobs):
            if j is job:
                return len(ROLES) * i + ROLES.index(role)
        return None

    def valid(self) -> np.ndarray:
        cap = self.slot.setting.max_tasks
        free = np.array([self.tasks_left, self.gpu_left])
        ps = np.array([j.ps for j in self.jobs])
        workers = np.array([j.workers for j in self.jobs])
        grow = np.stack([workers < cap, ps < cap, (workers < cap) & (ps < cap)], axis=1) if self.jobs else np.zeros((0, 3), bool)
        room = (self.need <= free).all(axis=2)
        ok = np.append((grow & room).reshape(-1), False)
        ok[-1] = self.placed > 0 or not ok[:-1].any()
        return ok

    def _cluster(self) -> None:
        cpu, gpu = self.tasks_left / self.total[0], self.gpu_left / self.total[1]  # free shares of the CPU and GPU slots
        self.x[:, -5:-1] = (cpu, gpu, len(self.jobs) / self.window, self.beyond / self.window)

    def _job_rows(self, i: int) -> None:
        slot, job, cap = self.slot, self.jobs[i], self.slot.setting.max_tasks
        now = job.epochs_per_slot()
        ref = now if now > 0 else job.epochs_per_slot(max(job.ps, 1), max(job.workers, 1))
        base = [math.log1p(slot.ts - job.arrival), job.remaining() / job.epochs,
                math.log1p(job.remaining() / ref) if ref > 0 else 10.0,
                job.workers / cap, job.ps / cap, 10 * job.share(slot.setting.nodes)]
        for r, role in enumerate(ROLES):
            row = self.x[len(ROLES) * i + r]
            row[job.model] = 1.0
            row[N_TYPES + r] = 1.0
            after = job.epochs_per_slot(*_after(job, role))
            gain = (after - now) / max(now, after, 1e-9)
            row[N_TYPES + len(ROLES):N_TYPES + len(ROLES) + 8] = base + [gain, float(now > 0)]

    def matrix(self) -> np.ndarray:
        return self.x

    def apply(self, action: int) -> bool:
        """Take a non-stop action; False for stop."""
        if action == self.rows() - 1:
            return False
        i, r = divmod(action, len(ROLES))
        job, role = self.jobs[i], ROLES[r]
        tasks, gpus = self.need[i, r]
        if tasks > self.tasks_left or gpus > self.gpu_left or not self.slot.can_grow(job, role):
            raise RuntimeError(f"{job.id}: {role} does not fit although it was legal")  # valid() said it does
        job.workers += role in ("worker", "bundle")
        job.ps += role in ("ps", "bundle")
        self.tasks_left, self.gpu_left = self.tasks_left - tasks, self.gpu_left - gpus
        self.placed += 1
        if self.slide and not self._eligible(job):  # at its peak: the next waiting job takes its place
            del self.jobs[i]
            if self.waiting:
                self.jobs.append(self.waiting.pop(0))
            self._build()
            return True
        self._job_rows(i)
        self._cluster()
        return True


def assign_bundles(slot) -> None:
    """Count one worker and one PS for every job of `first_bundles` (the slot starts with none)."""
    for job in first_bundles(slot)[0]:
        job.ps = job.workers = 1


def place(slot) -> None:
    """Place the counted tasks of the slot's jobs (the end of the slot's decisions)."""
    place_cpu_first(slot, {j.id: (j.ps, j.workers) for j in slot.jobs if j.ps or j.workers})


class PSWorkerDL2:
    """A (greedy by default) PS/worker DL2 policy for the paper replica."""

    name = "dl2"

    def __init__(self, params: Params | None, window: int | None = None, sample: bool = False,
                 seed: int = 0, slide: bool = False) -> None:
        self.params = params
        self.window = window
        self.slide = slide
        self.sample = sample
        self.rng = np.random.default_rng(seed)
        self.steps: list[Step] | None = None  # set to a list to record decisions

    def reset(self) -> None:
        pass

    def _load(self, setting) -> None:
        path = TRAINED_DIR / f"{setting.name}.npz"
        if not path.is_file():
            raise UsageError(f"no DL2 policy trained for {setting.name} is installed ({path}); "
                             "give one with --policy-file")
        self.params, meta = load_psworker(path)
        self.window = self.window or int(meta["window"])
        self.slide = bool(meta.get("window_slides", False))

    def schedule(self, slot) -> None:
        if self.params is None:
            self._load(slot.setting)
        assign_bundles(slot)
        state = PSState(slot, self.window or slot.setting.window, self.slide)
        while True:
            valid = state.valid()
            if not valid[:-1].any():
                return place(slot)
            x = state.matrix()
            fw = forward(self.params, x[None], np.ones((1, len(x)), dtype=bool), valid[None])
            p = fw.prob[0]
            action = int(self.rng.choice(len(p), p=p / p.sum())) if self.sample else int(np.argmax(fw.logp[0]))
            if self.steps is not None:
                self.steps.append(Step(x.copy(), valid, action, float(p[action])))
            if not state.apply(action):
                return place(slot)


def load_psworker(path: str | Path) -> tuple[Params, dict]:
    from slurm_liquid.policy.dl2.io import load_policy

    return load_policy(path, features=PS_FEATURES, action_space="ps-worker")


def make_psworker_dl2(policy_file: str | Path | None = None) -> PSWorkerDL2:
    if policy_file is None:
        return PSWorkerDL2(None)
    params, meta = load_psworker(policy_file)
    return PSWorkerDL2(params, int(meta["window"]), slide=bool(meta.get("window_slides", False)))


# -- supervised warm-up on a teacher -------------------------------------------------------------
def next_action(state: PSState, targets: dict[str, tuple[int, int]]) -> int:
    """The next action toward every window job's (PS, workers) target: a bundle while both fall
    short, else the short role, for the job of least dominant share (DRF's water-filling order, ties
    to the earliest); stop once no job short of its target can take a task."""
    valid = state.valid()
    short = []
    for job in state.jobs:
        want_ps, want_w = targets.get(job.id, (job.ps, job.workers))
        role = ("bundle" if job.ps < want_ps and job.workers < want_w else
                "ps" if job.ps < want_ps else "worker" if job.workers < want_w else None)
        a = None if role is None else state.action_of(job, role)
        if a is not None and valid[a]:
            short.append((job.share(state.slot.setting.nodes), job.arrival, job.index, a))
    return min(short)[3] if short else state.rows() - 1


class Imitate:
    """Runs `teacher` on a shadow of each slot to get its (PS, workers) per job, then reaches them on
    the real slot with PS/worker actions after the bundle round, recording each decision. A teacher
    with a `plan` (`PaperHull`) is followed step by step in its own order (a bundle while both roles
    fall short, else the short one), then stops; others through `next_action`."""

    def __init__(self, teacher, window: int, steps: list[Step], slide: bool = False) -> None:
        self.teacher, self.window, self.steps, self.slide = teacher, window, steps, slide
        self.name = f"imitate-{teacher.name}"

    def reset(self) -> None:
        self.teacher.reset()

    def schedule(self, slot) -> None:
        shadow = Slot(slot.setting, slot.ts, slot.jobs)
        plan = self.teacher.plan(shadow) if hasattr(self.teacher, "plan") else None
        if plan is None:
            self.teacher.schedule(shadow)
            targets = {j.id: (j.ps, j.workers) for j in slot.jobs}
        for job in slot.jobs:  # the real slot is still empty
            job.ps = job.workers = 0
        assign_bundles(slot)
        state = PSState(slot, self.window, self.slide)
        deferred = list(plan or ())
        while deferred:  # once without a sliding window; with one, again for the jobs that entered it
            outside = []
            for job, ps, workers in deferred:
                while (job.ps, job.workers) != (ps, workers):
                    role = "bundle" if job.ps < ps and job.workers < workers else "ps" if job.ps < ps else "worker"
                    action, valid = state.action_of(job, role), state.valid()
                    if action is None and self.slide and any(w is job for w in state.waiting):
                        outside.append((job, ps, workers))
                    if action is None or not valid[action]:  # outside the window, or past a cap
                        break
                    self.steps.append(Step(state.matrix().copy(), valid, action))
                    state.apply(action)
            deferred = outside if len(outside) < len(deferred) else []
        while True:
            valid = state.valid()
            if not valid[:-1].any():
                return place(slot)
            if plan is not None:  # the teacher stops here (a stop is not legal before the first task)
                if valid[-1]:
                    self.steps.append(Step(state.matrix().copy(), valid, state.rows() - 1))
                return place(slot)
            action = next_action(state, targets)
            self.steps.append(Step(state.matrix().copy(), valid, action))
            if not state.apply(action):
                return place(slot)


def teacher_steps(traces: Sequence, teacher, window: int, slide: bool = False) -> list[Step]:
    """Decisions of `teacher` on each `PaperRun` of `traces`, as PS/worker actions."""
    steps: list[Step] = []
    for run in traces:
        run.run(Imitate(teacher, window, steps, slide))
    return steps


def new_psworker_params(hidden: int = 64, layers: int = 2, seed: int = 0) -> Params:
    return init_params(PS_FEATURES, hidden, layers, seed)


__all__ = ["PSWorkerDL2", "PSState", "ROLES", "PS_FEATURES", "make_psworker_dl2", "load_psworker", "LabelledByTeacher",
           "teacher_steps", "new_psworker_params", "warmup"]


class LabelledByTeacher:
    """DAgger on the replica: the student decides every slot, and the teacher's decisions on the slot
    the student reached (the jobs and progress its own earlier choices left) are recorded."""

    name = "dagger"

    def __init__(self, student: PSWorkerDL2, teacher, window: int, steps: list[Step]) -> None:
        self.student, self.imitate = student, Imitate(teacher, window, steps, student.slide)

    def reset(self) -> None:
        self.imitate.reset()

    def schedule(self, slot) -> None:
        self.imitate.schedule(Slot(slot.setting, slot.ts, slot.jobs))
        for job in slot.jobs:  # the teacher's counts were the shadow's
            job.ps = job.workers = 0
        self.student.schedule(slot)


def warmup(setting, teacher, seeds: Sequence[int], epochs: int = 5, hidden: int = 64, layers: int = 2,
           seed: int = 0, held_out: int = 1, window: int | None = None, dagger: int = 0,
           slide: bool = False) -> tuple[Params, dict]:
    """Supervised warm-up on `teacher`'s decisions in the replica: traces `seeds` (the last `held_out`
    of them measure agreement only), the network seeing `window` jobs (default: the setting's); then
    `dagger` rounds, each running the student on the next two traces, adding the teacher's labels of
    the slots it reached and training 3 more epochs on everything; `slide`: a sliding window
    (`PSState`), recorded in the file as `window_slides`. Returns the weights and the metadata of a
    policy file."""
    from slurm_liquid.policy.dl2.train import supervised
    from slurm_liquid.sim.paper import PaperRun, paper_trace

    runs = [PaperRun(setting, paper_trace(setting, s)) for s in seeds]
    cut = max(1, len(runs) - held_out)
    window = window or setting.window
    train = teacher_steps(runs[:cut], teacher, window, slide)
    test = teacher_steps(runs[cut:], teacher, window, slide) if len(runs) > cut else train[-2000:]
    result = supervised(new_psworker_params(hidden, layers, seed), train, test, epochs=epochs, seed=seed)
    stages, curve = [f"supervised warm-up on {teacher.name}"], list(result.curve)
    agreement = result.curve[-1]["held_out_agreement"]
    params, next_trace = result.params, max(seeds) + 1
    for round_ in range(dagger):
        traces = (next_trace, next_trace + 1)
        for s in traces:
            student = LabelledByTeacher(PSWorkerDL2(params, window, slide=slide), teacher, window, train)
            PaperRun(setting, paper_trace(setting, s)).run(student)
        result = supervised(params, train, test, epochs=3, seed=round_)
        params, next_trace = result.params, next_trace + 2
        stages.append(f"DAgger round {round_ + 1} on traces {traces[0]}, {traces[1]} labelled by {teacher.name}")
        curve += [dict(row, dagger_round=round_ + 1) for row in result.curve]
    meta = {"window": window, "window_slides": slide, "hidden": hidden, "layers": layers, "seed": seed, "action_space": "ps-worker",
            "setting": setting.name, "stages": stages,
            "training": {"teacher": teacher.name, "trace_seeds": list(seeds), "dagger_rounds": dagger,
                         "decisions": len(train), "warmup_held_out_agreement": agreement,
                         "held_out_agreement": result.curve[-1]["held_out_agreement"]},
            "curve": curve}
    return params, meta
