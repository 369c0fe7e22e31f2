"""The Slurm commands one placement pass and one elastic slot run, counted by kind, at any size.

    nice -n 10 python benchmarks/scale/commands.py --sizes 1024x5000,10000x100000

Reads are what slurmctld answers every pass whatever the queue holds; writes are per decision (a job
placed, a lease renewed, a job handed to Slurm, a resize signalled). Same fake Slurm as run.py: the
daemon's real CLI backend, answers from generate.py, writes recorded and never applied.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (str(HERE.parents[1]), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from generate import generate  # noqa: E402
from run import fake_client, one_pass, one_slot  # noqa: E402


def kind(argv: list[str]) -> str:
    """The command without its job ids and values: `scontrol update JobId,StartTime`, `scancel --signal`."""
    if argv[0] == "scontrol" and argv[1:2] == ["update"]:
        return "scontrol update " + ",".join(sorted({a.split("=", 1)[0] for a in argv[2:] if "=" in a}))
    words = [a.split("=", 1)[0] for a in argv[1:] if not a.isdigit() and not a.startswith("JobId=")]
    return " ".join([argv[0], *words[:3]])


def count(nodes: int, jobs: int) -> dict[str, collections.Counter]:
    scenario = generate(nodes, jobs)
    topology = fake_client(scenario)[0].topology()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:   # the slot first, as run.py times them
        adjuster, runner = one_slot(scenario, topology, "drf", tmp)
        adjuster.run_slot()
        adjuster.journal.close()
    out["slot drf"] = collections.Counter(kind(c) for c in runner.calls)
    admitter, runner = one_pass(scenario, topology)
    admitter.run_pass()
    out["pass"] = collections.Counter(kind(c) for c in runner.calls)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024x5000,10000x100000")
    args = parser.parse_args(argv)
    print("| nodes x jobs | stage | command | count |\n|---|---|---|---|")
    for size in args.sizes.split(","):
        nodes, jobs = (int(x) for x in size.split("x"))
        for stage, counts in count(nodes, jobs).items():
            for command, n in sorted(counts.items()):
                print(f"| {nodes:,} x {jobs:,} | {stage} | `{command}` | {n:,} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
