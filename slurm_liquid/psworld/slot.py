"""One 20-minute slot of the replica: what a policy sees and changes, and how its tasks are placed.

Every slot rebuilds every allocation from nothing. A policy adds tasks one at a time through
`Slot.add`; the slot's `placement` decides what an add means, the same for every policy:

- `artifact` (the artifact's rule, in `drf_env.py`, `optimus_env.py` and `rl_env.py` alike): the task
  goes at once to the node with the fewest used slots (CPU + GPU, ties to the lowest id), and the add
  fails when that node cannot take it (its policies then stop for the slot). A node holding 4
  CPU-only tasks is full at 8 used slots, and once it ranks least used every later task fails while
  other nodes have room, so this rule wastes capacity, more for some orders of adds than others.
- `cpu-first`: the add counts the task against the cluster's totals (4 tasks and 2 GPU workers a
  node) and fails when they are spent; at the end of the slot (`finish`) the counts are placed
  through the same least-used-node rule, CPU-only tasks first (`place_cpu_first`), an order in which
  it places any counts within the totals in full (a hypothesis test checks it). The cluster acts
  as if pooled: the question is only how many tasks each job gets.
"""

from __future__ import annotations

import heapq
from typing import Protocol, Sequence

import numpy as np

from slurm_liquid.errors import UsageError
from slurm_liquid.psworld.world import NODE_SLOTS, PS_SLOTS, WORKER_SLOTS, PaperJob, PaperSetting, capacity, uses_gpu

PLACEMENTS = ("artifact", "cpu-first")
PLACEMENT = "cpu-first"  # the replica's default, for every policy alike
ROLES = ("worker", "ps", "bundle")


class Slot:
    """The active jobs of one slot (arrival order), each starting it with no task, and `add`."""

    def __init__(self, setting: PaperSetting, ts: int, jobs: Sequence[PaperJob], placement: str = PLACEMENT) -> None:
        if placement not in PLACEMENTS:
            raise UsageError(f"unknown placement {placement!r} for the DL2 paper replica (known: {', '.join(PLACEMENTS)})")
        self.setting = setting
        self.ts = ts
        self.jobs = list(jobs)
        self.placement = placement
        self.used = np.zeros((setting.nodes, 2), dtype=int)
        self._heap = [(0, n) for n in range(setting.nodes)]  # (used slots, node): least used first
        self.tasks_left, self.gpu_left = capacity(setting)  # of the cluster's totals, after the adds so far
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

    @staticmethod
    def cost(job: PaperJob, role: str) -> tuple[int, int]:
        """(tasks, GPU workers) of one more worker, PS or bundle, against the cluster's totals."""
        return {"worker": (1, uses_gpu(job)), "ps": (1, 0), "bundle": (2, uses_gpu(job))}[role]

    def add(self, job: PaperJob, role: str) -> bool:
        """One more worker, PS or both ("bundle") for `job` under the slot's placement; False (and
        nothing changed) when it cannot take it. The per-role cap is the caller's (`can_grow`)."""
        tasks, gpus = self.cost(job, role)
        if self.placement == "artifact":
            if not self.place(job, role):
                return False
        elif tasks > self.tasks_left or gpus > self.gpu_left:
            return False
        else:
            job.workers += role in ("worker", "bundle")
            job.ps += role in ("ps", "bundle")
        self.tasks_left, self.gpu_left = self.tasks_left - tasks, self.gpu_left - gpus
        return True

    def place(self, job: PaperJob, role: str) -> bool:
        """The least-used-node rule: the task(s) on the node with the fewest used slots, or False if
        that node cannot take them (a bundle goes on one node)."""
        need = self.need(job, role)
        _, node = heapq.heappop(self._heap)
        fits = all(self.used[node, r] + need[r] <= NODE_SLOTS for r in range(2))
        if fits:
            self.used[node] += need
            job.workers += role in ("worker", "bundle")
            job.ps += role in ("ps", "bundle")
        heapq.heappush(self._heap, (int(self.used[node].sum()), node))
        return fits

    def finish(self) -> None:
        """The end of the slot's decisions: under `cpu-first` the counts are placed now (on empty nodes:
        calling it twice places the same counts again)."""
        if self.placement != "cpu-first":
            return
        self.used[:] = 0
        self._heap = [(0, n) for n in range(self.setting.nodes)]
        counts = {j.id: (j.ps, j.workers) for j in self.jobs if j.ps or j.workers}
        place_cpu_first(self, counts)
        lost = [j.id for j in self.jobs if j.id in counts and (j.ps, j.workers) != counts[j.id]]
        if lost:  # place_cpu_first places any counts within the totals; a policy past them is a bug
            raise RuntimeError(f"slot {self.ts}: counts beyond the cluster's totals for {', '.join(lost)}")


class PaperPolicy(Protocol):
    name: str

    def reset(self) -> None: ...

    def schedule(self, slot: Slot) -> None:
        """Give the slot's jobs their tasks through `slot.add` (every job starts the slot with none)."""
        ...


def place_cpu_first(slot: Slot, targets: dict[str, tuple[int, int]]) -> None:
    """Place every job's (PS, workers) target through the least-used-node rule: CPU-only tasks (PS,
    and the workers of CPU-only job types) first, then GPU workers, one task per job and round in
    arrival order. The order matters because the rule ranks nodes by used CPU + GPU slots: a node
    holding 4 CPU-only tasks is full at 8 used slots, and once it ranks least used every later task
    fails. Spread first, CPU-only tasks leave every node within one task of the next, and the GPU
    workers then go to the nodes with CPU left; so any targets within `capacity` are placed in full
    (tests/unit/test_sim_paper.py). Other orders lose tasks (`benchmarks/dl2/paper_teachers.py`)."""
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
                    if held < targets[job.id][role == "worker"] and slot.place(job, role):
                        added = True


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


def assign_bundles(slot: Slot) -> None:
    """The bundle round: a worker and a PS for every job of `first_bundles`. A bundle the slot
    refuses (only under the artifact's placement) leaves that job without, and the round goes on,
    as the artifact's `rl_env.py`."""
    for job in first_bundles(slot)[0]:
        slot.add(job, "bundle")


def next_role(job: PaperJob, ps: int, workers: int) -> str:
    """The role of the next add toward (ps, workers): a bundle while both fall short, else the short one."""
    return "bundle" if job.ps < ps and job.workers < workers else "ps" if job.ps < ps else "worker"


def reach(slot: Slot, plan: Sequence[tuple[PaperJob, int, int]]) -> bool:
    """Add tasks toward each (job, PS, workers) of `plan`, in its order, one `next_role` at a time;
    stop for the slot at the first add refused (as the artifact's policies). False if one was."""
    for job, ps, workers in plan:
        while job.ps < ps or job.workers < workers:
            if not slot.add(job, next_role(job, ps, workers)):
                return False
    return True
