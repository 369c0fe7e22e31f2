#!/usr/bin/env python3
"""The main demo on the containerized cluster: submit a few GPU jobs and show what Slurm says.

    make demo            # brings the cluster up first
    python examples/demo.py [--suite trixie|bookworm|sid]

Each job script says what it trains in `#LIQUID` lines; the demo shows what slurm-liquid estimates
each job needs and where Liquid placement would put it, submits the jobs as their users asked, and
reads everything back through slurm-liquid's Slurm client (squeue/sacct/scontrol JSON).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from slurm_liquid.errors import LiquidError
from slurm_liquid.estimate.api import estimate
from slurm_liquid.jobspec import parse_script
from slurm_liquid.placement import ClusterState, PlacementRequest
from slurm_liquid.placement.liquid import LiquidBestFit
from slurm_liquid.slurm import ContainerRunner, SlurmError, connect

SITE = Path(__file__).resolve().parents[1] / "containers" / "slurm" / "liquid-site.toml"  # 4 x h100 per node
JOBS = [  # (name, sbatch arguments, the batch script's body)
    ("resnet50", ["--gres=gpu:h100:1"], "#LIQUID model=resnet50 batch-size=64 precision=bf16\nsleep 4"),
    ("bert-large", ["--gres=gpu:h100:2"],
     "#LIQUID model=bert-large batch-size=32 seq-len=512 precision=amp optimizer=adamw\nsleep 6"),
    ("gpt2-xl", ["-N", "2", "--gres=gpu:h100:4"],
     "#LIQUID model=gpt2-xl batch-size=16 seq-len=1024 precision=bf16 optimizer=adamw\nsrun hostname"),
    ("notebook", ["--gres=shard:4"], "sleep 3"),  # says nothing about itself: runs as asked
    ("broken", ["--gres=gpu:h100:1"], "#LIQUID model=resnet18 batch-size=32\nexit 3"),
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

    print("\nWhat each job says, what slurm-liquid estimates, and where Liquid would place it on the idle cluster:")
    state = ClusterState.from_nodes(client.nodes())
    placer = LiquidBestFit(topology)
    for name, sbatch_args, body in JOBS:
        print(f"  {name:10s} asks {' '.join(sbatch_args)}")
        try:
            est = estimate(parse_script(f"#!/bin/sh\n{body}\n"), site=str(SITE))
        except LiquidError as exc:
            print(f"  {'':10s} no estimate ({exc}): runs as asked")
            continue
        where = placer.place(PlacementRequest(name, est.decision.gpus), state) if not est.decision.shards else None
        placed = ", ".join(f"{n}:{g}" for n, g in where.nodes.items()) if where and where.placed else "a shared GPU"
        nodes = f" --nodes={est.decision.nodes}" if est.decision.nodes > 1 else ""
        print(f"  {'':10s} {est.explanation()}\n  {'':10s} -> --gres={est.decision.gres}{nodes}, placed on {placed}")

    ids = {}
    for name, sbatch_args, body in JOBS:
        ids[client.submit(f"#!/bin/sh\n{body}\n", ["--job-name", name, "--chdir", "/shared", *sbatch_args])] = name
    print(f"\nSubmitted {len(ids)} jobs as asked: {', '.join(f'{i} ({n})' for i, n in ids.items())}")

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
    print(f"  {'job':>5}  {'name':12} {'state':10} {'GPUs':>4} {'shards':>6}  {'nodes':12} exit")
    for job in sorted(done, key=lambda j: j.job_id):
        print(f"  {job.job_id:>5}  {job.name:12} {job.state:10} {job.gpus:>4} {job.shards:>6}  "
              f"{','.join(job.nodes):12} {job.exit_code}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SlurmError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        sys.exit(1)
