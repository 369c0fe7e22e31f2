"""The daemon's placement pass and elastic slot on clusters of 256 to 4,096 nodes and 1,000 to 20,000 jobs.

For each size: generate the answers of such a cluster (generate.py, in Slurm 24.11's shape), put the
daemon's real CLI backend in front of them (fakeslurm.py: Slurm answers instantly, writes are
recorded), and time, several times over, one placement pass (`Admitter.run_pass`, enforce mode, the
default placer `auto`) and one elastic slot (`Adjuster.run_slot`: the one loop's live back end, policies
drf and static). Where the
time goes is measured with timers around the stages (JSON decode, parsing to models, the node filter,
placing, the ledger's codecs, the policy, the journal, writing to Slurm), the rest being the pass's
own bookkeeping; `--profile` adds cProfile's top functions of the largest size.

    nice -n 10 python benchmarks/scale/run.py                    # the default sizes, writes results.md
    python benchmarks/scale/run.py --sizes 256x1000 --reps 1     # one size, quick
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from fakeslurm import client as fake_client  # noqa: E402
from generate import NOW, generate  # noqa: E402

from slurm_liquid.config import parse as parse_config  # noqa: E402
from slurm_liquid.speed import MeasuredSpeedModel  # noqa: E402

PAIRED = ((256, 1000), (1024, 5000), (2048, 10000), (4096, 20000))
SWEEP = ((4096, 1000), (4096, 5000), (4096, 10000))     # jobs alone grow (with PAIRED's last)
STAGES = ("decode", "parse", "filter", "place", "ledger", "policy", "journal", "write")
STAGE_NAMES = {"decode": "JSON decode", "parse": "parse to models", "filter": "node filter", "place": "placing",
               "ledger": "tag/record codecs", "policy": "policy", "journal": "journal (SQLite)",
               "write": "writing to Slurm"}


def config(policy: str):
    return parse_config(f'[daemon]\nmode = "enforce"\nplacer = "auto"\n[elastic]\npolicy = "{policy}"\n'
                        f'min_change_interval_s = 300\n')


# ------------------------------------------------------------ stage timers

class Stages:
    """Wall time per stage: wrappers around the functions of each stage; a call made inside an
    already timed call counts to the outer one (so the stages add up without double counting)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._depth = 0
        self._patched: list[tuple[object, str, object]] = []

    def _wrap(self, stage: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[stage] += time.perf_counter() - start
                self._depth -= 1
        return timed

    def patch(self, stage: str, owner: object, name: str) -> None:
        raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._patched.append((owner, name, raw))
        if isinstance(raw, classmethod):
            setattr(owner, name, classmethod(self._wrap(stage, raw.__func__)))
        elif isinstance(raw, staticmethod):
            setattr(owner, name, staticmethod(self._wrap(stage, raw.__func__)))
        else:
            setattr(owner, name, self._wrap(stage, raw))

    def restore(self) -> None:
        for owner, name, raw in reversed(self._patched):
            setattr(owner, name, raw)
        self._patched.clear()

    def reset(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)


@contextmanager
def stages() -> Iterator[Stages]:
    from slurm_liquid.daemon import admit, journal
    from slurm_liquid.loop import place
    from slurm_liquid.ledger import record, tag
    from slurm_liquid.placement import engine, ga, slurm_rules
    from slurm_liquid.policy import drf
    from slurm_liquid.slurm import cli_backend, parse

    timers = Stages()
    for name in ("loads", "_loads_entries"):
        if hasattr(parse, name):
            timers.patch("decode", parse, name)
    for name in ("jobs_from_document", "nodes_from_document"):
        timers.patch("parse", parse, name)
    if hasattr(admit, "job_view"):     # the node filter before JobViews
        timers.patch("filter", admit, "job_view")
    if hasattr(slurm_rules, "JobViews"):
        for name in ("__init__", "view", "update"):
            timers.patch("filter", slurm_rules.JobViews, name)
        for name in ("snapshot", "fits", "shard_node", "leaf_capacity"):
            timers.patch("filter", slurm_rules.View, name)
    for name in ("place", "place_all", "place_on"):
        timers.patch("place", engine.IndexedPlacer, name)
    for name in ("place", "place_all"):
        timers.patch("place", ga.GroupingGA, name)
    timers.patch("place", place.PlaceStage, "place")
    for name in ("parse", "render", "to"):
        timers.patch("ledger", tag.Tag, name)
    timers.patch("ledger", record.Record, "parse")
    timers.patch("ledger", record.Record, "render")
    for owner in (admit, tag):
        timers.patch("ledger", owner, "with_tag")
    timers.patch("policy", drf.DRF, "decide")
    timers.patch("policy", MeasuredSpeedModel, "prepare")     # the speed room's batched fit, before the policy
    for name in ("begin", "advance", "recent", "unfinished"):
        timers.patch("journal", journal.Journal, name)
    for name in ("update_job", "signal", "release", "requeue_hold", "hold"):
        timers.patch("write", cli_backend.CliBackend, name)
    try:
        yield timers
    finally:
        timers.restore()


# ------------------------------------------------------------ one size

@dataclass
class Measure:
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)       # process time: less moved by other work on the machine
    stages: list[dict[str, float]] = field(default_factory=list)
    outcome: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else math.nan

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu) if self.cpu else math.nan

    def stage(self, name: str) -> float:
        return statistics.median(s[name] for s in self.stages) if self.stages else math.nan

    def other(self) -> float:
        return statistics.median(t - sum(s.values()) for t, s in zip(self.seconds, self.stages)) if self.stages else math.nan


