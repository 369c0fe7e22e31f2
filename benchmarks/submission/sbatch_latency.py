#!/usr/bin/env python3
"""Time added to `sbatch` by slurm-liquid's client side (cli_filter.lua + `slurm-liquid submit-filter`).

    python3 benchmarks/submission/sbatch_latency.py [--suite trixie] [--jobs 60] [--warmup 3] [--seed 0]

Inside the controller container, as alice, times `sbatch` submissions of three arms, interleaved in
rounds (each round runs a, b, c once in a random order, so drift hits every arm alike):

    a  liquid job (#LIQUID model=resnet50 batch-size=64, --gres=gpu:1), CliFilterPlugins=cli_filter/lua
    b  the same job, liquid.conf without the CliFilterPlugins line (sbatch reads slurm.conf every run)
    c  a plain job (same script without #LIQUID), cli_filter on

Wall time per sbatch is measured in the container with time.perf_counter around subprocess.run.
Jobs are submitted with --begin=now+1hour (job_submit.lua keeps a later begin time) and cancelled
at the end. The container's liquid.conf is restored from the working tree's copy whatever happens.
Writes sbatch_latency.csv (one row per submission) and sbatch_latency.json (summary) next to this file.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from datetime import datetime, timezone
from pathlib import Path

import common

HERE = Path(__file__).resolve().parent
NAME = "bench-sbatch-latency"
SCRIPT_LIQUID = "/shared/bench-sbatch-liquid.sh"
SCRIPT_PLAIN = "/shared/bench-sbatch-plain.sh"
ARMS = {  # arm -> (script, cli_filter on)
    "a": (SCRIPT_LIQUID, True),
    "b": (SCRIPT_LIQUID, False),
    "c": (SCRIPT_PLAIN, True),
}
LABELS = {"a": "liquid job, cli_filter on", "b": "liquid job, cli_filter off", "c": "plain job, cli_filter on"}

# Runs in the container as root; each sbatch runs as alice. Swaps liquid.conf only when the arm
# changes it, and always puts the "on" text back before it exits.
PROGRAM = r"""
import json, os, pwd, subprocess, sys, time
""" + common.USER_PRELUDE + r"""conf = spec["conf_path"]
current = [None]
def put(text):
    if current[0] == text:
        return
    tmp = conf + ".bench-tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, conf)
    current[0] = text
rows = []
try:
    for index, (arm, warm) in enumerate(spec["order"]):
        script, filter_on = spec["arms"][arm]
        put(spec["conf_on"] if filter_on else spec["conf_off"])
        argv = ["sbatch", "--parsable", "--job-name=" + spec["name"], "--output=/dev/null", "--chdir=/shared",
                "--begin=now+1hour", "--gres=gpu:1", script]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], env=env,
                              cwd="/shared", capture_output=True, text=True, timeout=60)
        took = time.perf_counter() - t0
        rows.append({"index": index, "arm": arm, "warmup": warm, "seconds": took, "rc": proc.returncode,
                     "job": proc.stdout.strip().split(";")[0], "said": "slurm-liquid" in proc.stderr,
                     "stderr": proc.stderr.strip()[-300:]})
finally:
    put(spec["conf_on"])
print(json.dumps(rows))
"""


def order(jobs: int, warmup: int, seed: int) -> list[tuple[str, bool]]:
    """Warm-up rounds, then `jobs` rounds; each round is a, b, c in a fresh random order."""
    rng = random.Random(seed)
    out = []
    for round_ in range(warmup + jobs):
        arms = list(ARMS)
        rng.shuffle(arms)
        out += [(arm, round_ < warmup) for arm in arms]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--jobs", type=int, default=60, help="timed submissions per arm (default 60)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-round arm order")
    args = parser.parse_args()
    suite = args.suite

    conf_on = common.liquid_conf(suite)
    conf_off = common.without(conf_on, "CliFilterPlugins")
    if conf_on == conf_off:
        raise SystemExit(f"{common.LIQUID_CONF_SOURCE} has no CliFilterPlugins line: nothing to compare")
    body = "sleep 1\n"
    common.write(suite, SCRIPT_LIQUID, "#!/bin/sh\n#LIQUID model=resnet50 batch-size=64\n" + body)
    common.write(suite, SCRIPT_PLAIN, "#!/bin/sh\n" + body)
    load_before = common.load_average(suite)
    try:
        rows = common.py(suite, PROGRAM, {"user": common.USER, "conf_path": common.LIQUID_CONF, "name": NAME,
                                          "conf_on": conf_on, "conf_off": conf_off, "arms": ARMS,
                                          "order": order(args.jobs, args.warmup, args.seed)})
    finally:
        common.restore_liquid_conf(suite, reconfigure=False)
        common.cancel(suite, NAME)
        common.sh(suite, f"rm -f {SCRIPT_LIQUID} {SCRIPT_PLAIN}", check=False)
    load_after = common.load_average(suite)

    failed = [r for r in rows if r["rc"] != 0]
    if failed:
        print(f"{len(failed)} sbatch calls failed, e.g.: {failed[0]['stderr']}", file=sys.stderr)
    # The arms must really differ: only arm a goes through the helper, which always says something.
    wrong = [r for r in rows if r["said"] != (r["arm"] == "a")]
    timed = [r for r in rows if not r["warmup"] and r["rc"] == 0]
    stats = {arm: common.summary([r["seconds"] for r in timed if r["arm"] == arm]) for arm in ARMS}
    added = stats["a"]["median"] - stats["b"]["median"]
    plain_added = stats["c"]["median"] - stats["b"]["median"]
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "suite": suite,
              "jobs_per_arm": args.jobs, "warmup_rounds": args.warmup, "seed": args.seed,
              "load_before": load_before, "load_after": load_after, "failed": len(failed),
              "arm_mismatches": len(wrong), "arms": {arm: {"label": LABELS[arm], **stats[arm]} for arm in ARMS},
              "added_median_a_minus_b_s": added, "added_median_c_minus_b_s": plain_added,
              "target_added_median_s": 0.3, "target_met": added < 0.3}

    with (HERE / "sbatch_latency.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["index", "arm", "warmup", "seconds", "rc", "job", "said"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (HERE / "sbatch_latency.json").write_text(json.dumps(result, indent=2) + "\n")

    print(f"sbatch wall time in the container, {args.jobs} submissions per arm (load {load_before} -> {load_after})")
    print(f"{'arm':4s} {'what':28s} {'n':>3s} {'median s':>9s} {'p90 s':>7s} {'mean s':>7s} {'min s':>7s} {'max s':>7s}")
    for arm in ARMS:
        s = stats[arm]
        print(f"{arm:4s} {LABELS[arm]:28s} {s['n']:3d} {s['median']:9.3f} {s['p90']:7.3f} {s['mean']:7.3f} "
              f"{s['min']:7.3f} {s['max']:7.3f}")
    print(f"added median (a - b): {added:.3f} s (target < 0.3 s: {'met' if added < 0.3 else 'NOT met'}); "
          f"plain job with the filter (c - b): {plain_added:+.3f} s")
    if wrong:
        print(f"WARNING: {len(wrong)} submissions where the helper's message did not match the arm", file=sys.stderr)
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
