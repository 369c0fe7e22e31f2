#!/usr/bin/env python3
"""Staging benchmark on the containerized cluster: time from a job's start to the end of its first pass
over a dataset of many small files on /shared, with and without staging, for a job that starts at once,
a job that waited for GPUs, and four jobs (each with its own dataset) that waited together.

    python3 benchmarks/staging/run.py [--suite sid] [--files 4000] [--size 24576] [--iops 400] [--mbps 16]

/shared stands for a parallel file system: every node container's reads from the host disk are capped
(blkio throttle: --iops reads/s and --mbps MB/s per node) and the dataset's pages are dropped from the
host's page cache before each run, so every read of it reaches the capped disk. The staging agent's reads
go through the same cap (it runs in the node containers); the node-local copy is written to the
container's own disk and read back from the node's page cache, as a node-local NVMe would serve it.
Runs as root on the host (it writes the containers' blkio cgroup files). Writes results.json beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLUSTER = HERE.parents[1] / "containers" / "cluster"
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
SPEC = "model=bert-base batch-size=64 seq-len=128"
SPEC_ONE_GPU = "model=bert-large batch-size=32 seq-len=512 precision=amp"   # a whole GPU (bert-base would get a share)
READER = r"""#!/bin/sh
t0=$(date +%s.%N)
data=${LIQUID_DATA:-$1}
python3 -c '
import os, sys
n = b = 0
for top, dirs, files in os.walk(sys.argv[1]):
    for name in files:
        with open(os.path.join(top, name), "rb") as f:
            b += len(f.read()); n += 1
print(f"files={n} bytes={b}")
' "$data"
t1=$(date +%s.%N)
echo "start=$t0 end=$t1 data=$data"
"""


def cluster(suite: str, host: str, *argv: str, user: str | None = None, timeout: float = 600) -> str:
    cmd = [sys.executable, str(CLUSTER), "--suite", suite, "exec", host, "--"]
    cmd += ["runuser", "-u", user, "--", *argv] if user else list(argv)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)[:200]} on {host}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def docker(*argv: str) -> str:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def throttle(suite: str, iops: int, bps: int) -> None:
    """Cap every node container's reads from the disk that holds /shared (0: no cap)."""
    volume = docker("volume", "inspect", "-f", "{{.Mountpoint}}", f"liquid-{suite}-shared")
    st = os.stat(volume)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    for node in NODES:
        cid = docker("inspect", "-f", "{{.Id}}", f"liquid-{suite}-{node}")
        base = Path(f"/sys/fs/cgroup/blkio/docker/{cid}")
        (base / "blkio.throttle.read_iops_device").write_text(f"{device} {iops}\n")
        (base / "blkio.throttle.read_bps_device").write_text(f"{device} {bps}\n")


