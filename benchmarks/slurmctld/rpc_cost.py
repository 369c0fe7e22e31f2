"""What slurm-liquid costs slurmctld: RPCs per minute (sdiag), with and without the daemon and the node
agents, on an idle cluster and under a small submission load.

    flock /tmp/liquid-trixie.lock python benchmarks/slurmctld/rpc_cost.py --suite trixie --minutes 2

On the containerized cluster (containers/cluster up first; 4 GPU nodes). The daemon and the agents run
with the shipped timings (etc/slurm/liquid.toml: heartbeat 5 s, poll 30 s, elastic slot 60 s, agent
every 5 s, staging off), written over the test cluster's own short ones into /tmp/rpc-cost.toml. Four
phases of --minutes each, in this order, each after `sdiag --reset`:

  off-idle   daemon and agents stopped, no jobs (Slurm's own traffic: slurmd pings, registrations)
  on-idle    daemon and agents running, no jobs
  on-load    daemon and agents running; alice submits one opted-in 1-GPU job (sleep 40) every --every s
  off-load   daemon and agents stopped; the same submissions

RPCs are read from sdiag's "by user" table (the daemon and the agents run as root; sbatch and its
cli_filter helper as alice) and "by message type" table. Afterwards the daemon and the agents are
started again with the cluster's own configuration. Writes results-<suite>.md next to this file.
Standard library only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
SHIPPED = {("daemon", "heartbeat_s"): "5", ("daemon", "stale_after_s"): "20", ("daemon", "lease_s"): "60",
           ("daemon", "max_hold_s"): "600", ("daemon", "poll_s"): "30", ("daemon", "batch_window_s"): "0.5",
           ("elastic", "slot_s"): "60", ("agent", "interval_s"): "5", ("agent", "end_grace_s"): "60",
           ("staging", "enabled"): "false"}
JOB = "#!/bin/sh\n#LIQUID model=resnet50 batch-size=32\nsleep 40\n"
ROW = re.compile(r"^\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)")


def docker(suite: str, host: str, script: str, timeout: float = 120, check: bool = True) -> str:
    proc = subprocess.run(["docker", "exec", f"liquid-{suite}-{host}", "bash", "-c", script], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{host}: `{script}` failed: {proc.stderr.strip()[-1000:]}")
    return proc.stdout


def shipped_timings(text: str) -> str:
    """The cluster's liquid.toml with the shipped timings set (the keys of SHIPPED, in their sections)."""
    out, section, seen = [], "", set()
    for line in text.splitlines():
        header = re.match(r"^\[(\w+)\]", line)
        if header:
            out.extend(f"{k} = {v}" for (s, k), v in SHIPPED.items() if s == section and (s, k) not in seen)
            section = header.group(1)
        key = re.match(r"^(\w+)\s*=", line)
        if key and (section, key.group(1)) in SHIPPED:
            seen.add((section, key.group(1)))
            line = f"{key.group(1)} = {SHIPPED[(section, key.group(1))]}"
        out.append(line)
    out.extend(f"{k} = {v}" for (s, k), v in SHIPPED.items() if s == section and (s, k) not in seen)
    return "\n".join(out) + "\n"


