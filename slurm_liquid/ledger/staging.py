"""Every string staging writes or reads in Slurm fields and files, in one place.

- the job's datasets: `dataset=` / `stage=` / `stage-size=` in the record's spec (Comment: the user's claim)
  or in a `liquid:` comment;
- the daemon's prediction for a waiting job, a segment of its AdminComment (root only, so trusted):
  ``liquid-stage/1 nodes=gpu[01-02] at=1796228051``;
- the record field ``staged=`` (Comment), one part per node joined by ',':
  ``gpu01:1.2G:14s:+40s`` = 1.2 GB on gpu01, copied in 14 s (``hit``: reused), ready 40 s before the
  job started (``late``: not ready at start, the job read the shared path);
- the TaskProlog's lines: ``export LIQUID_DATA=/path`` (and LIQUID_DATA_1.. for each dataset).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import hostlist

from slurm_liquid.errors import LiquidError
from slurm_liquid.ledger.limits import COMMENT_LIMIT, LedgerError, segments
from slurm_liquid.ledger.placed import expand_nodes
from slurm_liquid.ledger.record import Record

HINT_VERSION = "liquid-stage/1"
ERR_PREFIX = "dataset:"
_PART = re.compile(r"^([A-Za-z0-9_.-]+):([0-9.]+[KMGT]?|-):(hit|\d+s|-):([+-]\d+s|late|@\d+)$")


@dataclass(frozen=True)
class Wanted:
    """What a job asked to stage (a claim: paths are checked as the job's user when staged)."""

    paths: tuple[str, ...]
    mode: str = "copy"               # copy | untar
    size_hint: int | None = None     # bytes


def wanted(comment: str) -> Wanted | None:
    """The datasets a job's Comment names (its record's spec, or a `liquid:` comment); None when none
    or when the spec does not parse (the record's err= already says so)."""
    if "dataset=" not in (comment or ""):      # most jobs: no parsing at all (the daemon asks every pass)
        return None
    from slurm_liquid.jobspec import parse_comment

    record = Record.parse(comment)
    try:   # a spec the record cut to fit is refused by job_spec(): what is left may be half a path
        spec = record.job_spec() if record is not None else parse_comment(comment or "")
    except LiquidError:
        return None
    if not spec.dataset:
        return None
    return Wanted(tuple(spec.dataset.split(",")), spec.stage or "copy", spec.stage_size)


@dataclass(frozen=True)
class Hint:
    """Where the daemon expects a waiting job to run."""

    nodes: tuple[str, ...]
    at: int = 0

    def render(self) -> str:
        return f"{HINT_VERSION} nodes={hostlist.collect_hostlist(list(self.nodes))} at={self.at}"

    @classmethod
    def parse(cls, admin_comment: str) -> "Hint | None":
        for values in segments(admin_comment, HINT_VERSION):
            try:
                nodes = tuple(expand_nodes(values.get("nodes", "")))
                return cls(nodes, int(values.get("at", "0")))
            except (ValueError, LedgerError):
                return None
        return None


def with_hint(admin_comment: str, hint: Hint | None) -> str:
    """The AdminComment with the hint segment replaced (None: removed); the tag and others kept."""
    kept = [s.strip() for s in (admin_comment or "").split(";")
            if s.strip() and s.split()[0] != HINT_VERSION]
    return "; ".join([*kept, *([hint.render()] if hint else [])])[:COMMENT_LIMIT]


def human_bytes(n: int) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0" + unit, unit)
    return str(int(n))


@dataclass(frozen=True)
class Part:
    """One node's line in `staged=`: NODE:BYTES:TOOK:WHEN. WHEN is `+40s` (ready 40 s before the job
    started), `late` (not ready at the start: the job read the shared path), or `@1796228051` (ready
    then; written while the job still waited, for a job that ends before the agent sees it run)."""

    node: str
    nbytes: int | None        # None: not staged when the job started
    took: str                 # "14s" (copy time), "hit" (reused), "-"
    lead_s: int | None        # seconds ready before the start; None: late, or see ready_at
    ready_at: int | None = None

    def render(self) -> str:
        size = human_bytes(self.nbytes) if self.nbytes is not None else "-"
        if self.ready_at is not None:
            when = f"@{self.ready_at}"
        else:
            when = "late" if self.lead_s is None else f"{self.lead_s:+d}s"
        return f"{self.node}:{size}:{self.took}:{when}"


def lead_of(part: str, start: float | None) -> int | None:
    """Seconds the data was ready before `start` (None: late or unknown)."""
    when = part.rsplit(":", 1)[-1]
    if when.startswith("@") and start is not None:
        return round(start - int(when[1:]))
    if when.endswith("s") and when[:1] in "+-":
        return int(when[:-1])
    return None


def merge_staged(current: str | None, part: Part) -> str:
    """The `staged=` value with this node's part put in (other nodes' parts kept, sorted by node)."""
    parts = {p.split(":", 1)[0]: p for p in (current or "").split(",") if _PART.match(p)}
    parts[part.node] = part.render()
    return ",".join(parts[n] for n in sorted(parts))


def parse_staged(value: str | None) -> dict[str, str]:
    """node -> its part, for `explain` and tests."""
    return {p.split(":", 1)[0]: p for p in (value or "").split(",") if _PART.match(p)}


def env_lines(paths: list[str]) -> str:
    """What the TaskProlog prints: slurmstepd sets each `export NAME=value` line in the tasks' env."""
    lines = [f"export LIQUID_DATA={paths[0]}"] if paths else []
    lines += [f"export LIQUID_DATA_{i}={p}" for i, p in enumerate(paths, 1)]
    return "".join(line + "\n" for line in lines)


def describe(value: str | None, start: float | None) -> list[str]:
    """`staged=` in words, one line per node (for `slurm-liquid explain`)."""
    lines = []
    for node, part in sorted(parse_staged(value).items()):
        _, size, took, _ = part.split(":")
        lead = lead_of(part, start)
        if size == "-" or lead is None and start is not None:
            lines.append(f"{node}: not ready when the job started; it read the shared path")
            continue
        how = "reused an earlier copy" if took == "hit" else f"copied in {took}"
        when = "" if lead is None else (f", ready {lead} s before the start" if lead >= 0
                                         else f", ready {-lead} s after the start (later steps used it)")
        lines.append(f"{node}: {size}B {how}{when}")
    return lines
