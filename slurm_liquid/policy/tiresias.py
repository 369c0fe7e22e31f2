"""Tiresias: two-queue discretised least-attained-service, GPU-time based (SIMULATOR.md 5).

Jobs run rigidly at the GPU count they asked for. New jobs enter the high-priority queue
Q0; a job that has used `threshold` GPU-seconds while running drops to Q1 for good
(starvation promotion is off, as in the artifact). Every interval the queues are walked
in order and each job that still fits runs; the rest are suspended (preempted).
Running jobs keep their nodes; the loop places newly admitted ones.
"""

from __future__ import annotations

from slurm_liquid.views import ClusterView, Decision


class Tiresias:
    name = "tiresias"

    def __init__(self, threshold_gpu_s: float = 16 * 3600) -> None:
        self.threshold = threshold_gpu_s
        self.reset()

    def reset(self) -> None:
        self.queues: tuple[list[str], list[str]] = ([], [])
        self.state: dict[str, list] = {}  # id -> [running, executed wall seconds, last check, queue]

    def decide(self, view: ClusterView) -> Decision:
        now = int(view.now)
        jobs = {j.id: j for j in view.jobs}
        q0, q1 = self.queues
        gone = [i for i in self.state if i not in jobs]
        if gone:
            drop = set(gone)
            for i in gone:
                del self.state[i]
            self.queues = q0, q1 = [i for i in q0 if i not in drop], [i for i in q1 if i not in drop]
        for job in view.jobs:
            if job.id not in self.state:
                self.state[job.id] = [False, 0.0, now, 0]
                q0.append(job.id)
        demoted = []
        for i in q0:
            st = self.state[i]
            if st[0]:
                st[1] += now - st[2]
                if st[1] * jobs[i].gpus >= self.threshold:
                    demoted.append(i)
            st[2] = now
        for i in q1:
            st = self.state[i]
            if st[0]:
                st[1] += now - st[2]
            st[2] = now
        if demoted:
            moved = set(demoted)
            q0[:] = [i for i in q0 if i not in moved]
            q1.extend(demoted)
            for i in demoted:
                self.state[i][3] = 1
        free = view.total_gpus
        run = []
        for i in q0 + q1:
            job = jobs[i]
            fits = job.gpus <= free
            self.state[i][0] = fits
            if fits:
                free -= job.gpus
                run.append(job)
        admitted = {j.id for j in run}
        # Admitted running jobs keep their nodes (not named); the others are preempted.
        moves = [(j.id, 0) for j in view.jobs if j.id not in admitted and j.allocation]
        moves += [(j.id, j.gpus) for j in run if not j.allocation]
        return Decision(tuple(moves))