def sdiag(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """(count by message type, count by user) from sdiag's two RPC tables."""
    tables: list[dict[str, int]] = [{}, {}]
    current = None
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            current = tables[0]
        elif line.startswith("Remote Procedure Call statistics by user"):
            current = tables[1]
        elif line and not line[0].isspace():
            current = None
        elif current is not None and (m := ROW.match(line)):
            current[m.group(1)] = current.get(m.group(1), 0) + int(m.group(2))
    return tables[0], tables[1]


def liquid(suite: str, on: bool) -> None:
    if on:
        docker(suite, "slurmctld", "entrypoint.sh daemon-start --config /tmp/rpc-cost.toml", timeout=60)
        for node in NODES:
            docker(suite, node, "entrypoint.sh agent-start --config /tmp/rpc-cost.toml", timeout=60)
    else:
        docker(suite, "slurmctld", "entrypoint.sh daemon-stop; rm -f /var/spool/slurm-liquid/heartbeat")
        for node in NODES:
            docker(suite, node, "entrypoint.sh agent-stop")
        time.sleep(3)


def phase(suite: str, name: str, minutes: float, every: float | None) -> dict:
    docker(suite, "slurmctld", "sdiag --reset")
    start = time.monotonic()
    submitted = 0
    while time.monotonic() - start < minutes * 60:
        if every:
            docker(suite, "slurmctld", "cd /shared && runuser -u alice -- sbatch -Q --gres=gpu:1 "
                                       "-o /dev/null /shared/rpc-cost-job.sh")
            submitted += 1
        time.sleep(every or 5)
    seconds = time.monotonic() - start
    types, users = sdiag(docker(suite, "slurmctld", "sdiag"))
    docker(suite, "slurmctld", "scancel -u alice; sleep 2", check=False)
    print(f"{name}: {seconds:.0f} s, {submitted} jobs, by user {users}", flush=True)
    return {"name": name, "seconds": seconds, "submitted": submitted, "types": types, "users": users}


def per_minute(row: dict, count: int) -> str:
    return f"{count * 60 / row['seconds']:.1f}"


def report(suite: str, rows: list[dict], minutes: float, every: float, command: str) -> str:
    users = sorted({u for r in rows for u in r["users"]})
    lines = [f"# What slurm-liquid costs slurmctld: RPCs per minute ({suite})", "",
             f"`{command}` ({minutes:g} minutes a phase; load: one opted-in 1-GPU job every {every:g} s; shipped "
             "timings, staging off). Counts from `sdiag` after `sdiag --reset`, per minute of the phase.", "",
             "| phase | jobs | " + " | ".join(f"{u}/min" for u in users) + " | all/min |",
             "|---|---|" + "---|" * (len(users) + 1)]
    for r in rows:
        lines.append(f"| {r['name']} | {r['submitted']} | " + " | ".join(per_minute(r, r["users"].get(u, 0)) for u in users)
                     + f" | {per_minute(r, sum(r['users'].values()))} |")
    by = {r["name"]: r for r in rows}
    lines += ["", "## By message type (per minute)", "",
              "| message type | " + " | ".join(r["name"] for r in rows) + " |", "|---|" + "---|" * len(rows)]
    for t in sorted({t for r in rows for t in r["types"]}, key=lambda t: -sum(r["types"].get(t, 0) for r in rows)):
        lines.append(f"| {t} | " + " | ".join(per_minute(r, r["types"].get(t, 0)) for r in rows) + " |")
    if {"on-idle", "off-idle", "on-load", "off-load"} <= set(by):
        def total(n):
            return sum(by[n]["users"].values()) * 60 / by[n]["seconds"]
        lines += ["", f"slurm-liquid adds {total('on-idle') - total('off-idle'):.1f} RPCs a minute on the idle cluster "
                  f"and {total('on-load') - total('off-load'):.1f} under the load (all users; differences of the "
                  "phases above)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--every", type=float, default=6.0, help="seconds between submissions under load")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    suite = args.suite
    docker(suite, "slurmctld", f"printf '%s' '{JOB}' > /shared/rpc-cost-job.sh && chmod 755 /shared/rpc-cost-job.sh")
    toml = shipped_timings(docker(suite, "slurmctld", "cat /etc/slurm/liquid.toml"))
    for host in ("slurmctld", *NODES):
        subprocess.run(["docker", "exec", "-i", f"liquid-{suite}-{host}", "bash", "-c", "cat > /tmp/rpc-cost.toml"],
                       input=toml, text=True, check=True, timeout=60)
    rows = []
    try:
        for name, on, every in (("off-idle", False, None), ("on-idle", True, None), ("on-load", True, args.every),
                                ("off-load", False, args.every)):
            liquid(suite, on)
            if on:
                time.sleep(10)   # past the daemon's first pass and slot
            rows.append(phase(suite, name, args.minutes, every))
    finally:
        docker(suite, "slurmctld", "scancel -u alice", check=False)
        liquid(suite, False)
        docker(suite, "slurmctld", "entrypoint.sh daemon-start", timeout=60, check=False)
        for node in NODES:
            docker(suite, node, "entrypoint.sh agent-start", timeout=60, check=False)
    command = "python benchmarks/slurmctld/rpc_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(suite, rows, args.minutes, args.every, command.strip())
    print(text)
    (args.out or HERE / f"results-{suite}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
