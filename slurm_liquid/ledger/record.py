"""The readable record in the job Comment (users can write it, sacct shows it; nothing trusts it).

    liquid/1 mode=adjust est=2xh100:31G asked=gpu:4 set=gpu:2 placed=gpu01:2 | model=bert-large batch-size=32 || user text

`key=value` words after the version, then ` | ` and the job spec in directive form, then ` || ` and
whatever the user had written in the Comment themselves, kept verbatim: the record never costs a
user their own text. It fits Slurm's 1024 characters by cutting the spec first, then the decision,
never the user's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Mapping

from slurm_liquid.ledger.limits import COMMENT_LIMIT, VERSION, clean
from slurm_liquid.ledger.optin import USER_SEP, comment_opts_in

# Order in which fields are written (and read best in `sacct -o Comment%120`).
FIELDS = ("mode", "est", "asked", "set", "placed", "staged", "err", "note")
_KEY = re.compile(r"[a-z][a-z0-9_\-]{0,31}")
_EST = re.compile(r":(\d{1,6}(?:\.\d{1,3})?)G$")   # the GiB per GPU that ends an est= word


@dataclass(frozen=True)
class Record:
    """Decision fields, the job spec in directive form, and the user's own Comment text."""

    fields: Mapping[str, str] = field(default_factory=dict)
    spec: str = ""               # "model=bert-large batch-size=32 ..." (no #LIQUID prefix)
    user: str = ""               # the user's own Comment text, kept verbatim

    def get(self, key: str) -> str | None:
        return self.fields.get(key)

    def with_fields(self, **values: object) -> "Record":
        """A copy with fields set (None removes one); values are made single words."""
        merged = dict(self.fields)
        for key, value in values.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = clean(value)
        return replace(self, fields=merged)

    def render(self, limit: int = COMMENT_LIMIT) -> str:
        keys = [k for k in FIELDS if k in self.fields] + sorted(k for k in self.fields if k not in FIELDS)
        head = " ".join([VERSION, *(f"{k}={self.fields[k]}" for k in keys)])
        user = self.user.replace("\n", " ").strip()
        tail = f"{USER_SEP}{user}" if user else ""
        room = limit - len(tail)
        if room < len(VERSION):     # no room for a record beside the user's text: theirs wins
            return user[:limit]
        spec = self.spec.replace("||", "|").replace("\n", " ").strip()
        line = f"{head} | {spec}" if spec else head
        if len(line) > room:
            # The spec can be rebuilt from the script; the decision cannot: cut the spec first.
            cut = room - len(head) - len(" | ...")
            line = f"{head} | {spec[:cut]}..." if spec and cut > 0 else head[:room]
        return line + tail

    @classmethod
    def parse(cls, text: str) -> "Record | None":
        """The record in a Comment, or None when the Comment holds none."""
        body = (text or "").strip()
        if not body.startswith(VERSION + " ") and body != VERSION:
            return None
        ours, _, user = body.partition(USER_SEP)
        head, _, spec = ours[len(VERSION):].partition(" | ")
        fields = {}
        for word in head.split():
            key, sep, value = word.partition("=")
            if sep and _KEY.fullmatch(key):
                fields[key] = value
        return cls(fields, spec.strip(), user.strip())

    @classmethod
    def of_comment(cls, comment: str) -> "Record":
        """The record to build on for a job whose Comment is `comment`: its record if it has one;
        else a new one keeping the user's own text (a `liquid:` spec comment becomes the spec)."""
        parsed = cls.parse(comment)
        if parsed is not None:
            return parsed
        text = (comment or "").strip()
        # `liquid: spec || user text` (the sbatch wrapper's): the user's part is theirs to keep
        return cls(user=text.partition(USER_SEP)[2].strip()) if comment_opts_in(text) else cls(user=text)

    def estimate_mib(self) -> float | None:
        """The estimated GPU memory per GPU of `est=` (`2xh100-80gb:31G` -> 31744), None without one."""
        match = _EST.search(self.fields.get("est", ""))
        return float(match.group(1)) * 1024 if match else None

    def job_spec(self):
        """The spec as a JobSpec (raises LiquidError when it does not parse, or was cut)."""
        from slurm_liquid.errors import UsageError

        if self.spec.endswith("..."):
            raise UsageError("the record's spec was cut to fit the Comment")
        return _spec_of(self.spec)


@lru_cache(maxsize=1024)
def _spec_of(text: str):
    """A JobSpec (frozen) per distinct spec text: a pass places hundreds of jobs that say the same
    few things, and reading one is a shell-style tokenizer run (an error is raised again each time)."""
    from slurm_liquid.jobspec import parse_directives

    return parse_directives(text)
