"""What the node agent costs a GPU node: CPU per sample, CPU share at its interval, memory.

    containers/cluster --suite trixie up
    python3 benchmarks/agent/overhead.py [--suite trixie] [--jobs 0,4,8] [--samples 300]

On one node of the test cluster (gpu04) it starts N jobs (each: a stand-in GPU process that says it
uses 1000 MiB of a shared GPU, plus 3 sleeping processes) and then, inside the node container:
- times `procs.scan()` alone and a whole sample (scan + stand-in GPU read + meters) with
  time.process_time() over --samples samples, for each N side by side;
- reads the running agent's own CPU ticks over 30 s (the test cluster samples every 1 s) and its
  resident memory (VmRSS, VmHWM).
NVML calls are not in these numbers (the emulated GPUs have none); on a real node add the NVML
query time (a few ms for 8 GPUs, per NVIDIA's documentation of nvmlDeviceGet* calls).
Standard library only: it drives the cluster with `docker exec`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE = "gpu04"
STANDIN = HERE.parents[1] / "tests" / "integration" / "test_agent.py"

MEASURE = r"""
import json, os, resource, statistics, sys, time
from pathlib import Path
from slurm_liquid.agent import procs
from slurm_liquid.agent.gpus import open_reader
from slurm_liquid.agent.meter import Meters

samples = int(sys.argv[1])
reader = open_reader("standin:/tmp/liquid-standin")
meters = Meters(procs.clock_ticks())

def cpu_ms(work):
    out = []
    for _ in range(samples):
        start = time.process_time()
        work()
        out.append((time.process_time() - start) * 1000)
    return out

found = procs.scan()
scan = cpu_ms(procs.scan)
full = cpu_ms(lambda: meters.update(time.time(), procs.scan(), reader.sample()))
agent = next(p for p in os.listdir("/proc") if p.isdigit() and b"slurm-liquid\x00agent" in open(f"/proc/{p}/cmdline", "rb").read())
def ticks():
    fields = open(f"/proc/{agent}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
t0, w0 = ticks(), time.monotonic()
time.sleep(30)
t1, w1 = ticks(), time.monotonic()
status = dict(l.split(":", 1) for l in open(f"/proc/{agent}/status").read().splitlines() if ":" in l)
print(json.dumps({
    "processes_on_node": sum(1 for p in os.listdir("/proc") if p.isdigit()),
    "job_processes": len(found), "jobs": len({p.job.job_id for p in found.values()}),
    "scan_ms": [statistics.mean(scan), sorted(scan)[int(0.9 * len(scan))]],
    "sample_ms": [statistics.mean(full), sorted(full)[int(0.9 * len(full))]],
    "agent_cpu_percent_at_1s": 100 * (t1 - t0) / procs.clock_ticks() / (w1 - w0),
    "agent_rss_mib": int(status["VmRSS"].split()[0]) / 1024, "agent_hwm_mib": int(status["VmHWM"].split()[0]) / 1024,
}))
"""


def docker(suite: str, host: str, *argv: str, timeout: float = 300) -> str:
    proc = subprocess.run(["docker", "exec", f"liquid-{suite}-{host}", *argv], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} on {host} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def standin_program() -> str:
    """The stand-in GPU process of the integration test (one source of truth)."""
    text = STANDIN.read_text()
    return text.split('STANDIN = """\\\n', 1)[1].split('"""', 1)[0]


def start_jobs(suite: str, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        body = ("python3 /shared/standin_gpu.py 1000 600 & sleep 600 & sleep 600 & sleep 600 & wait")
        out = docker(suite, "slurmctld", "runuser", "-u", "alice", "--", "sbatch", "--parsable", "-w", NODE,
                     "--gres=shard:1", "--chdir=/shared", "--output=/dev/null", "--wrap", body)
        ids.append(int(out.strip().split(";")[0]))
    deadline = time.monotonic() + 120
    while ids:
        running = docker(suite, "slurmctld", "squeue", "-h", "-t", "R", "-o", "%i", "-j", ",".join(map(str, ids)))
        if len(running.split()) == len(ids):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs {ids} did not all start within 120 s")
        time.sleep(1)
    time.sleep(3)     # the stand-in processes write their files
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--jobs", default="0,4,8")
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    docker(args.suite, NODE, "entrypoint.sh", "agent-start")
    docker(args.suite, "slurmctld", "python3", "-c",
           "import sys; open('/shared/standin_gpu.py', 'w').write(sys.argv[1])", standin_program())
    rows = []
    for count in [int(n) for n in args.jobs.split(",")]:
        ids = start_jobs(args.suite, count)
        try:
            out = docker(args.suite, NODE, "/opt/slurm-liquid/bin/python3", "-c", MEASURE, str(args.samples),
                         timeout=600)
            rows.append({"jobs_started": count, **json.loads(out.strip().splitlines()[-1])})
        finally:
            if ids:
                docker(args.suite, "slurmctld", "scancel", *map(str, ids))
        print(json.dumps(rows[-1]), file=sys.stderr)
        time.sleep(5)
    (HERE / "overhead.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| jobs on node | job processes | all processes | scan CPU ms (mean / p90) | whole sample CPU ms "
             "(mean / p90) | share of one core at 5 s | running agent at 1 s: CPU % | RSS / peak MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['jobs']} | {r['job_processes']} | {r['processes_on_node']} | {r['scan_ms'][0]:.2f} / "
                     f"{r['scan_ms'][1]:.2f} | {r['sample_ms'][0]:.2f} / {r['sample_ms'][1]:.2f} | "
                     f"{r['sample_ms'][0] / 5000 * 100:.3f} % | {r['agent_cpu_percent_at_1s']:.2f} % | "
                     f"{r['agent_rss_mib']:.0f} / {r['agent_hwm_mib']:.0f} |")
    (HERE / "overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
