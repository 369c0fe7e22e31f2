"""What is free for the placement pass: GPUs less those promised to pinned jobs and resizes in flight,
and the state after a placement takes its GPUs (and the CPUs and memory that feed them)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable, Mapping

from slurm_liquid.config import Config
from slurm_liquid.daemon.pins import promised
from slurm_liquid.placement import ClusterState
from slurm_liquid.placement.base import NodeState
from slurm_liquid.placement.slurm_rules import per_gpu
from slurm_liquid.slurm import Job, Node


def free_state(nodes: Iterable[Node], jobs: Iterable[Job], now: float, config: Config,
               in_flight: Mapping[str, int]) -> ClusterState:
    """Free GPUs, less those promised to jobs this daemon pinned that Slurm has not run yet, and to
    resizes in flight (`daemon/pins.py`: until the pin lapses)."""
    nodes = list(nodes)
    state = ClusterState.from_nodes(nodes)
    taken = promised(jobs, {n.name: n for n in nodes}, now, config, in_flight)
    if not taken:
        return state
    return ClusterState({name: replace(n, gpus_free=max(n.gpus_free - taken.get(name, 0), 0))
                         for name, n in state.nodes.items()})


def take_shards(state: ClusterState, nodes: Mapping[str, Node], name: str, shards: int) -> ClusterState:
    """The state after `shards` shards on node `name` took the GPUs they spread over."""
    node = nodes[name]
    per_gpu = node.shards // node.gpus if node.gpus else 1   # Slurm spreads shards evenly over GPUs
    before = math.ceil(node.shards_alloc / max(per_gpu, 1))
    after = math.ceil((node.shards_alloc + shards) / max(per_gpu, 1))
    current = state.nodes[name]
    return ClusterState({**state.nodes, name: replace(current, gpus_free=max(current.gpus_free - (after - before), 0))})


def taken_by(state: ClusterState, job: Job, nodes: Mapping[str, int]) -> ClusterState:
    """The state after `job` took `nodes`: GPUs, and the CPUs and memory that feed them."""
    cpus_per_gpu, mem_per_gpu = per_gpu(job)
    out = dict(state.nodes)
    for name, gpus in nodes.items():
        node: NodeState = out[name]
        cpus, mem = math.ceil(cpus_per_gpu * gpus), math.ceil(mem_per_gpu * gpus)
        out[name] = replace(node, gpus_free=max(node.gpus_free - gpus, 0),
                            cpus_free=None if node.cpus_free is None else max(node.cpus_free - cpus, 0),
                            mem_free_mib=None if node.mem_free_mib is None else max(node.mem_free_mib - mem, 0))
    return ClusterState(out)


def stranded(job: Job, nodes: Mapping[str, Node]) -> bool:
    """A pending job pinned (ReqNodeList) to a node that cannot take work now."""
    return any(name in nodes and not nodes[name].available for name in job.required_nodes)
