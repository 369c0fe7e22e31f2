"""What a job really used, measured by the node agents, in AdminComment beside the tag.

    liquid-used/1 by=nvml gpus=2 peak=31200 util=87 host=12000 cpu=3.5 shared=0 secs=3600 n=720 nodes=gpu01

peak: MiB per GPU, the largest over the job's GPUs (a GPU the job held alone counts all its used
memory, what the card lost; a shared GPU counts the job's own processes). util: mean GPU
utilisation (%) over samples, weighted by GPUs. host: peak host memory (MiB) on the busiest node.
cpu: mean CPUs busy on the busiest node. One segment per job: each node's agent merges its part in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import hostlist

from slurm_liquid.ledger.limits import COMMENT_LIMIT, LedgerError, clean, segments
from slurm_liquid.ledger.placed import expand_nodes

USAGE_VERSION = "liquid-used/1"
# by= the source of the GPU readings, least trusted first: a merge of nodes keeps the weakest
USAGE_SOURCES = ("standin", "none", "nvml", "nvml-acct")
_MAX_INT = 10 ** 12


@dataclass(frozen=True)
class Usage:
    by: str
    gpus: int
    peak_mib: int
    util: float | None               # None: no utilisation reading at all (written `util=-`)
    host_mib: int = 0
    cpus: float = 0.0
    shared: bool = False
    seconds: int = 0
    samples: int = 0
    nodes: tuple[str, ...] = ()

    def render(self) -> str:
        return " ".join([USAGE_VERSION, f"by={clean(self.by)}", f"gpus={self.gpus}", f"peak={self.peak_mib}",
                         f"util={'-' if self.util is None else f'{self.util:.0f}'}", f"host={self.host_mib}",
                         f"cpu={self.cpus:.1f}", f"shared={int(self.shared)}", f"secs={self.seconds}",
                         f"n={self.samples}", f"nodes={hostlist.collect_hostlist(list(self.nodes))}"])

    @classmethod
    def parse(cls, text: str) -> "Usage | None":
        """The usage segment of an AdminComment, or None (absent or malformed: never half-trusted)."""
        for values in segments(text, USAGE_VERSION):
            try:
                return cls(by=values["by"], gpus=_int(values["gpus"]), peak_mib=_int(values["peak"]),
                           util=None if values["util"] == "-" else _num(values["util"]),
                           host_mib=_int(values.get("host", "0")), cpus=_num(values.get("cpu", "0")),
                           shared=values.get("shared") == "1", seconds=_int(values.get("secs", "0")),
                           samples=_int(values.get("n", "0")),
                           nodes=tuple(expand_nodes(values["nodes"])) if values.get("nodes") else ())
            except (KeyError, ValueError, LedgerError):
                return None
        return None

    def merged(self, other: "Usage") -> "Usage":
        """Two nodes' parts of one job."""
        known = [(u.util, u.gpus) for u in (self, other) if u.util is not None]
        weight = sum(g for _, g in known)
        util = (sum(v * g for v, g in known) / weight if weight else max(v for v, _ in known)) if known else None
        by = min(self.by, other.by, key=lambda s: USAGE_SOURCES.index(s) if s in USAGE_SOURCES else -1)
        return Usage(by=by, gpus=self.gpus + other.gpus, peak_mib=max(self.peak_mib, other.peak_mib), util=util,
                     host_mib=max(self.host_mib, other.host_mib), cpus=max(self.cpus, other.cpus),
                     shared=self.shared or other.shared, seconds=max(self.seconds, other.seconds),
                     samples=self.samples + other.samples,
                     nodes=tuple(sorted(set(self.nodes) | set(other.nodes))))


def _int(text: str) -> int:
    if not text.isdigit() or len(text) > 13 or int(text) > _MAX_INT:
        raise ValueError(f"{text[:20]!r} is not a count")
    return int(text)


def _num(text: str) -> float:
    if len(text) > 20:
        raise ValueError("number too long")
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a measurement")
    return value


def with_usage(admin_comment: str, usage: Usage) -> str:
    """The AdminComment with this node's usage merged into the job's usage segment (tag and others kept)."""
    parts = [s.strip() for s in (admin_comment or "").split(";") if s.strip()]
    current = Usage.parse(admin_comment)
    if current is None or set(current.nodes) == set(usage.nodes):
        merged = usage               # first node, or the same node(s) again: the newer reading wins
    elif set(usage.nodes) <= set(current.nodes):
        merged = current             # already counted (a retried write): aggregates cannot be subtracted
    else:
        merged = current.merged(usage)
    kept = [s for s in parts if s.split()[0] != USAGE_VERSION]
    return _fit([*kept, merged.render()])


def _fit(segments: list[str]) -> str:
    """Join segments under the limit, shortening other text (an admin's note) before ours."""
    line = "; ".join(segments)
    while len(line) > COMMENT_LIMIT and len(segments) > 1:
        ours = [s for s in segments if s.startswith(("liquid/", USAGE_VERSION))]
        others = [s for s in segments if s not in ours]
        if not others:
            break
        segments = [s for s in segments if s is not max(others, key=len)]
        line = "; ".join(segments)
    return line[:COMMENT_LIMIT]
