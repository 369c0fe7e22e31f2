#!/usr/bin/env python3
"""Time `containers/cluster up` cold, after a restart of its containers, and warm.

    python3 benchmarks/cluster/time_up.py [--suite trixie] [--cold]

--cold first removes the suite's images, the debian base image and the build cache
(containers/.build), so everything is made again: debootstrap, apt, the wheelhouse.
Writes one row per measurement to benchmarks/cluster/results.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLUSTER = [sys.executable, str(REPO / "containers" / "cluster")]
RESULTS = Path(__file__).with_name("results.csv")


def timed(suite: str, *args: str) -> float:
    start = time.monotonic()
    subprocess.run([*CLUSTER, "--suite", suite, *args], check=True, timeout=3600)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--cold", action="store_true", help="also measure a cold start (removes images and caches)")
    args = parser.parse_args()
    rows = []
    if args.cold:
        subprocess.run([*CLUSTER, "--suite", args.suite, "down"], check=True, timeout=300)
        images = [f"slurm-liquid:{args.suite}", f"slurm-liquid-slurm:{args.suite}", f"debian:{args.suite}"]
        subprocess.run(["docker", "rmi", "-f", *images], capture_output=True, timeout=300)
        shutil.rmtree(REPO / "containers" / ".build", ignore_errors=True)
        rows.append(("cold: no images, no wheelhouse", timed(args.suite, "up")))
    rows.append(("containers recreated (as after a code change)", timed(args.suite, "up", "--recreate")))
    rows.append(("warm: cluster up and current", timed(args.suite, "up")))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    new = not RESULTS.exists()
    with RESULTS.open("a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(["date", "suite", "case", "seconds", "cpus", "machine"])
        for case, seconds in rows:
            writer.writerow([stamp, args.suite, case, f"{seconds:.1f}", len(os.sched_getaffinity(0)),
                             platform.machine()])
            print(f"{args.suite:9s} {case:48s} {seconds:7.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
