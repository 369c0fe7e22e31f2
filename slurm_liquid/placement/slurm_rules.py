"""What Slurm itself would check before it starts a job on a node, as a filter in front of placement.

The daemon pins a job to nodes (ReqNodeList) and starts it; a node Slurm would refuse leaves the job
pending and pinned. So before placing, each job sees only the nodes it could run on:

- the node is up (not down, drained, failing) and in one of the job's partitions;
- the node has the job's GPU type, and every feature its constraint asks for;
- the node's free CPUs and memory can feed the GPUs placed there (the job's CPUs and memory per GPU).

`job_view` returns the cluster as that job sees it (other nodes offer no GPUs; a node's free GPUs
are capped by what its free CPUs and memory can feed), or the reason no node can take it and whether
the job should be handed to Slurm unplaced (a constraint this filter cannot read: it never guesses).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from slurm_liquid.placement.base import ClusterState

_FEATURE = re.compile(r"[A-Za-z0-9_.\-]+")
_SIMPLE = re.compile(r"^[A-Za-z0-9_.\-&|]+$")


@dataclass(frozen=True)
class JobView:
    state: ClusterState
    reason: str | None = None        # why no node can take the job now
    unreadable: bool = False          # the job asks what this filter cannot check: hand it to Slurm


def constraint_matches(expression: str, features: Iterable[str]) -> bool | None:
    """Slurm's `--constraint` of plain features joined by `&` (and) and `|` (or); `&` binds tighter,
    as in Slurm. None for what this does not read (brackets, counts `*N`, parentheses, `!`)."""
    expression = (expression or "").strip()
    if not expression:
        return True
    if len(expression) > 1024 or not _SIMPLE.match(expression):
        return None
    have = set(features)
    for alternative in expression.split("|"):
        names = alternative.split("&")
        if not all(_FEATURE.fullmatch(n) for n in names):
            return None
        if all(n in have for n in names):
            return True
    return False


def per_gpu(job) -> tuple[float, float]:
    """(CPUs, MiB of memory) the job asks for each GPU it gets: its CPUs are for the whole job, its
    memory per node (slurm.Job.mem_mib)."""
    gpus = max(job.gpus, 1)
    per_node = job.gpus_per_node or math.ceil(gpus / max(job.num_nodes, 1))
    return (job.cpus / gpus if job.cpus else 0.0), ((job.mem_mib or 0) / max(per_node, 1))


def job_view(job, nodes: Mapping[str, object], state: ClusterState) -> JobView:
    """The cluster as `job` (slurm.Job) sees it: only nodes Slurm would start it on."""
    partitions = {p for p in (job.partition or "").split(",") if p}
    constraint = job.features or ""
    cpus_per_gpu, mem_per_gpu = per_gpu(job)
    seen: dict[str, int] = {}
    usable = {}
    for name, free in state.nodes.items():
        node = nodes.get(name)
        if node is None:
            continue
        if not node.available:
            seen["down"] = seen.get("down", 0) + 1
            continue
        if partitions and node.partitions and not partitions & set(node.partitions):
            seen["partition"] = seen.get("partition", 0) + 1
            continue
        if job.gpu_type and node.gpu_type and job.gpu_type != node.gpu_type:
            seen["gpu type"] = seen.get("gpu type", 0) + 1
            continue
        matches = constraint_matches(constraint, node.features)
        if matches is None:
            return JobView(ClusterState({}), f"constraint {constraint[:60]!r} is not one the daemon reads", True)
        if not matches:
            seen["features"] = seen.get("features", 0) + 1
            continue
        cap = free.gpus_free
        if cpus_per_gpu and free.cpus_free is not None:
            cap = min(cap, math.floor(free.cpus_free / cpus_per_gpu + 1e-9))
        if mem_per_gpu and free.mem_free_mib is not None:
            cap = min(cap, math.floor(free.mem_free_mib / mem_per_gpu + 1e-9))
        usable[name] = replace(free, gpus_free=max(cap, 0))
    view = ClusterState(usable)
    if usable:
        return JobView(view)
    why = ", ".join(f"{count} by {what}" for what, count in sorted(seen.items())) or "none"
    return JobView(view, f"no node can take it (ruled out: {why})")
