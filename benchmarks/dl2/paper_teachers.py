"""Which teacher could carry DL2 15% below Optimus in the replica of the DL2 paper's setting?

    nice python benchmarks/dl2/paper_teachers.py [--setting dl2-paper-small] [--seeds 8]

Runs the replica's DRF, Optimus and best-split DRF beside three families of hand-written rules on the
held-out traces (seeds 10000 on, as `paper.py`), and prints each one's mean JCT against DRF and
Optimus. The families (none is shipped; they measure how far a teacher could take a warm-up):
- `srtf-F`: shortest remaining time first, each job given the (PS, workers) split that runs it fastest
  with the fewest tasks reaching F of its peak speed, while the cluster takes it.
- `gain/r^A`: Optimus's greedy task-by-task rule, its gain (cut in remaining time) divided by the job's
  remaining time to the power A (favouring short jobs).
- `drf-short^A`: best-split DRF with its queue keyed by dominant share x remaining time^A.
- `hull-*`: the replica's `hull` policy (`slurm_liquid.sim.paper.PaperHull`: a worker and a PS each,
  then the tasks that add the most throughput on each job's best-split speed curve) with its targets
  placed four ways: `ideal` sets them without placing (as `drf-best-split` does), `cpu-first` (the
  policy's own) places CPU-only tasks first through the least-used-node rule, `workers-first` GPU
  workers first, `bundles-first` every job's bundle first, as a DL2 that keeps the bundle round must.
- `bound`: every job alone on the cluster at its peak speed within the per-role cap from its arrival slot
  (no policy that keeps the cap beats it; `drf-best-split`'s split ignores the cap).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from slurm_liquid.sim.paper import (SETTINGS, SLOT_S, PaperBestSplit, PaperHull, PaperOptimus, PaperRun,
                                    make_paper_policy, paper_trace, peak_speed, uses_gpu)

HELD_OUT_SEED = 10_000


def remaining_slots(job) -> float:
    speed = max(job.epochs_per_slot(p, w) for p, w in ((1, 1), (2, 2), (4, 4)))
    return job.remaining() / speed if speed > 0 else math.inf


class SRTF:
    def __init__(self, fraction: float) -> None:
        self.fraction, self.name, self._plans = fraction, f"srtf-{fraction:g}", {}

    def reset(self) -> None:
        pass

    def _plan(self, job, cap: int) -> tuple[float, int, int]:
        key = (job.model, cap)
        if key not in self._plans:
            best: dict[int, tuple[float, int, int]] = {}
            for p in range(1, cap + 1):
                for w in range(1, cap + 1):
                    s = job.epochs_per_slot(p, w)
                    if p + w not in best or s > best[p + w][0]:
                        best[p + w] = (s, p, w)
            top = max(v[0] for v in best.values())
            self._plans[key] = best[min(t for t, v in best.items() if v[0] >= self.fraction * top)]
        return self._plans[key]

    def schedule(self, slot) -> None:
        cap = slot.setting.max_tasks
        for job in sorted(slot.jobs, key=lambda j: (j.remaining() / self._plan(j, cap)[0], j.arrival, j.index)):
            _, p, w = self._plan(job, cap)
            if not slot.add(job, "bundle"):
                return
            for role, n in (("ps", p - 1), ("worker", w - 1)):
                for _ in range(n):
                    if not slot.add(job, role):
                        return


class GainOverRemaining(PaperOptimus):
    def __init__(self, power: float) -> None:
        self.power, self.name = power, f"gain/r^{power:g}"

    def _gain(self, job, cap: int):
        gain, role = PaperOptimus._gain(job, cap)
        if math.isinf(gain):
            return gain, role
        now = job.epochs_per_slot()
        return gain / (job.remaining() / now) ** self.power if now > 0 else gain, role


class ShortFirstDRF(PaperBestSplit):
    def __init__(self, power: float) -> None:
        self.power, self.name = power, f"drf-short^{power:g}"

    def key(self, job, slot) -> float:
        return job.share(slot.setting.nodes) * remaining_slots(job) ** self.power


class Hull(PaperHull):
    """`PaperHull`'s targets placed another way: GPU workers before the rest, or every job's bundle
    first (as a DL2 that placed its bundle round before the rest would)."""

    def __init__(self, place: str) -> None:
        super().__init__(place)
        self.name = f"hull-{place}"

    def schedule(self, slot) -> None:
        if self.place in ("ideal", "cpu-first"):
            return super().schedule(slot)
        targets = {job.id: (ps, workers) for job, ps, workers in self.plan(slot)}
        jobs = [j for j in sorted(slot.jobs, key=lambda j: (j.arrival, j.index)) if j.id in targets]
        if self.place == "bundles-first":
            for job in jobs:
                slot.add(job, "bundle")
        for roles, among in ((("worker",), [j for j in jobs if uses_gpu(j)]), (("ps", "worker"), jobs)):
            added = True
            while added:
                added = False
                for job in among:
                    for role in roles:
                        held = job.ps if role == "ps" else job.workers
                        if held < targets[job.id][role == "worker"] and slot.add(job, role):
                            added = True


def bound_s(setting, seed: int) -> float:
    """Mean JCT with every job alone at its peak speed (within the per-role cap) from its arrival slot."""
    trace = paper_trace(setting, seed)
    return statistics.fmean(j.epochs / peak_speed(j.model, setting.max_tasks) for j in trace) * SLOT_S


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", default="dl2-paper-small", choices=sorted(SETTINGS))
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    setting = SETTINGS[args.setting]
    policies = {name: (lambda name=name: make_paper_policy(name)) for name in ("drf", "optimus", "drf-best-split")}
    for f in (1.0, 0.9, 0.8):
        policies[f"srtf-{f:g}"] = lambda f=f: SRTF(f)
    for a in (0.5, 1.0, 1.5, 2.0):
        policies[f"gain/r^{a:g}"] = lambda a=a: GainOverRemaining(a)
    for a in (0.25, 0.5, 1.0):
        policies[f"drf-short^{a:g}"] = lambda a=a: ShortFirstDRF(a)
    for place in ("ideal", "cpu-first", "workers-first", "bundles-first"):
        policies[f"hull-{place}"] = lambda place=place: Hull(place)
    mean: dict[str, float] = {}
    for name, build in policies.items():
        t0 = time.perf_counter()
        mean[name] = statistics.fmean(PaperRun(setting, paper_trace(setting, s), f"seed{s}").run(build()).avg_jct_s
                                      for s in range(HELD_OUT_SEED, HELD_OUT_SEED + args.seeds))
        print(f"{name:<20} {mean[name] / 3600:7.2f} h  vs drf {mean[name] / mean['drf'] - 1:+6.1%}"
              f"  vs optimus {mean[name] / mean.get('optimus', mean[name]) - 1:+6.1%}  ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    bound = statistics.fmean(bound_s(setting, s) for s in range(HELD_OUT_SEED, HELD_OUT_SEED + args.seeds))
    print(f"{'bound':<20} {bound / 3600:7.2f} h  vs drf {bound / mean['drf'] - 1:+6.1%}  vs optimus "
          f"{bound / mean['optimus'] - 1:+6.1%}  (every job alone at its peak speed from its arrival)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
