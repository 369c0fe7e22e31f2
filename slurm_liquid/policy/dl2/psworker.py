"""DL2 on parameter-server jobs: the action space of the paper, for the replica of its setting.

In the DL2 paper (and in its replica, `slurm_liquid.psworld`) a job holds workers and parameter servers (PS),
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

Each action adds its task(s) through the slot (`slurm_liquid.psworld.slot.Slot.add`), so DL2 runs
under the same placement as every other policy of the run: under `cpu-first` the actions count
against the cluster's totals (the legal ones always fit) and the slot places the counts at its end;
under `artifact` each task goes to the least-used node at once and a refused one ends the slot, as in
the artifact's `rl_env.py`. A file records the placement it was trained under (`placement`).

What this DL2 sees that the paper's does not: each row carries the relative change in the job's
speed the action would make, read from the measured speed table (the paper's rows have no speed).

Training (`psworker_train`, `benchmarks/dl2/paper.py --train`): supervised warm-up on a teacher's
decisions, then DAgger rounds. Reinforcement learning on this action space is left for later.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from slurm_liquid.errors import UsageError
from slurm_liquid.policy.dl2.agent import Step
from slurm_liquid.policy.dl2.net import Params, forward, init_params
from slurm_liquid.psworld.slot import PLACEMENT, ROLES, Slot, assign_bundles
from slurm_liquid.psworld.world import capacity, next_step, uses_gpu

N_TYPES = 8
PS_FEATURES = N_TYPES + len(ROLES) + 8 + 4 + 1  # job, role, job state, cluster, stop flag
TRAINED_DIR = Path(__file__).parent / "trained"


def _after(job, role: str) -> tuple[int, int]:
    return job.ps + (role in ("ps", "bundle")), job.workers + (role in ("worker", "bundle"))


class PSState:
    """The rows of one decision within a slot (a `slurm_liquid.psworld.slot.Slot`), over the
    jobs' counted (PS, workers). The matrix is built once per slot and updated in place: an action
    changes only its job's rows and the cluster columns.

    `slide=False` is the artifact's window: the `window` earliest-arrived jobs that can still grow,
    fixed for the slot. Every slot starts each job from one bundle, so with more active jobs than
    the window the later ones keep their bundle however much room is left (imitating `hull` at the
    large setting's window of 40 ran trace 5000 in 9.9 h where `hull` runs 8.1 h). `slide=True`
    lets the window move within the slot: a job that no addition within the cap makes faster
    (`next_step` is None: it is at its peak) leaves it, and the next waiting job enters, so the
    window holds only jobs an action can still help."""

    def __init__(self, slot: Slot, window: int, slide: bool = False) -> None:
        self.slot = slot
        self.window = window
        self.slide = slide
        grow = sorted((j for j in slot.jobs if self._eligible(j)), key=lambda j: (j.arrival, j.index))
        self.jobs = grow[:window]  # JOB_SORT_PRIORITY "Arrival"
        self.waiting = grow[window:]
        self.placed = 0  # tasks the network added in this slot
        self.total = capacity(slot.setting)
        self._build()

    @property
    def tasks_left(self) -> int:
        return self.slot.tasks_left

    @property
    def gpu_left(self) -> int:
        return self.slot.gpu_left

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
        """Take an action; False for stop, and for a task the slot refuses (only under the artifact's
        placement, where the least-used node may be full: the slot then ends, as in `rl_env.py`)."""
        if action == self.rows() - 1:
            return False
        i, r = divmod(action, len(ROLES))
        job, role = self.jobs[i], ROLES[r]
        if not self.slot.can_grow(job, role):
            raise RuntimeError(f"{job.id}: {role} is past its cap although it was legal")  # valid() said it is not
        if not self.slot.add(job, role):
            return False
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

    def _load(self, setting, placement: str) -> None:
        path = shipped_file(setting.name, placement)
        if not path.is_file():
            raise UsageError(f"no DL2 policy trained for {setting.name} is installed ({path}); "
                             "give one with --policy-file")
        self.params, meta = load_psworker(path)
        self.window = self.window or int(meta["window"])
        self.slide = bool(meta.get("window_slides", False))

    def schedule(self, slot: Slot) -> None:
        if self.params is None:
            self._load(slot.setting, slot.placement)
        assign_bundles(slot)
        state = PSState(slot, self.window or slot.setting.window, self.slide)
        while True:
            valid = state.valid()
            if not valid[:-1].any():
                return
            x = state.matrix()
            fw = forward(self.params, x[None], np.ones((1, len(x)), dtype=bool), valid[None])
            p = fw.prob[0]
            action = int(self.rng.choice(len(p), p=p / p.sum())) if self.sample else int(np.argmax(fw.logp[0]))
            if self.steps is not None:
                self.steps.append(Step(x.copy(), valid, action, float(p[action])))
            if not state.apply(action):
                return


def shipped_file(setting: str, placement: str = PLACEMENT) -> Path:
    """The installed file for a setting and placement: `<setting>-<placement>.npz` where a file was
    chosen for that placement (on validation traces, docs/dl2.md), else `<setting>.npz` (trained
    under the default placement, `cpu-first`)."""
    own = TRAINED_DIR / f"{setting}-{placement}.npz"
    return own if placement != PLACEMENT and own.is_file() else TRAINED_DIR / f"{setting}.npz"


def load_psworker(path: str | Path) -> tuple[Params, dict]:
    from slurm_liquid.policy.dl2.io import load_policy

    return load_policy(path, features=PS_FEATURES, action_space="ps-worker")


def make_psworker_dl2(policy_file: str | Path | None = None) -> PSWorkerDL2:
    if policy_file is None:
        return PSWorkerDL2(None)
    params, meta = load_psworker(policy_file)
    return PSWorkerDL2(params, int(meta["window"]), slide=bool(meta.get("window_slides", False)))


def new_psworker_params(hidden: int = 64, layers: int = 2, seed: int = 0) -> Params:
    return init_params(PS_FEATURES, hidden, layers, seed)


__all__ = ["PSWorkerDL2", "PSState", "ROLES", "PS_FEATURES", "make_psworker_dl2", "load_psworker", "new_psworker_params",
           "shipped_file"]
