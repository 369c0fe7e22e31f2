#!/usr/bin/env python3
"""The main demo on the containerized cluster: slurm-liquid's submission path, end to end.

    make demo            # brings the cluster up first
    python examples/demo.py [--suite trixie|bookworm|sid]

Users alice and bob submit deep-learning jobs with plain `sbatch`, saying what each job trains in one
of three ways: `#LIQUID` lines in the script, `--comment="liquid: ..."`, or the `slurm-liquid sbatch`
wrapper with `--liquid-*` flags. On the test cluster slurm-liquid enforces (containers/slurm/liquid.toml):
cli_filter.lua right-sizes each request and tells the user, job_submit.lua holds the job for the daemon,
the daemon places it under as few switches as possible and starts it. Everything is then read back from
`sacct`, where each job's Comment carries its slurm-liquid record.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from slurm_liquid.ledger import Record
from slurm_liquid.slurm import ContainerRunner, SlurmError, connect

# (name, user, how, sbatch arguments, #LIQUID lines / --comment / --liquid-* flags)
JOBS = [
    ("resnet50", "alice", "directives", ["--gres=gpu:4"],
     "#LIQUID model=resnet50 batch-size=256 precision=bf16"),
    ("bert-large", "bob", "directives", ["--gres=gpu:1"],
     "#LIQUID model=bert-large batch-size=64 seq-len=512 precision=amp optimizer=adamw min-gpus=2"),
    ("gpt2-medium", "alice", "comment", ["--gres=gpu:2"],
     "liquid: model=gpt2-medium batch-size=32 seq-len=1024 precision=bf16 min-gpus=4 max-gpus=4"),
    ("gpt2-large", "bob", "comment", ["-N", "2", "--gres=gpu:4"],
     "liquid: model=gpt2-large batch-size=32 seq-len=1024 precision=bf16 min-gpus=8 max-gpus=8"),
    ("resnet18", "alice", "wrapper", ["--gres=gpu:1"],
     ["--liquid-model", "resnet18", "--liquid-batch-size", "32"]),
    ("vit", "bob", "wrapper", ["--gpus=2"],
     ["--liquid-model", "vit-base", "--liquid-batch-size", "128", "--liquid-precision", "amp"]),
    ("typo", "alice", "directives", ["--gres=gpu:1"], "#LIQUID model=resnet50 batch-size=64k0"),
    ("notebook", "bob", "plain", ["--gres=shard:4"], ""),
]


# Elastic jobs: the CPU stand-in trainer takes as long per step as ResNet-50 on ImageNet did on the GPUs
# it holds (measured traces), checkpoints on SIGUSR1 and resumes after each resize. Two minutes on one GPU
# and 65 s on two: long enough that growing them pays for the requeue DL2 prices in (a minute-long
# cifar10 job gains less than its restart from a second GPU, and DL2 rightly leaves it alone).
ELASTIC_SPEC = "#LIQUID model=resnet50 batch-size=200 elastic=1:8 signal=USR1@15"
ELASTIC_BODY = ("trap '' USR1\n/opt/slurm-liquid/bin/python /opt/slurm-liquid/examples/elastic/standin_trainer.py "
                "--app imagenet --steps 520 --batch-size 200 --speedup 4 --checkpoint-dir /shared/checkpoints "
                "--report-interval 1")
ELASTIC = [("elastic-a", "alice"), ("elastic-b", "bob")]


def container_exec(container: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def submit(container: str, name: str, user: str, how: str, args: list[str], said,
           body: str = "sleep 8") -> tuple[int, list[str]]:
    body = f"#!/bin/bash\n{said if how == 'directives' else ''}\n{body}\n"
    path = f"/shared/demo-{name}.sh"
    written = container_exec(container, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])",
                             path, body)
    if written.returncode:
        raise SlurmError(f"cannot write {path}: {written.stderr.strip()}")
    command = ["slurm-liquid", "sbatch", *said] if how == "wrapper" else ["sbatch"]
    if how == "comment":
        command.append(f"--comment={said}")
    proc = container_exec(container, "runuser", "-u", user, "--", *command, "--parsable", f"--job-name={name}",
                          "--chdir=/shared", "--output=/dev/null", *args, path)
    if proc.returncode:
        raise SlurmError(f"sbatch of {name} failed: {proc.stderr.strip()}")
    return int(proc.stdout.strip().split(";")[0]), [l for l in proc.stderr.splitlines() if "slurm-liquid" in l]


def wait_finished(client, ids, timeout: float):
    """The jobs from sacct once all have ended, or None (with a message) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done = [j for j in client.accounting(ids) if j.is_finished]
        if len(done) == len(ids):
            return done
        if time.monotonic() > deadline:
            print(f"demo: jobs {sorted(ids)} still not finished after {timeout:.0f} s", file=sys.stderr)
            return None
        time.sleep(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="trixie")
    parser.add_argument("--timeout", type=float, default=240, help="seconds to wait for the jobs to end")
    args = parser.parse_args()
    container = f"liquid-{args.suite}-slurmctld"
    client = connect("cli", runner=ContainerRunner(container))

    print(f"Slurm {client.version()} with slurm-liquid enforcing (containers/slurm/liquid.toml)\n")
    topology = client.topology()
    print("Topology (leaf switch: nodes):")
    for node in client.nodes():
        print(f"  {topology.leaf_of(node.name)}: {node.name}  {node.gpus} x {node.gpu_type} GPUs, {node.shards} shards")

    print("\nSubmitting; what each user sees from sbatch:")
    ids: dict[int, tuple[str, str]] = {}
    for name, user, how, sbatch_args, said in JOBS:
        job_id, lines = submit(container, name, user, how, sbatch_args, said)
        ids[job_id] = (name, how)
        shown = f"  {user}$ sbatch {' '.join(sbatch_args)}  [{how}]  -> job {job_id}"
        print(shown + "".join(f"\n      {line.strip()}" for line in lines))

    done = wait_finished(client, ids, args.timeout)
    if done is None:
        return 1

    print("\nWhat sacct recorded (the Comment column is slurm-liquid's record):")
    print(f"  {'job':>4}  {'name':11} {'how':10} {'state':9} {'GPUs':>4} {'shards':>6}  {'nodes':14} {'leaves':6}  record")
    for job in sorted(done, key=lambda j: j.job_id):
        name, how = ids[job.job_id]
        leaves = len({topology.leaf_of(n) for n in job.nodes})
        record = Record.parse(job.comment)
        head = record.render().split(" | ")[0] if record else "(none: did not opt in)"
        print(f"  {job.job_id:>4}  {name:11} {how:10} {job.state:9} {job.gpus:>4} {job.shards:>6}  "
              f"{','.join(job.nodes):14} {leaves:>6}  {head}")

    example = next(j for j, (name, _) in ids.items() if name == "gpt2-large")
    print(f"\n$ slurm-liquid explain {example}")
    shown = container_exec(container, "slurm-liquid", "explain", str(example))
    print(shown.stdout.rstrip() or shown.stderr.rstrip())
    print("\nSame view by hand: sacct -X -o JobID,JobName,State,AllocTRES%40,NodeList,Comment%120")
    return elastic(container, client, args.timeout + 300)