def drop_cache(suite: str) -> None:
    """The datasets' pages out of the host's page cache: the next read goes to the (capped) disk."""
    volume = Path(docker("volume", "inspect", "-f", "{{.Mountpoint}}", f"liquid-{suite}-shared"))
    os.sync()                       # dirty pages (a dataset just written) cannot be dropped
    for top, _, files in os.walk(volume):
        if "bench-ds" not in top:
            continue
        for name in files:
            fd = os.open(os.path.join(top, name), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def make_datasets(suite: str, count: int, files: int, size: int) -> None:
    code = ("import os, shutil, sys\n"
            "root, files, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
            "mark = os.path.join(root, '.done-%d-%d' % (files, size))\n"
            "if not os.path.exists(mark):\n"
            "    shutil.rmtree(root, ignore_errors=True)\n"
            "    for i in range(files):\n"
            "        d = os.path.join(root, 'part%03d' % (i // 100))\n"
            "        os.makedirs(d, exist_ok=True)\n"
            "        with open(os.path.join(d, 'sample%05d.bin' % i), 'wb') as f: f.write(os.urandom(size))\n"
            "    open(mark, 'w').close()\n")
    for i in range(count):
        cluster(suite, "slurmctld", "python3", "-c", code, f"/shared/bench-ds-{i}", str(files), str(size), user="alice")


def restart_agents(suite: str, bench: bool = True) -> None:
    """Agents with an empty staging area and room for four datasets (bench), or as the cluster has them."""
    conf = ("sed 's/^quota_gb = .*/quota_gb = 4/' /etc/slurm/liquid.toml > /tmp/liquid-bench.toml && "
            "entrypoint.sh agent-stop; for i in $(seq 50); do pgrep -f 'slurm-liquid[ ]agent' >/dev/null || break; "
            "sleep 0.2; done; rm -rf /var/tmp/liquid-staging && entrypoint.sh agent-start"
            + (" --config /tmp/liquid-bench.toml" if bench else ""))
    for node in NODES:
        cluster(suite, node, "sh", "-c", conf)


def submit(suite: str, *argv: str, user: str = "alice") -> int:
    out = cluster(suite, "slurmctld", "sbatch", "--parsable", "--chdir=/shared", "--time=5", *argv, user=user)
    return int(out.strip().split(";")[0])


def wait_done(suite: str, ids: list[int], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = cluster(suite, "slurmctld", "sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(map(str, ids)))
        states = dict(line.split("|")[:2] for line in out.split())
        if len(states) == len(ids) and all(s not in ("PENDING", "RUNNING", "REQUEUED") for s in states.values()):
            return
        time.sleep(2)
    raise SystemExit(f"jobs {ids} did not finish in {timeout} s")


def run_case(suite: str, name: str, jobs: int, gpus: int, staged: bool, wait_s: int) -> list[dict]:
    restart_agents(suite)
    drop_cache(suite)
    blockers = []
    if wait_s:
        blockers = [submit(suite, "--gres=gpu:4", f"--comment=liquid: {SPEC} min-gpus=4 max-gpus=4", "--output=/dev/null",
                           "--wrap", f"sleep {wait_s}", user="bob") for _ in NODES]
        time.sleep(4)
    ids, submitted = [], {}
    for i in range(jobs):
        shared = f"/shared/bench-ds-{i}"
        spec = SPEC_ONE_GPU if gpus == 1 else SPEC
        comment = f"liquid: {spec} min-gpus={gpus} max-gpus={gpus}" + (f" dataset={shared}" if staged else "")
        # the shared path as an argument: `--export=ALL,NAME=value` makes slurmd 26.05.5 die in these containers
        ids.append(submit(suite, f"--gres=gpu:{gpus}", f"--comment={comment}", f"--output=/shared/bench-{name}-{i}.out",
                          "/shared/bench-reader.sh", shared))
        submitted[ids[-1]] = time.time()   # the containers share the host's clock
    wait_done(suite, blockers + ids)
    rows = []
    for i, job_id in enumerate(ids):
        said = dict(w.split("=", 1) for w in cluster(suite, "slurmctld", "cat", f"/shared/bench-{name}-{i}.out").split() if "=" in w)
        acct = cluster(suite, "slurmctld", "sacct", "-X", "-n", "-P", "-o", "NodeList,Comment", "-j", str(job_id)).strip()
        node, comment = acct.split("|", 1)
        staged_field = next((w.split("=", 1)[1] for w in comment.split() if w.startswith("staged=")), "")
        rows.append({"case": name, "job": job_id, "node": node, "staged": staged,
                     "waited_s": round(float(said["start"]) - submitted[job_id], 1),
                     "first_pass_s": round(float(said["end"]) - float(said["start"]), 2),
                     "read_local": said["data"].startswith("/var/tmp/"), "files": int(said["files"]),
                     "bytes": int(said["bytes"]), "staged_field": staged_field})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="sid")
    parser.add_argument("--files", type=int, default=4000)
    parser.add_argument("--size", type=int, default=24576)
    parser.add_argument("--iops", type=int, default=400, help="reads per second per node from the disk under /shared")
    parser.add_argument("--mbps", type=float, default=16.0, help="MB/s per node from the disk under /shared")
    parser.add_argument("--wait", type=int, default=40, help="seconds the waiting jobs wait for GPUs")
    parser.add_argument("--wait-four", type=int, default=45, help="seconds the four waiting jobs wait for GPUs")
    parser.add_argument("--cases", default="at-once,waited,four-waited")
    args = parser.parse_args()
    make_datasets(args.suite, 4, args.files, args.size)
    cluster(args.suite, "slurmctld", "sh", "-c", f"cat > /shared/bench-reader.sh <<'EOF'\n{READER}EOF\nchmod 755 /shared/bench-reader.sh")
    rows: list[dict] = []
    cases = {"at-once": (1, 4, 0), "waited": (1, 4, args.wait), "four-waited": (4, 1, args.wait_four)}
    try:
        throttle(args.suite, args.iops, int(args.mbps * 1e6))
        for case in args.cases.split(","):
            jobs, gpus, wait_s = cases[case]
            for staged in (False, True):
                rows += run_case(args.suite, f"{case}-{'staged' if staged else 'shared'}", jobs, gpus, staged, wait_s)
    finally:
        throttle(args.suite, 0, 0)
        restart_agents(args.suite, bench=False)
    out = {"args": vars(args), "rows": rows}
    (HERE / f"results-{args.cases.replace(',', '+')}.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
