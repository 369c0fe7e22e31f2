"""Run policies over workloads and summarise, shared by the CLI and the benchmarks."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Mapping, Sequence

from slurm_liquid.errors import UsageError
from slurm_liquid.loop import Loop, Rules, Shape
from slurm_liquid.placement.base import Placer
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy import make_policy
from slurm_liquid.views import SpeedModel
from slurm_liquid.sim.engine import ClusterConfig, SimResult, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel
from slurm_liquid.sim.workload import JobSpec


def placer_names() -> tuple[str, ...]:
    """'greedy' (the artifact's rule, ours) plus every placer the placement room registers."""
    try:
        from slurm_liquid.placement.factory import PLACERS
    except ImportError:  # the placement room is optional at this layer
        return ("greedy",)
    return ("greedy", *PLACERS)


def simulated_topology(config: ClusterConfig):
    """The simulated switch tree: leaves of `nodes_per_switch` consecutive nodes under one spine."""
    from slurm_liquid.topology import Topology
    from slurm_liquid.topology.parse import SwitchSpec

    names = [n.name for n in config.node_views()]
    per = config.nodes_per_switch or len(names)
    leaves = [SwitchSpec(f"leaf{i // per}", tuple(names[i:i + per])) for i in range(0, len(names), per)]
    specs = leaves if len(leaves) == 1 else leaves + [SwitchSpec("spine", switches=tuple(s.name for s in leaves))]
    return Topology.from_switches(specs)


def make_placer(kind: str, config: ClusterConfig, alpha: float = 0.5) -> tuple[ClusterConfig, Placer | None]:
    """A placer by name and the config to simulate with it (None: the policies' default, greedy).

    Topology-aware placers see the simulated switch tree, and the simulator takes each node's
    leaf switch from that same tree (for the cross-switch slowdown).
    """
    if kind == "greedy":
        return config, None
    if kind not in placer_names():
        raise UsageError(f"unknown placement {kind!r} (known: {', '.join(placer_names())})")
    from slurm_liquid.placement.factory import make_placer as make_room_placer

    topology = simulated_topology(config)
    options = {"alpha": alpha} if kind == "liquid" else {}
    placer = make_room_placer(kind, topology, **options)
    config = replace(config, node_switch={n.name: topology.leaf_of(n.name) for n in config.node_views()})
    return config, placer


SPEEDS = ("oracle", "measured")


def make_speed(kind: str, config: ClusterConfig) -> SpeedModel:
    """The speed model policies consult: the traces' exact answers (a reference run) or the speed room
    fitted on each job's simulated progress reports, as on the live cluster."""
    if kind == "oracle":
        return OracleSpeedModel(config.gpus_per_node, config.batch_scaling)
    if kind == "measured":
        from slurm_liquid.speed import MeasuredSpeedModel

        return MeasuredSpeedModel(config.gpus_per_node)
    raise UsageError(f"unknown speed model {kind!r} (known: {', '.join(SPEEDS)})")


def run_all(workloads: Mapping[str, Sequence[JobSpec]], policies: Sequence[str], config: ClusterConfig,
            placer: Placer | None = None, progress: bool = False,
            policy_file: str | None = None, speed: str = "oracle",
            shape: Shape = Shape.FREE, rules: Rules | None = None) -> dict[str, dict[str, SimResult]]:
    """policy -> workload -> result, every policy on every workload, under `rules` (default: the
    reference rules with `shape`).

    Each run gets a fresh policy and speed model: what a measured model learned on one workload must
    not help on the next."""
    rules = rules or replace(Rules.reference(), shape=Shape(shape))
    sims = {name: Simulator(specs, config, name) for name, specs in workloads.items()}
    out: dict[str, dict[str, SimResult]] = {}
    for pname in policies:
        for name, sim in sims.items():
            model = make_speed(speed, config)
            policy = make_policy(pname, model, policy_file, world=rules.name)
            loop = Loop.under(rules, policy, placer or MostFreeGreedy(), model)
            out.setdefault(policy.name, {})[name] = sim.run(policy, loop=loop, progress=progress)
    return out


def summarise(policy: str, label: str, results: Mapping[str, SimResult]) -> dict:
    """One JSON-ready object per policy: the mean over workloads, and each workload's numbers."""
    rows = [r.summary() for r in results.values()]
    keys = ("avg_jct_s", "makespan_s", "gpu_utilisation")
    obj = {"policy": policy, "workload": label, **{k: statistics.fmean(r[k] for r in rows) for k in keys},
           "restarts": sum(r["restarts"] for r in rows), "jobs": sum(r["jobs"] for r in rows)}
    if len(rows) > 1:
        obj["workloads"] = {r["workload"]: {k: r[k] for k in (*keys, "restarts", "jobs")} for r in rows}
    return obj
