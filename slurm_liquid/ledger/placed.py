"""The placement string, one format for GPUs and shards, in the tag and in the record.

    gpu[01-02]:4+gpu03:1    GPUs per node (nodes with the same count share one hostlist)
    gpu01:shard4            a GPU share: `shard` GRES count on one node
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

import hostlist

from slurm_liquid import hostnames
from slurm_liquid.ledger.limits import MAX_NODES, LedgerError

_GROUP = re.compile(r"^(?P<names>[A-Za-z0-9_.\-\[\],]+):(?P<count>\d{1,6})$")
_SHARD = re.compile(r"^(?P<node>[A-Za-z0-9_.\-]+):shard(?P<count>\d{1,6})$")


@dataclass(frozen=True)
class Placed:
    nodes: Mapping[str, int] = field(default_factory=dict)   # GPUs per node (shards: {node: 0})
    shards: int = 0

    @property
    def gpus(self) -> int:
        return sum(self.nodes.values())

    def render(self) -> str:
        if self.shards:
            return f"{next(iter(self.nodes))}:shard{self.shards}"
        return format_placed(self.nodes)

    @classmethod
    def parse(cls, text: str) -> "Placed":
        """Raises LedgerError on anything the daemon did not write."""
        text = (text or "").strip()
        shard = _SHARD.match(text)
        if shard:
            count = int(shard["count"])
            if count <= 0:
                raise LedgerError(f"placement {text!r}: no shards")
            return cls({shard["node"]: 0}, count)
        return cls(parse_placed(text))


def format_placed(nodes: Mapping[str, int]) -> str:
    """{gpu01: 4, gpu02: 4, gpu03: 1} -> 'gpu[01-02]:4+gpu03:1' (one word)."""
    by_count: dict[int, list[str]] = {}
    for name, gpus in nodes.items():
        by_count.setdefault(gpus, []).append(name)
    return "+".join(f"{hostlist.collect_hostlist(names)}:{count}"
                    for count, names in sorted(by_count.items(), reverse=True))


def parse_placed(text: str) -> dict[str, int]:
    """'gpu[01-02]:4+gpu03:1' -> {gpu01: 4, gpu02: 4, gpu03: 1}; LedgerError on anything else."""
    nodes: dict[str, int] = {}
    if not (text or "").strip():
        return nodes
    for group in text.strip().split("+"):
        match = _GROUP.match(group)
        if not match:
            raise LedgerError(f"placement {text[:80]!r}: {group[:40]!r} is not NODES:GPUS")
        for name in expand_nodes(match["names"]):
            nodes[name] = int(match["count"])
    return nodes


def expand_nodes(names: str) -> list[str]:
    """A hostlist, refused before expansion when it would name more than MAX_NODES nodes."""
    try:
        return hostnames.expand(names, MAX_NODES)
    except hostlist.BadHostlist as exc:
        raise LedgerError(f"hostlist {names[:80]!r}: {exc}") from None
