#!/usr/bin/env python3
"""GPU idle gap between a job ending and the next held liquid job starting: event-driven vs polling.

    python3 benchmarks/submission/idle_gap.py [--suite trixie] [--trials 5] [--block-s 12] [--lease 60] [--seed 0]

One trial: four plain 4-GPU jobs (one per node, -w gpuNN) fill all 16 GPUs and sleep --block-s
seconds; once they run, a liquid job that needs 4 GPUs (--gres=gpu:4, #LIQUID model=bert-large
batch-size=32 min-gpus=4 max-gpus=4) is submitted, so job_submit.lua holds it and the daemon cannot
place it. The gap is the liquid job's start minus the first blocking job's end, measured three ways:

    sacct   Start - End from accounting (1 s resolution)
    script  the liquid job script's first `date +%s.%N` minus the blocking scripts' last one
            (the time no process used the GPUs; containers share one clock)
    squeue  first poll (every --poll-s in the container) that saw the liquid job running minus the
            first that saw a blocking job leave RUNNING

Arms, alternated trial by trial (each round in a rotated order), the daemon restarted for each, then
a random wait in [0, poll_s) so that the job ends at a random phase of the daemon's polling:
    events   slurm-liquid daemon                      (EpilogSlurmctld touches events/ended)
    poll30   slurm-liquid daemon --no-events --poll 30 (polling at the shipped default poll_s)
    poll5    slurm-liquid daemon --no-events --poll 5  (the test cluster's poll_s)

Lease: the test cluster's liquid.toml has lease_s = 20, below 2 x 30 s, so with --poll 30 the
lease can run out between two passes (config.parse refuses lease_s < 2 x poll_s; builds whose
with_overrides does not check --poll run anyway, newer ones refuse to start). The held job is then
eligible, and either Slurm's own scheduler starts it on its next cycle or the daemon's next pass
places it. --lease 60 (default) runs every arm with a copy of that file with lease_s = 60, the
shipped ratio; --lease 0 keeps the cluster's file. Who started the job (the daemon's "placed" tag,
or a lapsed lease) is recorded per trial from its AdminComment.

Writes idle_gap.csv (one row per trial) and idle_gap.json next to this file (--out changes the
stem); afterwards the jobs are cancelled and the daemon restarted as the cluster starts it.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import common

HERE = Path(__file__).resolve().parent
BLOCK = "bench-idle-block"
LIQUID = "bench-idle-liquid"
CONFIG = "/tmp/bench-idle-gap.toml"
STAMPS = "/shared/bench-idle-gap"
ARMS = {"events": [], "poll30": ["--no-events", "--poll", "30"], "poll5": ["--no-events", "--poll", "5"]}
# The daemon polls on a fixed grid from its start: a random wait in [0, poll_s) before each trial puts
# the blocking jobs' end at a random point of that grid (without it every trial lands on the same
# phase; events: the cluster's poll_s, 5 s, the safety net of that arm).
PHASE_S = {"events": 5.0, "poll30": 30.0, "poll5": 5.0}
NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]

# One trial, in the container as root (each sbatch as alice). Prints the job ids, the scripts' own
# time stamps and what squeue showed when.
PROGRAM = r"""
import json, os, pwd, subprocess, sys, time
""" + common.USER_PRELUDE + r"""stamps = spec["stamps"]
def sbatch(*argv):
    proc = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--chdir=/shared", *argv],
                          user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env, cwd="/shared",
                          capture_output=True, text=True, timeout=60)
    if proc.returncode:
        raise SystemExit("sbatch failed: " + proc.stderr)
    return proc.stdout.strip().split(";")[0]
def states(ids):
    out = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T"], capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())
