"""Versions, size limits and the one-word cleaning every ledger codec shares."""

from __future__ import annotations

import re
from typing import Iterator

from slurm_liquid.errors import LiquidError

VERSION = "liquid/1"
COMMENT_LIMIT = 1024            # slurmctld refuses a longer Comment or AdminComment
WORD_LIMIT = 200                # one value in a record or tag
MAX_SCRIPT_BYTES = 1 << 20      # of a batch script, read at submission or by the daemon
MAX_LINE_CHARS = 8192           # of one logical script line the parser looks at (longer: skipped, noted)
MAX_NODES = 65536               # nodes one hostlist in a field may name
MAX_LEASE_S = 3600              # a hold lease can never be longer (job_submit.lua clamps it too)
MAX_CLOCK_SKEW_S = 60           # an at= time further in the future than this is not believed

_UNSAFE = re.compile(r"[|=\"'\\;]")
_KEY = re.compile(r"[a-z][a-z0-9_\-]{0,31}")


class LedgerError(LiquidError):
    """A field's text is not what its codec writes (or a transition is not allowed)."""


def clean(value: object) -> str:
    """One word: white space becomes '-', characters that would break a field are dropped."""
    text = "-".join(str(value).split())
    return _UNSAFE.sub("", text)[:WORD_LIMIT]


def segments(text: str | None, version: str) -> Iterator[dict[str, str]]:
    """The `key=value` words of each `;`-separated segment of an AdminComment that starts with
    `version` (the first value of a key wins; words that are not key=value are passed over)."""
    for segment in (text or "").split(";"):
        words = segment.split()
        if not words or words[0] != version:
            continue
        values: dict[str, str] = {}
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if sep and _KEY.fullmatch(key):
                values.setdefault(key, value)
        yield values