@dataclass
class Row:
    nodes: int
    jobs: int
    squeue_mib: float
    admit: Measure
    slot: Measure
    static: Measure


def one_pass(scenario, topology):
    from slurm_liquid.daemon.admit import Admitter

    slurm, runner = fake_client(scenario)
    admitter = Admitter(slurm, config("drf"), topology, now=lambda: NOW)
    return admitter, runner


def one_slot(scenario, topology, policy: str, journal_dir: str, kind=None):
    from slurm_liquid.daemon.elastic import Adjuster
    from slurm_liquid.daemon.journal import Journal

    slurm, runner = fake_client(scenario)
    path = Path(journal_dir) / f"journal-{time.monotonic_ns()}.sqlite"
    return (kind or Adjuster)(slurm, config(policy), topology, Journal(str(path)), now=lambda: NOW), runner


def measure(nodes: int, jobs: int, reps: int, slot_reps: int, profile: Path | None = None, log=print) -> Row:
    scenario = generate(nodes, jobs)
    _ = scenario.squeue_text, scenario.nodes_text          # Slurm's answer is ready before the clock starts
    slurm, _runner = fake_client(scenario)
    topology = slurm.topology()                           # read once at daemon start, as cli.py does
    row = Row(nodes, jobs, len(scenario.squeue_text) / 2 ** 20, Measure(), Measure(), Measure())
    with tempfile.TemporaryDirectory() as tmp, stages() as timers:
        started: dict[str, dict] = {}
        for rep in range(reps):
            for what, measure_, make in (
                    ("slot", row.slot, lambda: one_slot(scenario, topology, "drf", tmp)),
                    ("static", row.static, lambda: one_slot(scenario, topology, "static", tmp)),
                    ("admit", row.admit, lambda: one_pass(scenario, topology))):
                if what == "slot" and rep >= slot_reps:
                    continue
                runner_owner, runner = make()
                timers.reset()
                start, cpu = time.perf_counter(), time.process_time()
                report = runner_owner.run_pass() if what == "admit" else runner_owner.run_slot()
                measure_.seconds.append(time.perf_counter() - start)
                measure_.cpu.append(time.process_time() - cpu)
                measure_.stages.append(dict(timers.seconds))
                if what == "admit":
                    measure_.outcome = (f"placed {len(report.placed)}, waiting {len(report.waiting)}, renewed "
                                        f"{len(report.renewed)}, released {len(report.released)}, failed {len(report.failed)}, "
                                        f"{len(runner.updates)} updates")
                elif what == "slot":
                    batches = getattr(runner_owner.journal, "batches", None)   # None: before Journal.batch
                    measure_.outcome = (f"decided {len(report.decided)}, started {len(report.started)}, skipped "
                                        f"{len(report.skipped)}, failed {len(report.failed)}, {len(runner.actions)} signals"
                                        + (f", {batches} journal batch commits" if batches is not None else ""))
                if what != "admit":
                    runner_owner.journal.close()
            slot = f"{row.slot.seconds[-1]:.2f} s" if rep < slot_reps else "not run"
            log(f"  {nodes} nodes x {jobs} jobs, rep {rep + 1}: pass {row.admit.seconds[-1]:.2f} s, "
                f"slot drf {slot}, slot static {row.static.seconds[-1]:.3f} s")
        if profile is not None:
            for what, make, call in (("pass", lambda: one_pass(scenario, topology)[0], "run_pass"),
                                     ("slot", lambda: one_slot(scenario, topology, "drf", tmp)[0], "run_slot")):
                owner = make()
                prof = cProfile.Profile()
                prof.runcall(getattr(owner, call))
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
                (profile / f"profile-{what}-{nodes}x{jobs}.txt").write_text(out.getvalue())
    return row


# ------------------------------------------------------------ report

def slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) against log(jobs): 1 is linear growth."""
    pts = [(math.log(j), math.log(t)) for j, t in points if t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.machine()}, {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"load average {load} at the end (the machine is shared: wall times are upper bounds)")


def fmt(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def table(rows: list[Row]) -> str:
    head = ["nodes", "jobs", "squeue MiB", "pass s", "pass CPU s", "slot drf s", "slot drf CPU s", "slot static s",
            "pass + slot s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append(f"| {r.nodes} | {r.jobs} | {r.squeue_mib:.0f} | {fmt(r.admit.median)} | {fmt(r.admit.cpu_median)} | "
                     f"{fmt(r.slot.median)} | {fmt(r.slot.cpu_median)} | {fmt(r.static.median, 3)} | "
                     f"{fmt(r.admit.median + r.slot.median)} |")
    return "\n".join(lines)


def stage_table(rows: list[Row], which: str) -> str:
    head = ["nodes", "jobs", "total s", *(STAGE_NAMES[s] for s in STAGES), "rest of the pass"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        m = {"admit": r.admit, "slot": r.slot}[which]
        if not m.seconds:
            continue
        cells = [fmt(m.stage(s)) for s in STAGES]
        lines.append(f"| {r.nodes} | {r.jobs} | {fmt(m.median)} | " + " | ".join(cells) + f" | {fmt(m.other())} |")
    return "\n".join(lines)


def growth(rows: list[Row]) -> str:
    out = []
    for label, pick in (("nodes and jobs grow together (256x1000 .. 4096x20000)", lambda r: (r.nodes, r.jobs) in PAIRED),
                        ("jobs alone grow on 4,096 nodes", lambda r: r.nodes == 4096)):
        every = sorted((r for r in rows if pick(r)), key=lambda r: r.jobs)
        for name, get in (("pass", lambda r: r.admit.median), ("slot drf", lambda r: r.slot.median),
                          ("pass + slot", lambda r: r.admit.median + r.slot.median)):
            chosen = [r for r in every if not math.isnan(get(r))]
            if len(chosen) < 2:
                continue
            s = slope([(r.jobs, get(r)) for r in chosen])
            ratios = ", ".join(f"x{get(b) / get(a):.2f} for x{b.jobs / a.jobs:.1f} jobs"
                               for a, b in zip(chosen, chosen[1:]) if get(a) > 0)
            verdict = "linear or better" if s is not None and s <= 1.1 else "FASTER than linear"
            out.append(f"- {label}, {name}: log-log slope {s:.2f} ({verdict}); step ratios {ratios}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=None,
                        help="NODESxJOBS,... (default: 256x1000,1024x5000,2048x10000,4096x20000 and 4096 nodes with "
                             "1000, 5000, 10000 jobs)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--slot-reps", type=int, default=1,
                        help="repetitions of the drf slot (slow while daemon/elastic.py walks every node per resize)")
    parser.add_argument("--slot-sizes", default="paired", choices=("paired", "all", "none"),
                        help="the sizes whose drf slot is timed (paired: the 256x1000 .. 4096x20000 series)")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size (profile-*.txt here)")
    parser.add_argument("--out", type=Path, default=HERE / "results.md", help="where to write the report ('-': none)")
    args = parser.parse_args(argv)
    sizes = ([tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")] if args.sizes
             else [*PAIRED, *SWEEP])
    largest = max(sizes, key=lambda s: (s[1], s[0]))
    rows = []
    for nodes, jobs in sizes:
        print(f"{nodes} nodes, {jobs} jobs:", flush=True)
        slot = args.slot_sizes == "all" or (args.slot_sizes == "paired" and (nodes, jobs) in PAIRED)
        rows.append(measure(nodes, jobs, args.reps, args.slot_reps if slot else 0,
                            HERE if args.profile and (nodes, jobs) == largest else None, log=lambda s: print(s, flush=True)))
    rows.sort(key=lambda r: (r.nodes, r.jobs))
    text = table(rows)
    print(text)
    print(stage_table(rows, "admit"))
    print(stage_table(rows, "slot"))
    print(growth(rows))
    for r in rows:
        print(f"{r.nodes}x{r.jobs}: pass {r.admit.outcome}" + (f"; slot {r.slot.outcome}" if r.slot.outcome else ""))
    if str(args.out) != "-":
        command = "python benchmarks/scale/run.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
        args.out.write_text(report(command, rows, args.reps))
        print(f"wrote {args.out}")
    return 0


def report(command: str, rows: list[Row], reps: int) -> str:
    outcomes = "\n".join(f"- {r.nodes} x {r.jobs}: pass {r.admit.outcome}" + (f"; slot drf {r.slot.outcome}" if r.slot.outcome else "")
                         for r in rows)
    return f"""# The daemon at cluster scale

`nice -n 10 {command}` (median of {reps} repetitions per size; Slurm's own time to answer left out).

Machine: {machine()}.

## Time per pass

{table(rows)}

## Where the placement pass's time goes (seconds, median)

{stage_table(rows, "admit")}

## Where the elastic slot's time goes (seconds, median; policy drf)

{stage_table(rows, "slot")}

## Growth

{growth(rows)}

## What each pass did

{outcomes}
"""


if __name__ == "__main__":
    sys.exit(main())
