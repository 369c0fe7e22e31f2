"""Count generated hostile inputs across the parsers, codecs, daemon pass and slot, and node agent.

    python benchmarks/robustness/fuzz.py --count 2000      # 2000 inputs per case; prints a table

Every area file (fuzz_parsers.py, fuzz_daemon.py, fuzz_agent.py) lists CASES: (name, one input from a
Random). A case's own clear error counts as handled; any exception that escapes is a traceback,
printed with the seed that reproduces it. The run exits 1 when any traceback was seen."""

from __future__ import annotations

import argparse
import importlib
import logging
import random
import sys
import time
import traceback
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
AREAS = ("fuzz_parsers", "fuzz_daemon", "fuzz_agent")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="inputs per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="run only cases whose name contains this")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)   # the daemon logs every skipped poison job: keep the table readable
    total = tracebacks = 0
    print(f"{'area':14s} {'case':24s} {'inputs':>7s} {'tracebacks':>10s} {'seconds':>8s}")
    for area in AREAS:
        try:
            module = importlib.import_module(area)
        except ImportError as exc:
            print(f"{area:14s} (not present: {exc})")
            continue
        for name, case in module.CASES:
            if args.only and args.only not in name:
                continue
            started, bad = time.perf_counter(), 0
            for i in range(args.count):
                seed = zlib.crc32(f"{args.seed}/{area}/{name}/{i}".encode())
                try:
                    case(random.Random(seed))
                except Exception:  # noqa: BLE001 -- that is what this counts
                    bad += 1
                    if bad <= 2:
                        print(f"--- {area}/{name} seed {seed}:\n{traceback.format_exc(limit=6)}", file=sys.stderr)
            total += args.count
            tracebacks += bad
            print(f"{area:14s} {name:24s} {args.count:7d} {bad:10d} {time.perf_counter() - started:8.1f}", flush=True)
    print(f"total: {total} generated inputs, {tracebacks} tracebacks")
    return 1 if tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
