"""`slurm-liquid place`: where jobs would go on a switch topology, given free GPUs.

    slurm-liquid place --topology topology.conf --state state.json --gpus 16 [--gpus-per-node 8]
    slurm-liquid place --state state.json --requests jobs.json --mode batch --json

Requests are placed in order, each seeing the GPUs the previous ones took.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any, Sequence

import hostlist

from slurm_liquid.errors import UsageError
from slurm_liquid.placement.base import ClusterState, Placement, PlacementRequest
from slurm_liquid.placement.factory import make_placer
from slurm_liquid.placement.inputs import MAX_GPUS, load_requests, load_state
from slurm_liquid.placement.quality import job_quality, whole_free_nodes
from slurm_liquid.topology import Topology

_IMMEDIATE = ("liquid", "slurm", "first-fit", "random")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", metavar="FILE",
                        help="topology.conf or saved `scontrol show topology` (default: one flat switch)")
    parser.add_argument("--state", metavar="FILE", required=True,
                        help='JSON: {"nodes": {"<name>": {"gpus": 8, "gpus_free": 3}}}')
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--gpus", type=int, metavar="N", help="place one job of N GPUs")
    what.add_argument("--requests", metavar="FILE", help='JSON list: [{"job": "a", "gpus": 4}, ...]')
    parser.add_argument("--gpus-per-node", type=int, metavar="K", help="with --gpus: exactly K GPUs on each node")
    parser.add_argument("--gpu-type", metavar="TYPE", help="with --gpus: only nodes with this GPU type")
    parser.add_argument("--job", default="job", help="with --gpus: the job's name in the output")
    parser.add_argument("--mode", choices=("immediate", "batch"), default="immediate",
                        help="immediate: best fit job by job; batch: grouping GA over all requests")
    parser.add_argument("--placer", choices=_IMMEDIATE, default="liquid",
                        help="immediate-mode strategy (liquid, or a baseline to compare with)")
    parser.add_argument("--alpha", type=float, default=0.5,
                        help="weight of network cost against node load, in [0, 1] (default 0.5)")
    parser.add_argument("--seed", type=int, default=0, help="batch/random: random seed (default 0)")
    parser.add_argument("--time-budget", type=float, default=0.5, metavar="S",
                        help="batch: seconds of search (default 0.5)")
    parser.add_argument("--generations", type=int, metavar="N",
                        help="batch: stop after N generations (with --time-budget 0: reproducible anywhere)")
    parser.add_argument("--json", action="store_true", help="print JSON with a `placements` list")


def _requests(args: argparse.Namespace) -> list[PlacementRequest]:
    if args.requests is not None:
        if args.gpus_per_node is not None or args.gpu_type is not None:
            raise UsageError("--gpus-per-node and --gpu-type go with --gpus; put them in the requests file instead")
        return load_requests(args.requests)
    if not 0 < args.gpus <= MAX_GPUS:
        raise UsageError(f"--gpus must be positive and at most {MAX_GPUS}, got {args.gpus}")
    k = args.gpus_per_node
    if k is not None and (k <= 0 or args.gpus % k):
        raise UsageError(f"--gpus {args.gpus} is not a positive multiple of --gpus-per-node {k}")
    return [PlacementRequest(args.job, args.gpus, k, args.gpu_type)]


def _placer(args: argparse.Namespace, topology: Topology) -> Any:
    if not 0.0 <= args.alpha <= 1.0:
        raise UsageError(f"--alpha must lie in [0, 1], got {args.alpha}")
    if args.mode == "batch":
        if args.placer != "liquid":
            raise UsageError("--placer chooses the immediate-mode strategy; batch mode is the grouping GA")
        budget = args.time_budget if args.time_budget > 0 else None
        if budget is None and args.generations is None:
            raise UsageError("--time-budget 0 needs --generations N")
        return make_placer("ga", topology, alpha=args.alpha, seed=args.seed, time_budget_s=budget,
                           generations=args.generations)
    options: dict[str, Any] = {"alpha": args.alpha} if args.placer == "liquid" else {}
    if args.placer == "random":
        options["seed"] = args.seed
    return make_placer(args.placer, topology, **options)


def _row(topology: Topology, request: PlacementRequest, placement: Placement) -> dict[str, Any]:
    row: dict[str, Any] = {"job": request.job, "gpus": request.gpus,
                           "nodes": dict(placement.nodes) if placement.nodes is not None else None,
                           "reason": placement.reason}
    if placement.nodes is not None:
        quality = job_quality(topology, placement.nodes)
        row.update(leaf_switches=list(quality.leaf_switches), switches_spanned=quality.switches_spanned,
                   cross_switch_pairs=quality.cross_switch_pairs, network_cost=round(quality.network_cost, 4))
    return row


def _compact(nodes: dict[str, int]) -> str:
    """`gpu[01-04]:8,gpu07:2`: nodes with the same GPU count folded into one hostlist."""
    by_count: dict[int, list[str]] = defaultdict(list)
    for name, gpus in nodes.items():
        by_count[gpus].append(name)
    return ",".join(f"{hostlist.collect_hostlist(names)}:{gpus}" for gpus, names in sorted(by_count.items(), reverse=True))


def _table(rows: Sequence[dict[str, Any]], after: ClusterState) -> str:
    header = ("JOB", "GPUS", "NODES", "SWITCHES", "NET")
    lines = [header]
    for row in rows:
        if row["nodes"] is None:
            lines.append((row["job"], str(row["gpus"]), "-", "-", f"not placed: {row['reason']}"))
        else:
            lines.append((row["job"], str(row["gpus"]), _compact(row["nodes"]), str(row["switches_spanned"]),
                          f"{row['network_cost']:.3f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in lines]
    text.append(f"after: {after.gpus_free} GPUs free, {whole_free_nodes(after)} nodes wholly free")
    return "\n".join(text)


def run(args: argparse.Namespace) -> int:
    state = load_state(args.state)
    topology = Topology.from_file(args.topology) if args.topology else Topology.flat(sorted(state.nodes))
    topology.check_nodes(state.nodes)
    requests = _requests(args)
    placer = _placer(args, topology)
    placements = placer.place_all(requests, state)
    after = state
    for placement in placements:
        after = after.take(placement)
    rows = [_row(topology, r, p) for r, p in zip(requests, placements)]
    if args.json:
        json.dump({"mode": args.mode, "placer": "ga" if args.mode == "batch" else args.placer,
                   "placements": rows, "gpus_free_after": after.gpus_free,
                   "whole_nodes_free_after": whole_free_nodes(after)}, sys.stdout, indent=2)
        print()
    else:
        print(_table(rows, after))
    return 0  # a job that does not fit now is an answer (with its reason), not an error
