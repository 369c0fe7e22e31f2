#!/usr/bin/env python3
"""The main demo on the containerized cluster: submit a few GPU jobs and show what Slurm says.

    make demo            # brings the cluster up first
    python examples/demo.py [--suite trixie|bookworm|sid]

Everything is read back through slurm-liquid's Slurm client (squeue/sacct/scontrol JSON).
"""

from __future__ import annotations

import argparse
import sys
import time

from slurm_liquid.slurm import ContainerRunner, SlurmError, connect

JOBS = [  # (name, sbatch arguments, what the job runs)
    ("train-1gpu", ["-G", "1"], "sleep 4"),
    ("train-2gpu", ["--gres=gpu:h100:2"], "sleep 6"),
    ("train-8gpu-2nodes", ["-N", "2", "--gres=gpu:h100:4"], "srun hostname"),
    ("notebook-shard", ["--gres=shard:4"], "sleep 3"),
    ("broken", ["-G", "1"], "exit 3"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for the jobs to end")
    args = parser.parse_args()
    client = connect("cli", runner=ContainerRunner(f"liquid-{args.suite}-slurmctld"))

    print(f"Slurm {client.version()} through the {client.name} backend\n")
    topology = client.topology()
    print("Topology (leaf switch: nodes):")
    for node in client.nodes():
        print(f"  {topology.leaf_of(node.name)}: {node.name}  {node.gpus} x {node.gpu_type} GPUs, {node.shards} shards, "
              f"{node.cpus} CPUs, {node.mem_mib} MiB, {node.state.lower()}")

    ids = {}
    for name, sbatch_args, command in JOBS:
        ids[client.submit(f"#!/bin/sh\n{command}\n", ["--job-name", name, "--chdir", "/shared", *sbatch_args])] = name
    print(f"\nSubmitted {len(ids)} jobs: {', '.join(f'{i} ({n})' for i, n in ids.items())}")

    deadline = time.monotonic() + args.timeout
    while True:
        done = [j for j in client.accounting(ids) if j.is_finished]
        if len(done) == len(ids):
            break
        if time.monotonic() > deadline:
            print(f"demo: jobs still not finished after {args.timeout:.0f} s", file=sys.stderr)
            return 1
        time.sleep(2)

    print("\nWhat sacct recorded:")
    print(f"  {'job':>5}  {'name':18} {'state':10} {'GPUs':>4}  {'nodes':12} exit")
    for job in sorted(done, key=lambda j: j.job_id):
        print(f"  {job.job_id:>5}  {job.name:18} {job.state:10} {job.gpus:>4}  {','.join(job.nodes):12} {job.exit_code}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SlurmError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        sys.exit(1)
