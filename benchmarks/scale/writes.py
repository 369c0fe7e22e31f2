"""Every Slurm write of one placement pass (placer liquid) and one drf slot, in order, and the slot's
journal rows: to check that a change to the daemon's speed changes none of what it does.

    python benchmarks/scale/writes.py ROOT NODESxJOBS OUT

ROOT is the checkout whose `slurm_liquid` runs (this one, or an older commit's worktree: run it with
PYTHONPATH=ROOT); the cluster comes from this directory's generate.py either way. With the `liquid`
placer the pass is deterministic (the default placer's GA searches for a fixed time); the clocks of
the daemon and of the journal are fixed, so two runs of the same code write the same file.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    root, size, out = Path(argv[0]).resolve(), argv[1], Path(argv[2])
    sys.path[:0] = [str(root), str(HERE)]
    from fakeslurm import client
    from generate import NOW, generate

    import slurm_liquid
    from slurm_liquid.config import parse as parse_config
    from slurm_liquid.daemon.admit import Admitter
    from slurm_liquid.daemon.elastic import Adjuster
    from slurm_liquid.daemon.journal import Journal

    if not Path(slurm_liquid.__file__).resolve().is_relative_to(root):
        raise SystemExit(f"slurm_liquid comes from {slurm_liquid.__file__}, not {root}: set PYTHONPATH={root}")
    nodes, jobs = (int(x) for x in size.split("x"))
    cfg = parse_config('[daemon]\nmode = "enforce"\nplacer = "liquid"\n[elastic]\npolicy = "drf"\n'
                       'min_change_interval_s = 300\n')
    scenario = generate(nodes, jobs)

    def writes(runner) -> list[str]:
        return [" ".join(c) for c in runner.calls
                if c[0] == "scancel" or (c[0] == "scontrol" and c[1] not in ("show", "write") and "--version" not in c)]

    lines = ["# pass"]
    slurm, runner = client(scenario)
    topology = slurm.topology()
    started = time.perf_counter()
    Admitter(slurm, cfg, topology, now=lambda: NOW).run_pass()
    pass_s = time.perf_counter() - started
    lines += writes(runner)
    with tempfile.TemporaryDirectory() as tmp:
        slurm, runner = client(scenario)
        adjuster = Adjuster(slurm, cfg, topology, Journal(Path(tmp) / "journal.sqlite", now=lambda: NOW), now=lambda: NOW)
        started = time.perf_counter()
        report = adjuster.run_slot()
        slot_s = time.perf_counter() - started
        lines += ["# slot", *writes(runner), "# journal"]
        lines += [repr(row) for row in adjuster.journal.db.execute(
            "SELECT job_id, old, new, phase, started, updated, note, deadline, signal, why, tries FROM changes ORDER BY id")]
        adjuster.journal.close()
    out.write_text("\n".join(lines) + "\n")
    print(f"{size}: pass {pass_s:.2f} s, slot {slot_s:.2f} s, {len(lines)} lines, {len(report.started)} resizes started")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
