"""The decision record slurm-liquid keeps on every job it touches, in two Slurm fields.

- **Comment** (users can write it, sacct shows it): the readable record, e.g.
  ``liquid/1 mode=adjust est=2xh100:31G asked=gpu:4 set=gpu:2 placed=gpu01:2 | model=bert-large batch-size=32``.
  It tells the story; nothing trusts it.
- **AdminComment** (only Slurm operators can write it): the tag the daemon acts on, written by
  job_submit.lua inside slurmctld and by the daemon, e.g. ``liquid/1 state=held``. A user can neither
  forge it nor make the daemon touch a job that did not opt in.

Both are one line of ``key=value`` words after a version token, well under Slurm's 1024-character cap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping

VERSION = "liquid/1"
COMMENT_LIMIT = 1024
# Order in which fields are written (and read best in `sacct -o Comment%120`).
FIELDS = ("mode", "est", "asked", "set", "placed", "staged", "err", "note")
_WORD = re.compile(r"[^\s|=]+")


def _clean(value: object) -> str:
    """One word: spaces become '-', characters that would break the line are dropped."""
    text = "-".join(str(value).split())
    return re.sub(r"[|=\"'\\]", "", text)[:200]


@dataclass(frozen=True)
class Record:
    """The readable record in the job Comment: decision fields and the job spec in directive form."""

    fields: Mapping[str, str] = field(default_factory=dict)
    spec: str = ""               # "model=bert-large batch-size=32 ..." (no #LIQUID prefix)

    def get(self, key: str) -> str | None:
        return self.fields.get(key)

    def with_fields(self, **values: object) -> "Record":
        """A copy with fields set (None removes one); values are made single words."""
        merged = dict(self.fields)
        for key, value in values.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = _clean(value)
        return replace(self, fields=merged)

    def render(self, limit: int = COMMENT_LIMIT) -> str:
        keys = [k for k in FIELDS if k in self.fields] + sorted(k for k in self.fields if k not in FIELDS)
        head = " ".join([VERSION, *(f"{k}={self.fields[k]}" for k in keys)])
        if not self.spec:
            return head[:limit]
        line = f"{head} | {self.spec}"
        if len(line) <= limit:
            return line
        # The spec can be rebuilt from the script; the decision cannot: cut the spec first.
        room = limit - len(head) - len(" | ...")
        return f"{head} | {self.spec[:max(room, 0)]}..." if room > 0 else head[:limit]

    @classmethod
    def parse(cls, text: str) -> "Record | None":
        """The record in a Comment, or None when the Comment holds none."""
        body = (text or "").strip()
        if not body.startswith(VERSION + " ") and body != VERSION:
            return None
        head, _, spec = body[len(VERSION):].partition(" | ")
        fields = {}
        for word in head.split():
            key, sep, value = word.partition("=")
            if sep and _WORD.fullmatch(key):
                fields[key] = value
        return cls(fields, spec.strip())


@dataclass(frozen=True)
class Tag:
    """The trusted tag in AdminComment: what the daemon may do with the job.

    state: held (waiting for the daemon), placed (released onto `placed`), released (given to Slurm's
    own scheduler unplaced), shadow (shadow mode: annotate only), done (nothing more to do).
    """

    state: str
    placed: str = ""             # hostlist:gpus-per-node of the daemon's placement, e.g. gpu[01-02]:4
    extra: Mapping[str, str] = field(default_factory=dict)

    def render(self) -> str:
        words = [VERSION, f"state={_clean(self.state)}"]
        if self.placed:
            words.append(f"placed={_clean(self.placed)}")
        words += [f"{k}={_clean(v)}" for k, v in sorted(self.extra.items())]
        return " ".join(words)

    @classmethod
    def parse(cls, text: str) -> "Tag | None":
        """The tag in an AdminComment; other text in the field (an admin's note) is kept out."""
        for segment in (text or "").split(";"):
            record = Record.parse(segment)
            if record is not None and "state" in record.fields:
                fields = dict(record.fields)
                state, placed = fields.pop("state"), fields.pop("placed", "")
                return cls(state, placed, fields)
        return None


def with_tag(admin_comment: str, tag: Tag) -> str:
    """The AdminComment with our tag replaced (other segments, e.g. the agent's, kept)."""
    kept = [s.strip() for s in (admin_comment or "").split(";")
            if s.strip() and not (Record.parse(s.strip()) and "state=" in s)]
    return "; ".join([tag.render(), *kept])[:COMMENT_LIMIT]


USAGE_VERSION = "liquid-used/1"
# by= the source of the GPU readings, least trusted first: a merge of nodes keeps the weakest
USAGE_SOURCES = ("standin", "none", "nvml", "nvml-acct")


@dataclass(frozen=True)
class Usage:
    """What a job really used, measured by the node agents, in AdminComment beside the tag.

    ``liquid-used/1 by=nvml gpus=2 peak=31200 util=87 host=12000 cpu=3.5 shared=0 secs=3600 n=720 nodes=gpu01``

    peak: MiB per GPU, the largest over the job's GPUs (a GPU the job held alone counts all its used
    memory, what the card lost; a shared GPU counts the job's own processes). util: mean GPU
    utilisation (%) over samples, weighted by GPUs. host: peak host memory (MiB) on the busiest node.
    cpu: mean CPUs busy on the busiest node. One segment per job: each node's agent merges its part in.
    """

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
        import hostlist

        return " ".join([USAGE_VERSION, f"by={_clean(self.by)}", f"gpus={self.gpus}", f"peak={self.peak_mib}",
                         f"util={'-' if self.util is None else f'{self.util:.0f}'}", f"host={self.host_mib}", f"cpu={self.cpus:.1f}",
                         f"shared={int(self.shared)}", f"secs={self.seconds}", f"n={self.samples}",
                         f"nodes={hostlist.collect_hostlist(list(self.nodes))}"])

    @classmethod
    def parse(cls, text: str) -> "Usage | None":
        """The usage segment of an AdminComment, or None (absent or malformed: never half-trusted)."""
        for segment in (text or "").split(";"):
            words = segment.split()
            if not words or words[0] != USAGE_VERSION:
                continue
            values = dict(w.partition("=")[::2] for w in words[1:])
            try:
                import hostlist

                return cls(by=values["by"], gpus=int(values["gpus"]), peak_mib=int(values["peak"]),
                           util=None if values["util"] == "-" else float(values["util"]), host_mib=int(values.get("host", 0)),
                           cpus=float(values.get("cpu", 0)), shared=values.get("shared") == "1",
                           seconds=int(values.get("secs", 0)), samples=int(values.get("n", 0)),
                           nodes=tuple(hostlist.expand_hostlist(values.get("nodes", ""))))
            except (KeyError, ValueError, hostlist.BadHostlist):
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


def with_usage(admin_comment: str, usage: Usage) -> str:
    """The AdminComment with this node's usage merged into the job's usage segment (tag and others kept)."""
    segments = [s.strip() for s in (admin_comment or "").split(";") if s.strip()]
    current = Usage.parse(admin_comment)
    if current is None or set(current.nodes) == set(usage.nodes):
        merged = usage               # first node, or the same node(s) again: the newer reading wins
    elif set(usage.nodes) <= set(current.nodes):
        merged = current             # already counted (a retried write): aggregates cannot be subtracted
    else:
        merged = current.merged(usage)
    kept = [s for s in segments if s.split()[0] != USAGE_VERSION]
    return "; ".join([*kept, merged.render()])[:COMMENT_LIMIT]
