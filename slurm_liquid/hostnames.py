"""Slurm host lists (`gpu[01-04,07]`), expanded with python-hostlist under a bound on the total.

python-hostlist bounds each bracket range, but not the product of several ranges in one name
(`a[0-9999]b[0-9999]` is 10^8 names) nor a long list of parts: the size is counted from the brackets
first, and a list naming more than `limit` hosts is refused before anything is expanded.
"""

from __future__ import annotations

import re

import hostlist

_RANGE = re.compile(r"\[([^\]]*)\]")


def expand(expr: str, limit: int) -> list[str]:
    """The names of `expr`, each once, in order; hostlist.BadHostlist for a malformed or too large list."""
    total = 0
    for part in _top_level_parts(expr):
        size = 1
        for inner in _RANGE.findall(part):
            count = 0
            for item in inner.split(","):
                low, _, high = item.partition("-")
                if not (low.strip().isdigit() and (not high or high.strip().isdigit())) or len(low) > 9 or len(high) > 9:
                    raise hostlist.BadHostlist(f"bad range {item[:20]!r}")
                count += max(int(high) - int(low) + 1, 0) if high else 1
            size *= max(count, 1)
            if size > limit:
                raise hostlist.BadHostlist(f"more than {limit} names")
        total += size
        if total > limit:
            raise hostlist.BadHostlist(f"more than {limit} names")
    return list(dict.fromkeys(hostlist.expand_hostlist(expr))) if expr.strip() else []


def _top_level_parts(expr: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return [p for p in parts if p.strip()]
