"""The one parser for Slurm's switch lines, shared by topology.conf and `scontrol show topology`.

Both formats are lines of `Key=Value` words, one switch per line:

    SwitchName=s1 Nodes=gpu[01-16] LinkSpeed=100          # topology.conf
    SwitchName=s0 Level=1 LinkSpeed=1 Nodes=gpu[01-32] Switches=s[1-2]   # scontrol

Hostlist expressions (`gpu[01-04,07]`, `s[1-2]`) are expanded with python-hostlist.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import hostlist

from slurm_liquid.errors import UsageError
from slurm_liquid.slurm.parse import MAX_HOSTS, expand_hostlist

log = logging.getLogger(__name__)

_KNOWN_KEYS = {"switchname", "nodes", "switches", "linkspeed", "level"}
_NULLS = {"", "(null)", "none"}
# names all lines may expand to together: upper switches of `scontrol show topology` repeat
# their nodes, so a few times the most nodes a cluster has
MAX_NAMES = 10 * MAX_HOSTS


@dataclass(frozen=True)
class SwitchSpec:
    """One switch as written: its name, the nodes and switches it lists, its link speed."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: float = 1.0
    level: int | None = None
    line: int = 0  # where it was written, for error messages


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines without comments, with backslash continuations joined (as slurm.conf allows)."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.strip():
            out.append((start, line.strip()))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _expand(expr: str, key: str, number: int, budget: int = MAX_HOSTS) -> tuple[str, ...]:
    if expr.strip().lower() in _NULLS:
        return ()
    try:
        return tuple(expand_hostlist(expr, min(budget, MAX_HOSTS)))
    except hostlist.BadHostlist as exc:
        whole = f" (all lines together may list at most {MAX_NAMES} names)" if budget < MAX_HOSTS else ""
        raise UsageError(f"topology line {number}: bad {key}={_shown(expr)}: {exc}{whole}") from None


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 60 else repr(value[:57] + "...")


def _number(value: str, key: str, number: int, kind: type) -> float:
    try:
        parsed = kind(value) if len(value) <= 30 else math.nan
    except ValueError:
        parsed = math.nan
    if not (isinstance(parsed, int) or math.isfinite(parsed)):
        raise UsageError(f"topology line {number}: {key}={_shown(value)} is not a number")
    if not 0 <= parsed < 1e15 or (key == "LinkSpeed" and parsed == 0):
        raise UsageError(f"topology line {number}: {key}={_shown(value)} must be positive and below 1e15")
    return parsed


def parse_switch_lines(text: str, strict: bool = True) -> list[SwitchSpec]:
    """Parse switch lines; raise UsageError naming the line for anything malformed.

    With `strict`, a key other than SwitchName, Nodes, Switches, LinkSpeed and Level is an
    error (a typo in topology.conf); without it (scontrol output of a newer Slurm) it is
    skipped, and so are lines that do not start with SwitchName=.
    """
    specs: list[SwitchSpec] = []
    seen: dict[str, int] = {}
    budget = MAX_NAMES
    for number, line in _logical_lines(text):
        if not strict and not line.lower().startswith("switchname="):
            log.debug("topology line %d: skipping a line that names no switch: %s", number, line)
            continue
        fields: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if not sep:
                raise UsageError(f"topology line {number}: {_shown(word)} is not Key=Value")
            lower = key.lower()
            if lower not in _KNOWN_KEYS:
                if strict:
                    raise UsageError(f"topology line {number}: unknown key {_shown(key)} "
                                     "(expected SwitchName, Nodes, Switches, LinkSpeed, Level)")
                log.debug("topology line %d: skipping unknown key %s", number, key)
                continue
            if lower in fields:
                raise UsageError(f"topology line {number}: {key} given twice")
            fields[lower] = value
        name = fields.get("switchname", "").strip()
        if not name or name.lower() in _NULLS:
            raise UsageError(f"topology line {number}: missing SwitchName= (block topologies are not supported)")
        if name in seen:
            raise UsageError(f"topology line {number}: switch {_shown(name)} already defined on line {seen[name]}")
        seen[name] = number
        nodes = _expand(fields.get("nodes", ""), "Nodes", number, budget)
        switches = _expand(fields.get("switches", ""), "Switches", number, budget - len(nodes))
        budget -= len(nodes) + len(switches)
        if not nodes and not switches:
            raise UsageError(f"topology line {number}: switch {_shown(name)} is empty (no Nodes= and no Switches=)")
        speed = _number(fields["linkspeed"], "LinkSpeed", number, float) if "linkspeed" in fields else 1.0
        level = int(_number(fields["level"], "Level", number, int)) if "level" in fields else None
        specs.append(SwitchSpec(name, nodes, switches, speed, level, number))
    if not specs:
        raise UsageError("topology: no SwitchName= lines found")
    return specs
