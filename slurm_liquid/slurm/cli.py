"""`slurm-liquid slurm`: what the Slurm client sees, as a table or as JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime
from typing import Any

from slurm_liquid.slurm.client import BACKENDS, connect
from slurm_liquid.slurm.runner import ContainerRunner

VIEWS = ("version", "jobs", "accounting", "nodes", "partitions", "topology")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("view", choices=VIEWS, help="what to show")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="Slurm backend (default: auto)")
    parser.add_argument("--container", metavar="NAME",
                        help="run the Slurm commands inside this container (e.g. liquid-trixie-slurmctld)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each Slurm command")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return value


def _record(obj: Any) -> dict[str, Any]:
    return {k: _plain(v) for k, v in dataclasses.asdict(obj).items()}


def run(args: argparse.Namespace) -> int:
    client = connect(args.backend, runner=ContainerRunner(args.container) if args.container else None,
                     timeout_s=args.timeout)
    if args.view == "version":
        version = client.version()
        print(json.dumps({"slurm": str(version), "backend": client.name}) if args.json else f"Slurm {version} ({client.name})")
        return 0
    if args.view == "topology":
        topo = client.topology()
        leaves: dict[str, list[str]] = {}
        for node in topo.nodes:
            leaves.setdefault(topo.leaf_of(node), []).append(node)
        if args.json:
            print(json.dumps({"leaves": leaves}, indent=2))
        else:
            for leaf, nodes in leaves.items():
                print(f"{leaf} (under {' > '.join(topo.ancestors(leaf)) or 'nothing'}): {' '.join(nodes)}")
        return 0
    rows = {"jobs": client.jobs, "accounting": client.accounting, "nodes": client.nodes,
            "partitions": client.partitions}[args.view]()
    if args.json:
        print(json.dumps([_record(r) for r in rows], indent=2))
        return 0
    columns = {
        "jobs": ("job_id", "user", "state", "reason", "gpus", "nodes", "comment"),
        "accounting": ("job_id", "user", "state", "gpus", "nodes", "restarts", "comment"),
        "nodes": ("name", "state", "gpus", "gpus_alloc", "gpu_type", "cpus", "cpus_alloc", "mem_mib"),
        "partitions": ("name", "state", "is_default", "total_gpus", "nodes"),
    }[args.view]
    table = [columns] + [tuple(_cell(getattr(r, c)) for c in columns) for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(columns))]
    for row in table:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _cell(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value) or "-"
    return "-" if value in (None, "") else str(value)
