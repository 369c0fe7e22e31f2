"""Cluster state and placement requests from JSON files (command line, tests, examples).

State:    {"nodes": {"gpu[01-04]": {"gpus": 8, "gpus_free": 3, "gpu_type": "h100"}}}
Requests: [{"job": "a", "gpus": 16, "gpus_per_node": 8}, {"job": "b", "gpus": 2}]

Node keys may be hostlist expressions. Every problem raises UsageError naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hostlist

from slurm_liquid.errors import UsageError
from slurm_liquid.files import read_json
from slurm_liquid.placement.base import ClusterState, NodeState, PlacementRequest
from slurm_liquid.slurm.parse import MAX_HOSTS, expand_hostlist

_NODE_INTS = ("gpus", "gpus_free", "cpus", "cpus_free", "mem_mib", "mem_free_mib")
_REQUEST_FIELDS = {"job", "gpus", "gpus_per_node", "gpu_type"}
# Beyond any real node or job; the bounds keep the placers' arithmetic in plain machine integers.
MAX_GPUS = 1_000_000
_HIGH = {"mem_mib": 2 ** 50, "mem_free_mib": 2 ** 50, "cpus": 2 ** 31, "cpus_free": 2 ** 31}
MAX_NAME = 256


def _integer(value: Any, where: str, low: int = 0, high: int = MAX_GPUS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise UsageError(f"{where} must be an integer in {low}..{high}, got {shown}")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME:
        raise UsageError(f"{where} must be a string of at most {MAX_NAME} characters")
    return value


def state_from_json(data: Any, source: str = "state") -> ClusterState:
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise UsageError(f'{source}: expected {{"nodes": {{"<name>": {{"gpus": 8, "gpus_free": 3}}}}}}')
    nodes: dict[str, NodeState] = {}
    for key, fields in data["nodes"].items():
        where = f"{source}: nodes.{_name(key, f'{source}: a node name')}"
        try:
            names = expand_hostlist(key, MAX_HOSTS - len(nodes))
        except hostlist.BadHostlist as exc:
            raise UsageError(f"{where}: bad node name expression: {exc}") from None
        if not isinstance(fields, dict):
            raise UsageError(f"{where} must be an object such as {{\"gpus\": 8}}")
        unknown = set(fields) - set(_NODE_INTS) - {"gpu_type"}
        if unknown:
            raise UsageError(f"{where}: unknown field(s) {', '.join(sorted(unknown))[:200]}")
        if "gpus" not in fields:
            raise UsageError(f"{where}.gpus is missing")
        values = {f: _integer(fields[f], f"{where}.{f}", high=_HIGH.get(f, MAX_GPUS)) for f in _NODE_INTS
                  if f in fields}
        values.setdefault("gpus_free", values["gpus"])
        for free, total in (("gpus_free", "gpus"), ("cpus_free", "cpus"), ("mem_free_mib", "mem_mib")):
            if free in values and total in values and values[free] > values[total]:
                raise UsageError(f"{where}.{free}={values[free]} exceeds {total}={values[total]}")
        gpu_type = fields.get("gpu_type")
        if gpu_type is not None:
            _name(gpu_type, f"{where}.gpu_type")
        for name in names:
            if name in nodes:
                raise UsageError(f"{where}: node {name} is given twice")
            nodes[name] = NodeState(name, gpu_type=gpu_type, **values)
    if not nodes:
        raise UsageError(f"{source}: no nodes")
    return ClusterState(nodes)


def requests_from_json(data: Any, source: str = "requests") -> list[PlacementRequest]:
    if not isinstance(data, list):
        raise UsageError(f'{source}: expected a list such as [{{"job": "a", "gpus": 4}}]')
    out: list[PlacementRequest] = []
    for i, item in enumerate(data):
        where = f"{source}[{i}]"
        if not isinstance(item, dict):
            raise UsageError(f"{where} must be an object with job and gpus")
        unknown = set(item) - _REQUEST_FIELDS
        if unknown:
            raise UsageError(f"{where}: unknown field(s) {', '.join(sorted(unknown))[:200]}")
        job = item.get("job", str(i))
        if isinstance(job, int) and not isinstance(job, bool) and abs(job) < 10 ** 18:
            job = str(job)
        job = _name(job, f"{where}.job")
        gpus = _integer(item.get("gpus"), f"{where}.gpus", low=1)
        per_node = item.get("gpus_per_node")
        if per_node is not None:
            per_node = _integer(per_node, f"{where}.gpus_per_node", low=1)
            if gpus % per_node:
                raise UsageError(f"{where}: gpus={gpus} is not a multiple of gpus_per_node={per_node}")
        gpu_type = item.get("gpu_type")
        if gpu_type is not None:
            _name(gpu_type, f"{where}.gpu_type")
        out.append(PlacementRequest(job, gpus, per_node, gpu_type))
    return out


def load_state(path: str | Path) -> ClusterState:
    return state_from_json(read_json(path, "state"), f"state file {path}")


def load_requests(path: str | Path) -> list[PlacementRequest]:
    return requests_from_json(read_json(path, "requests"), f"requests file {path}")
