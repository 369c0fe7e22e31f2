#!/usr/bin/env python3
"""slurmctld submission throughput with and without job_submit.lua.

    python3 benchmarks/submission/submit_throughput.py [--suite trixie] [--jobs 500] [--blocks 2]
                                                       [--workers 8] [--repeats 5] [--out submit_throughput]

Arm A: JobSubmitPlugins=lua (the shipped liquid.conf); arm B: the same snippet without that line.
cli_filter is off in both (its line is removed from the container's liquid.conf), so only slurmctld
differs. The daemon is stopped and a background loop in the container keeps a fresh heartbeat in
enforce mode, so job_submit.lua takes its full path for every job (reads the heartbeat, sets the
begin time and the AdminComment tag, touches events/submitted) while nothing acts on the jobs.

Each arm gets --jobs submissions in --blocks blocks, in the order A B B A (repeated), so a linear
drift hits both arms alike; --repeats runs that whole sequence again (each repeat gives its own
slowdown, which shows the run-to-run noise; the headline pools every block). Before every block:
`scontrol reconfigure` (slurmctld 24.11 restarts itself) until `scontrol show config` shows the
arm's JobSubmitPlugins, then a few untimed submissions, then `sdiag --reset`. A block is --workers parallel submitters in the container, each running
`sbatch --hold` as alice on a script with #LIQUID lines. Measured per block: jobs/s (wall clock in the
container), the client's sbatch latency, and slurmctld's own time per REQUEST_SUBMIT_BATCH_JOB (sdiag).
Afterwards every job is cancelled, liquid.conf restored, slurmctld reconfigured and the daemon restarted.
Writes submit_throughput.csv (one row per block) and submit_throughput.json next to this file
(--out changes the stem).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import common

HERE = Path(__file__).resolve().parent
NAME = "bench-throughput"
SCRIPT = "/shared/bench-throughput.sh"
BEAT_SCRIPT = "/tmp/bench-heartbeat.sh"
BEAT_PID = "/tmp/bench-heartbeat.pid"
# As the test cluster's daemon would write it (containers/slurm/liquid.toml: lease 20 s, stale after 8 s).
BEAT_LOOP = f"""#!/bin/bash
echo $$ > {BEAT_PID}
while :; do
    echo "$(date +%s) enforce 20 8" > /var/spool/slurm-liquid/.bench-heartbeat
    mv -f /var/spool/slurm-liquid/.bench-heartbeat {common.HEARTBEAT}
    sleep 1
done
"""
SUBMIT_RPC = re.compile(r"REQUEST_SUBMIT_BATCH_JOB\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)")

PROGRAM = r"""
import json, pwd, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
""" + common.USER_PRELUDE + r"""argv = ["sbatch", "--parsable", "--hold", "--job-name=" + spec["name"], "--output=/dev/null", "--chdir=/shared",
        "--gres=gpu:1", spec["script"]]
def one(_):
    t0 = time.perf_counter()
    proc = subprocess.run(argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd="/shared",
                          capture_output=True, text=True, timeout=120)
    return time.perf_counter() - t0, proc.returncode, proc.stdout.strip(), proc.stderr.strip()[-200:]
with ThreadPoolExecutor(spec["workers"]) as pool:
    list(pool.map(one, range(spec["warmup"])))
    subprocess.run(["sdiag", "--reset"], capture_output=True)
    t0 = time.perf_counter()
    results = list(pool.map(one, range(spec["jobs"])))
    wall = time.perf_counter() - t0
sdiag = subprocess.run(["sdiag"], capture_output=True, text=True).stdout
print(json.dumps({"wall": wall, "latencies": [r[0] for r in results if r[1] == 0],
                  "failed": [r[3] for r in results if r[1] != 0], "ids": [r[2] for r in results if r[1] == 0],
                  "sdiag": sdiag}))