def elastic(container: str, client, timeout: float) -> int:
    return 0 if elastic_rows(container, client, timeout) is not None else 1


def elastic_rows(container: str, client, timeout: float) -> list[tuple[int, str, int, int, str]] | None:
    """Two elastic jobs through the daemon's slot; prints and returns (job, name, restarts, GPUs at the
    end, resizes) per job, None if they did not finish in time."""
    print("\nElastic jobs (#LIQUID elastic=1:8): the daemon's DL2 policy re-decides their GPUs every slot")
    ids = {}
    for name, user in ELASTIC:
        job_id, _ = submit(container, name, user, "directives", ["--gres=gpu:1", "--requeue"],
                           ELASTIC_SPEC, ELASTIC_BODY)
        ids[job_id] = name
        print(f"  {user}$ sbatch --gres=gpu:1 --requeue  [elastic=1:8]  -> job {job_id}")
    done = wait_finished(client, ids, timeout)
    if done is None:
        return None
    print(f"  {'job':>4}  {'name':10} {'state':9} {'restarts':>8} {'GPUs at the end':>15}  {'JCT':>5}  resized")
    rows = []
    for job in sorted(done, key=lambda j: j.job_id):
        record = Record.parse(job.comment)
        resized = (record.get("resized") if record else None) or "-"
        jct = (job.end_time - job.submit_time).total_seconds()
        print(f"  {job.job_id:>4}  {ids[job.job_id]:10} {job.state:9} {job.restarts:>8} {job.gpus:>15}  {jct:>4.0f}s  "
              f"{resized}")
        rows.append((job.job_id, ids[job.job_id], job.restarts, job.gpus, resized))
    return rows


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SlurmError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        sys.exit(1)
