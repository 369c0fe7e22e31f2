"""`slurm-liquid explain JOBID`: a job's slurm-liquid record and the reasoning behind it, in full.

The Comment holds the compact record (`sacct -o JobID,Comment%120`); this command expands it: what
the job said about itself, what it asked Slurm for, what slurm-liquid estimated and why (the memory
breakdown), what was changed at submission, and where the daemon placed it.
"""

from __future__ import annotations

import argparse
import json

from slurm_liquid.errors import LiquidError, UsageError
from slurm_liquid.ledger import Record, Tag, Usage

LABELS = {"mode": "submission mode", "est": "estimate", "asked": "asked Slurm for", "set": "changed to",
          "placed": "placed on", "would": "would place on (shadow)", "slurm": "Slurm placed it on",
          "err": "error in the job spec", "note": "note", "staged": "staged"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", type=int, help="the Slurm job id")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--config", default=None, help="liquid.toml (for the site file and correction model)")
    # the test cluster's: run the Slurm commands inside this container (not for sites, so not in --help)
    parser.add_argument("--container", metavar="NAME", help=argparse.SUPPRESS)


def explain(job, config) -> dict:
    record = Record.parse(job.comment)
    tag = Tag.parse(job.admin_comment)
    used = Usage.parse(job.admin_comment)
    out: dict = {"job_id": job.job_id, "name": job.name, "user": job.user, "state": job.state,
                 "nodes": list(job.nodes), "gpus": job.gpus, "shards": job.shards,
                 "record": job.comment if record else None, "tag": tag.render() if tag else None,
                 "used": used.render() if used else None}
    if record is None:
        from slurm_liquid.ledger import comment_opts_in

        out["explanation"] = (
            "opted in, but no decision was recorded (submit mode off, the helper unavailable, or not placed yet)"
            if comment_opts_in(job.comment) or tag else
            "no slurm-liquid record: the job did not opt in (no #LIQUID lines or liquid: comment)")
        return out
    out["fields"] = dict(record.fields)
    out["spec"] = record.spec
    if record.get("staged"):   # staging (slurm_liquid/staging): what was on local disk, and when
        from slurm_liquid.ledger.staging import describe
        out["staged"] = describe(record.get("staged"), job.start_time.timestamp() if job.start_time else None)
    # a staging error (err=dataset:...) says nothing against the spec: re-estimate anyway
    if record.spec and (record.get("err") or "dataset:").startswith("dataset:"):
        from slurm_liquid.asuser import reading_as
        from slurm_liquid.estimate.api import estimate

        try:
            with reading_as(job.user):          # files the spec names (hf-config): as the job's user
                est = estimate(record.job_spec(), gpu_type=job.gpu_type, **config.estimate.kwargs())
            out["estimate"] = est.to_json()
            out["explanation"] = est.explanation()
        except LiquidError as exc:
            out["explanation"] = f"cannot re-estimate: {exc}"
    return out


def run(args: argparse.Namespace) -> int:
    from slurm_liquid import config as config_module
    from slurm_liquid.slurm import ContainerRunner, connect

    client = connect("auto" if not args.container else "cli",
                     runner=ContainerRunner(args.container) if args.container else None)
    job = client.job(args.job_id)
    if job is None:
        raise UsageError(f"job {args.job_id}: Slurm knows no such job (neither squeue nor sacct)")
    out = explain(job, config_module.load(args.config))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"job {job.job_id} ({job.name}, {job.user}): {job.state}"
          + (f" on {','.join(job.nodes)}" if job.nodes else ""))
    if not out.get("record"):
        print(f"  {out['explanation']}")
        _print_used(out)
        return 0
    print(f"  record: {out['record']}")
    for key, value in out["fields"].items():
        print(f"  {LABELS.get(key, key):24s} {value}")
    for line in out.get("staged", []):
        print(f"  {'staged (node-local)':24s} {line}")
    if out.get("spec"):
        print(f"  {'job spec':24s} {out['spec']}")
    if out.get("tag"):
        print(f"  {'daemon tag':24s} {out['tag']}")
    if out.get("explanation"):
        print(f"  why: {out['explanation']}")
    est = out.get("estimate")
    if est:
        parts = ", ".join(f"{k} {v:,} MiB" for k, v in est["breakdown_mib"].items())
        print(f"  per-GPU memory: {parts}")
        if est.get("risk"):   # the request is the bound; the point estimate is what the model expects
            print(f"  point estimate {est['point_mib']:,} MiB per GPU, bound {est['bound_mib']:,} MiB: "
                  f"risk 1 in {round(1 / est['risk'])} of exceeding it ({est['risk_models']} calibration models)")
        print(f"  CPUs per GPU {est['cpus_per_gpu']}, host memory per GPU {est['host_mem_mib_per_gpu']:,} MiB, "
              f"scaling efficiency {est['scaling_efficiency']:.2f} (up to {est['max_efficient_gpus']} GPUs)")
    _print_used(out)
    return 0


def _print_used(out: dict) -> None:
    """What the node agents measured, beside the estimate (docs/agent.md)."""
    used = Usage.parse(out.get("used") or "")
    if used is None:
        return
    util = "no utilisation reading" if used.util is None else f"GPU utilisation {used.util:.0f}%"
    print(f"  {'used (node agents)':24s} peak {used.peak_mib:,} MiB per GPU on {used.gpus} GPU(s), {util}, "
          f"host {used.host_mib:,} MiB, {used.cpus:.1f} CPUs busy [{used.by}]")
    est = out.get("estimate")
    if est and used.peak_mib and used.by != "none":
        print(f"  {'estimate vs used':24s} {est['gpu_mem_mib']:,} vs {used.peak_mib:,} MiB per GPU "
              f"({(est['gpu_mem_mib'] - used.peak_mib) / used.peak_mib:+.0%})")