"""


def block_order(blocks: int) -> list[str]:
    pattern = ["A", "B", "B", "A"]
    return [pattern[i % 4] for i in range(2 * blocks)]


def tagged_held(suite: str, ids: list[str]) -> int:
    """How many of these jobs carry job_submit.lua's 'held' tag (proves the arm did what it says)."""
    wanted = set(ids)
    count = 0
    for line in common.sh(suite, "scontrol show job -o", timeout=120, check=False).splitlines():
        match = re.match(r"JobId=(\d+) ", line)
        if match and match.group(1) in wanted and "AdminComment=liquid/1 state=held" in line:
            count += 1
    return count


def run_blocks(args: argparse.Namespace, conf: dict[str, str]) -> list[dict]:
    suite = args.suite
    size = args.jobs // args.blocks
    rows = []
    order = [(repeat, arm) for repeat in range(args.repeats) for arm in block_order(args.blocks)]
    for index, (repeat, arm) in enumerate(order):
        common.write(suite, common.LIQUID_CONF, conf[arm])
        took = common.reconfigure_and_wait(suite, "lua" if arm == "A" else None)
        load = common.load_average(suite)
        out = common.py(suite, PROGRAM, {"user": common.USER, "name": NAME, "script": SCRIPT, "jobs": size,
                                         "workers": args.workers, "warmup": args.warmup})
        rpc = SUBMIT_RPC.search(out["sdiag"])
        held = tagged_held(suite, out["ids"])
        row = {"block": index, "repeat": repeat, "arm": arm, "jobs": size, "ok": len(out["latencies"]), "failed": len(out["failed"]),
               "wall_s": out["wall"], "jobs_per_s": len(out["latencies"]) / out["wall"],
               "sbatch_median_s": statistics.median(out["latencies"]) if out["latencies"] else float("nan"),
               "sbatch_p90_s": common.percentile(out["latencies"], 90),
               "rpc_count": int(rpc.group(1)) if rpc else 0,
               "rpc_ave_us": int(rpc.group(2)) if rpc else float("nan"),
               "tagged_held": held, "reconfigure_s": took, "load": load}
        rows.append(row)
        print(f"repeat {repeat} block {index} arm {arm}: {row['jobs_per_s']:.1f} jobs/s, sbatch median {row['sbatch_median_s']:.3f} s, "
              f"slurmctld {row['rpc_ave_us']} us/submit, {held}/{row['ok']} tagged held, load {load}", flush=True)
        if out["failed"]:
            print(f"  {len(out['failed'])} failed, e.g. {out['failed'][0]}", file=sys.stderr)
        common.cancel(suite, NAME)
    return rows