def wait(what, test, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = test()
        if got:
            return got
        time.sleep(spec["poll_s"])
    raise SystemExit("timed out waiting for " + what)
blocks = [sbatch("--job-name=" + spec["block_name"], "-w", node, "--gres=gpu:4",
                 "--wrap", "sleep %s; date +%%s.%%N > %s/block-%s.end" % (spec["block_s"], stamps, node))
          for node in spec["nodes"]]
wait("the blocking jobs to run", lambda: all(states(blocks).get(j) == "RUNNING" for j in blocks), 60)
liquid = sbatch("--job-name=" + spec["liquid_name"], "--gres=gpu:4", spec["script"])
submitted = time.time()
block_gone = liquid_running = None
deadline = time.time() + spec["timeout_s"]
while time.time() < deadline and liquid_running is None:
    now = time.time()
    seen = states(blocks + [liquid])
    if block_gone is None and any(seen.get(j) != "RUNNING" for j in blocks):
        block_gone = now
    if seen.get(liquid) in ("RUNNING", "COMPLETING") or (liquid not in seen):
        liquid_running = now
    time.sleep(spec["poll_s"])
wait("the liquid job to end", lambda: liquid not in states([liquid]) or states([liquid]).get(liquid) == "COMPLETED", 90)
def stamp(name):
    try:
        return float(open(os.path.join(stamps, name)).read().strip())
    except (OSError, ValueError):
        return None
print(json.dumps({"blocks": blocks, "liquid": liquid, "submitted": submitted, "squeue_block_gone": block_gone,
                  "squeue_liquid_running": liquid_running,
                  "block_ends": [stamp("block-%s.end" % n) for n in spec["nodes"]],
                  "liquid_start": stamp("liquid.start")}))
"""


def bench_config(suite: str, lease: int) -> list[str]:
    """--config flags for the daemon: the cluster's liquid.toml with lease_s = `lease` (none for 0)."""
    if not lease:
        return []
    text = common.sh(suite, "cat /etc/slurm/liquid.toml")
    text, count = re.subn(r"(?m)^lease_s\s*=.*$", f"lease_s = {lease}", text)
    if count != 1:
        raise SystemExit("the cluster's liquid.toml has no single lease_s line")
    common.write(suite, CONFIG, text)
    return ["--config", CONFIG]


def accounting(suite: str, ids: list[str], timeout: float = 30) -> dict[str, dict[str, str]]:
    """sacct's Start/End (epoch seconds), State and Comment, once every job has its end."""
    deadline = time.monotonic() + timeout
    while True:
        out = common.sh(suite, f"SLURM_TIME_FORMAT=%s sacct -X -n -P -j {','.join(ids)} "
                               "-o JobID,Start,End,State,Comment", check=False)
        rows = {}
        for line in out.splitlines():
            job, start, end, state, comment = (line.split("|", 4) + [""] * 5)[:5]
            rows[job] = {"start": start, "end": end, "state": state, "comment": comment}
        if all(rows.get(j, {}).get("end", "Unknown").isdigit() for j in ids) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def admin_comment(suite: str, job: str) -> str:
    out = common.sh(suite, f"scontrol show job -o {job}", check=False)
    match = re.search(r"AdminComment=(.*?)(?= [A-Z][A-Za-z]*=|$)", out)
    return match.group(1).strip() if match else ""


def trial(args: argparse.Namespace, arm: str, config_flags: list[str], number: int, delay: float) -> dict:
    suite = args.suite
    common.daemon_stop(suite)
    common.daemon_start(suite, [*config_flags, *ARMS[arm]])
    time.sleep(delay)
    common.sh(suite, f"rm -rf {STAMPS} && mkdir -m 1777 {STAMPS}")
    common.write(suite, f"{STAMPS}/liquid.sh", "#!/bin/sh\n#LIQUID model=bert-large batch-size=32 min-gpus=4 max-gpus=4\n"
                                               f"date +%s.%N > {STAMPS}/liquid.start\nsleep 1\n")
    log_from = common.log_length(suite)
    out = common.py(suite, PROGRAM, {"user": common.USER, "nodes": NODES, "block_s": args.block_s, "stamps": STAMPS,
                                     "block_name": BLOCK, "liquid_name": LIQUID, "script": f"{STAMPS}/liquid.sh",
                                     "poll_s": args.poll_s, "timeout_s": args.block_s + 120}, timeout=args.block_s + 300)
    tag = admin_comment(suite, out["liquid"])
    acct = accounting(suite, [*out["blocks"], out["liquid"]])
    log = [line for line in common.log_lines(suite, log_from)]
    block_ends = [float(acct[j]["end"]) for j in out["blocks"] if acct.get(j, {}).get("end", "").isdigit()]
    start = acct.get(out["liquid"], {}).get("start", "")
    stamped_ends = [t for t in out["block_ends"] if t is not None]
    row = {"trial": number, "arm": arm, "delay_s": delay, "liquid_job": out["liquid"],
           "gap_sacct_s": float(start) - min(block_ends) if start.isdigit() and block_ends else None,
           "gap_script_s": out["liquid_start"] - min(stamped_ends) if out["liquid_start"] and stamped_ends else None,
           "gap_squeue_s": (out["squeue_liquid_running"] - out["squeue_block_gone"]
                            if out["squeue_liquid_running"] and out["squeue_block_gone"] else None),
           "block_spread_s": max(stamped_ends) - min(stamped_ends) if stamped_ends else None,
           "started_by": "daemon" if "state=placed" in tag else ("lease" if "why=lease" in tag else tag or "?"),
           "admin_comment": tag, "comment": acct.get(out["liquid"], {}).get("comment", ""),
           "daemon_warnings": sum(" WARNING " in line or " ERROR " in line for line in log),
           "load": common.load_average(suite)}
    if row["daemon_warnings"]:
        row["daemon_log"] = [line for line in log if " WARNING " in line or " ERROR " in line][:5]
    return row


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--trials", type=int, default=5, help="trials per arm (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random waits before the trials")
    parser.add_argument("--block-s", type=int, default=12, help="how long the blocking jobs sleep (default 12)")
    parser.add_argument("--lease", type=int, default=60, help="daemon lease_s for every arm; 0: the cluster's (default 60)")
    parser.add_argument("--poll-s", type=float, default=0.25, help="squeue polling interval in the container")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ",".join(ARMS))
    parser.add_argument("--out", default="idle_gap", help="results file stem next to this script (default idle_gap)")
    args = parser.parse_args()
    suite = args.suite
    arms = args.arms.split(",")
    rows: list[dict] = []
    rng = random.Random(args.seed)
    try:
        flags = bench_config(suite, args.lease)
        for round_ in range(args.trials):
            for arm in arms[round_ % len(arms):] + arms[:round_ % len(arms)]:
                row = trial(args, arm, flags, len(rows), rng.uniform(0, PHASE_S[arm]))
                rows.append(row)
                print(f"trial {row['trial']:2d} {arm:7s} wait {row['delay_s']:4.1f} s, gap sacct {fmt(row['gap_sacct_s'], 0)} s, script "
                      f"{fmt(row['gap_script_s'])} s, squeue {fmt(row['gap_squeue_s'])} s; started by "
                      f"{row['started_by']}; load {row['load']}", flush=True)
                common.cancel(suite, BLOCK)
                common.cancel(suite, LIQUID)
    finally:
        common.cancel(suite, BLOCK)
        common.cancel(suite, LIQUID)
        common.daemon_stop(suite)
        common.sh(suite, f"rm -rf {STAMPS} {CONFIG}", check=False)
        common.daemon_start_default(suite)

    summary = {}
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        summary[arm] = {"flags": ARMS[arm], "trials": len(mine),
                        "by_daemon": sum(r["started_by"] == "daemon" for r in mine)}
        for key in ("gap_sacct_s", "gap_script_s", "gap_squeue_s"):
            values = [r[key] for r in mine if r[key] is not None]
            summary[arm][key] = {"mean": statistics.fmean(values) if values else None,
                                 "median": statistics.median(values) if values else None,
                                 "min": min(values, default=None), "max": max(values, default=None)}
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "suite": suite,
              "trials_per_arm": args.trials, "seed": args.seed, "block_s": args.block_s, "lease_s": args.lease or "cluster's",
              "arms": summary, "trials": rows}
    with (HERE / f"{args.out}.csv").open("w", newline="") as f:
        keys = ["trial", "arm", "delay_s", "liquid_job", "gap_sacct_s", "gap_script_s", "gap_squeue_s", "block_spread_s",
                "started_by", "admin_comment", "daemon_warnings", "load"]
        writer = csv.DictWriter(f, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (HERE / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")

    print(f"\nGPU idle gap (s), {args.trials} trials per arm, blocking jobs {args.block_s} s, lease {result['lease_s']}")
    print(f"{'arm':8s} {'by daemon':>9s} {'sacct mean':>10s} {'median':>7s} {'script mean':>11s} {'median':>7s} "
          f"{'min':>6s} {'max':>6s} {'squeue median':>13s}")
    for arm in arms:
        s = summary[arm]
        a, b, c = s["gap_sacct_s"], s["gap_script_s"], s["gap_squeue_s"]
        print(f"{arm:8s} {s['by_daemon']:>5d}/{s['trials']:<3d} {fmt(a['mean']):>10s} {fmt(a['median']):>7s} "
              f"{fmt(b['mean']):>11s} {fmt(b['median']):>7s} {fmt(b['min']):>6s} {fmt(b['max']):>6s} {fmt(c['median']):>13s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
