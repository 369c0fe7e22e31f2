"""Which teacher, and which placement order, for the replica's DL2? Chosen on validation traces.

    nice python benchmarks/dl2/paper_teachers.py [--setting dl2-paper-small] [--seeds 8] [--first 5000]

Runs the replica's DRF, Optimus and best-split DRF beside three families of hand-written rules on the
validation traces (seeds 5000-5007: disjoint from the training traces below 5000 and from the
held-out traces 10000-10007 of `paper.py`, which `--first 10000` reports only after the choice),
under each placement (`--placement`; every rule of a table under the same one), and prints each one's
mean JCT against DRF and Optimus. The families (they measure how far a teacher could take a warm-up):
- `srtf-F`: shortest remaining time first, each job given the (PS, workers) split that runs it fastest
  with the fewest tasks reaching F of its peak speed, while the cluster takes it.
- `gain/r^A`: Optimus's greedy task-by-task rule, its gain (cut in remaining time) divided by the job's
  remaining time to the power A (favouring short jobs).
- `drf-short^A`: best-split DRF with its queue keyed by dominant share x remaining time^A.
- `hull` (`slurm_liquid.sim.paper.PaperHull`: a worker and a PS each, then the tasks that add the most
  throughput on each job's speed curve) under the table's placement, and `hull-order-*`: its counts
  placed at the end of the slot through the least-used-node rule in another order (run under the
  artifact's placement, which then places each task as given and skips a refused one): `cpu-first`
  CPU-only tasks first (the `cpu-first` placement's order), `workers-first` GPU workers first,
  `bundles-first` every job's bundle first. These choose the order of the `cpu-first` placement.
- `bound`: every job alone on the cluster at its peak speed within the per-role cap from its arrival slot
  (no policy that keeps the cap beats it; `drf-best-split`'s split ignores the cap).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from slurm_liquid.sim.paper import (PLACEMENTS, SETTINGS, SLOT_S, PaperBestSplit, PaperHull, PaperOptimus, PaperRun,
                                    Slot, make_paper_policy, paper_trace, peak_speed, place_cpu_first, uses_gpu)

VALIDATION = 5_000  # seeds 5000-5007: every design choice of the replica's DL2 is made on these
HELD_OUT = 10_000  # seeds 10000-10007: measured after the choices (`paper.py`)


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


class Ordered(PaperHull):
    """`PaperHull`'s counts (made on a `cpu-first` shadow of the slot) placed at the end of the slot in
    `order`, a task the least-used node refuses skipped; for a slot under the artifact's placement."""

    def __init__(self, order: str) -> None:
        self.order, self.name = order, f"hull-order-{order}"

    def schedule(self, slot) -> None:
        shadow = Slot(slot.setting, slot.ts, slot.jobs, "cpu-first")
        super().schedule(shadow)
        targets = {j.id: (j.ps, j.workers) for j in slot.jobs if j.ps or j.workers}
        if self.order == "cpu-first":
            return place_cpu_first(slot, targets)
        jobs = [j for j in sorted(slot.jobs, key=lambda j: (j.arrival, j.index)) if j.id in targets]
        for job in slot.jobs:
            job.ps = job.workers = 0
        if self.order == "bundles-first":
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
    ap.add_argument("--first", type=int, default=VALIDATION, help=f"first trace seed (default {VALIDATION}, the "
                    f"validation traces; {HELD_OUT} reports the held-out ones)")
    ap.add_argument("--placement", default=",".join(PLACEMENTS), help=f"one or more of {', '.join(PLACEMENTS)}")
    args = ap.parse_args()
    placements = [p for p in args.placement.split(",") if p]
    if not placements or any(p not in PLACEMENTS for p in placements):
        ap.error(f"--placement must name one or more of {', '.join(PLACEMENTS)}, got {args.placement!r}")
    setting = SETTINGS[args.setting]
    seeds = range(args.first, args.first + args.seeds)
    policies = {name: (lambda name=name: make_paper_policy(name)) for name in ("drf", "optimus", "drf-best-split", "hull")}
    for f in (1.0, 0.9, 0.8):
        policies[f"srtf-{f:g}"] = lambda f=f: SRTF(f)
    for a in (0.5, 1.0, 1.5, 2.0):
        policies[f"gain/r^{a:g}"] = lambda a=a: GainOverRemaining(a)
    for a in (0.25, 0.5, 1.0):
        policies[f"drf-short^{a:g}"] = lambda a=a: ShortFirstDRF(a)
    orders = {f"hull-order-{o}": (lambda o=o: Ordered(o)) for o in ("cpu-first", "workers-first", "bundles-first")}
    print(f"{args.setting}, seeds {seeds[0]}-{seeds[-1]}")
    for placement in placements:
        print(f"\nplacement {placement}")
        mean: dict[str, float] = {}
        for name, build in list(policies.items()) + (list(orders.items()) if placement == "artifact" else []):
            t0 = time.perf_counter()
            mean[name] = statistics.fmean(PaperRun(setting, paper_trace(setting, s), f"seed{s}", placement).run(build()).avg_jct_s
                                          for s in seeds)
            print(f"{name:<24} {mean[name] / 3600:7.2f} h  vs drf {mean[name] / mean['drf'] - 1:+6.1%}"
                  f"  vs optimus {mean[name] / mean.get('optimus', mean[name]) - 1:+6.1%}  ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    bound = statistics.fmean(bound_s(setting, s) for s in seeds)
    print(f"\n{'bound':<24} {bound / 3600:7.2f} h  (every job alone at its peak speed from its arrival)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