def pooled(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per arm: jobs/s over all its blocks (jobs / wall), slurmctld's mean time per submission."""
    out = {}
    for arm in ("A", "B"):
        mine = [r for r in rows if r["arm"] == arm]
        ok = sum(r["ok"] for r in mine)
        wall = sum(r["wall_s"] for r in mine)
        out[arm] = {"jobs": ok, "wall_s": wall, "jobs_per_s": ok / wall if wall else float("nan"),
                    "rpc_ave_us": (sum(r["rpc_ave_us"] * r["rpc_count"] for r in mine)
                                   / max(sum(r["rpc_count"] for r in mine), 1)),
                    "sbatch_median_s_of_blocks": statistics.median(r["sbatch_median_s"] for r in mine)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--jobs", type=int, default=500, help="timed submissions per arm (default 500)")
    parser.add_argument("--blocks", type=int, default=2, help="blocks per arm, in the order A B B A (default 2)")
    parser.add_argument("--workers", type=int, default=8, help="parallel submitters (default 8)")
    parser.add_argument("--warmup", type=int, default=16, help="untimed submissions before each block")
    parser.add_argument("--repeats", type=int, default=5, help="run the A B B A sequence this many times (default 5)")
    parser.add_argument("--out", default="submit_throughput", help="results file stem next to this script")
    args = parser.parse_args()
    suite = args.suite

    shipped = common.liquid_conf(suite)
    no_filter = common.without(shipped, "CliFilterPlugins")
    conf = {"A": no_filter, "B": common.without(no_filter, "JobSubmitPlugins")}
    if "JobSubmitPlugins" not in conf["A"] or conf["A"] == conf["B"]:
        raise SystemExit(f"{common.LIQUID_CONF_SOURCE} has no JobSubmitPlugins line: nothing to compare")
    common.write(suite, SCRIPT, "#!/bin/sh\n#LIQUID model=resnet50 batch-size=64\nsleep 1\n")
    common.write(suite, BEAT_SCRIPT, BEAT_LOOP, mode=0o755)
    rows: list[dict] = []
    try:
        common.daemon_stop(suite)
        common.sh(suite, f"setsid {BEAT_SCRIPT} >/dev/null 2>&1 </dev/null &")
        time.sleep(1.5)
        rows = run_blocks(args, conf)
    finally:
        common.cancel(suite, NAME)
        common.restore_liquid_conf(suite, reconfigure=True)
        common.sh(suite, f"test -s {BEAT_PID} && kill $(cat {BEAT_PID}); rm -f {BEAT_PID} {BEAT_SCRIPT} {SCRIPT} {common.HEARTBEAT}",
                  check=False)
        common.daemon_start_default(suite)

    per_arm = pooled(rows)
    slowdown = 1 - per_arm["A"]["jobs_per_s"] / per_arm["B"]["jobs_per_s"]
    repeats = []
    for repeat in range(args.repeats):
        arms = pooled([r for r in rows if r["repeat"] == repeat])
        repeats.append({"repeat": repeat, "A_jobs_per_s": arms["A"]["jobs_per_s"], "B_jobs_per_s": arms["B"]["jobs_per_s"],
                        "slowdown": 1 - arms["A"]["jobs_per_s"] / arms["B"]["jobs_per_s"],
                        "rpc_extra_us": arms["A"]["rpc_ave_us"] - arms["B"]["rpc_ave_us"]})
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "suite": suite,
              "jobs_per_arm_per_repeat": args.jobs, "blocks_per_arm": args.blocks, "workers": args.workers,
              "repeats": args.repeats, "order": block_order(args.blocks), "arms": per_arm, "slowdown": slowdown,
              "rpc_extra_us": per_arm["A"]["rpc_ave_us"] - per_arm["B"]["rpc_ave_us"], "per_repeat": repeats,
              "target_slowdown": 0.10, "target_met": slowdown < 0.10, "blocks": rows}
    with (HERE / f"{args.out}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (HERE / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")

    print(f"\n{args.repeats} x {args.jobs} submissions per arm, {args.workers} parallel submitters, "
          f"blocks {' '.join(block_order(args.blocks))} per repeat")
    for r in repeats:
        print(f"repeat {r['repeat']}: A {r['A_jobs_per_s']:.1f} jobs/s, B {r['B_jobs_per_s']:.1f} jobs/s, "
              f"slowdown {100 * r['slowdown']:+.1f} %, slurmctld {r['rpc_extra_us']:+.0f} us/submit")
    print(f"{'arm':28s} {'jobs':>5s} {'jobs/s':>7s} {'slurmctld us/submit':>20s}")
    for arm, label in (("A", "A JobSubmitPlugins=lua"), ("B", "B no job_submit plugin")):
        s = per_arm[arm]
        print(f"{label:28s} {s['jobs']:5d} {s['jobs_per_s']:7.1f} {s['rpc_ave_us']:20.0f}")
    print(f"pooled slowdown with job_submit.lua: {100 * slowdown:.1f} % (target < 10 %: {'met' if slowdown < 0.10 else 'NOT met'}); "
          f"slurmctld time per submission +{result['rpc_extra_us']:.0f} us")
    held_ok = all(r["tagged_held"] == r["ok"] if r["arm"] == "A" else r["tagged_held"] == 0 for r in rows)
    if not held_ok:
        print("WARNING: some jobs' tags do not match their arm (see tagged_held in the CSV)", file=sys.stderr)
    return 0 if held_ok and not any(r["failed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
