"""The trusted tag in AdminComment: what the daemon may do with a job, and what it acts on later.

    liquid/1 state=placed placed=gpu[01-02]:4 at=1796228051 elastic=2:8 sig=USR1 grace=60 model=bert-base spec=3f2a9c01d4e5

Users cannot write AdminComment, so everything the daemon does as root after placement is decided by
this tag, never by the Comment: at placement the daemon copies the user's elastic range, checkpoint
signal (grace capped by the site), model (the speed prior) and a digest of the spec into it
(`TrustedSpec`). Editing the Comment afterwards changes nothing the daemon does, and training rows
whose spec no longer matches the digest are recognisable.

States and who moves between them (any other move raises LedgerError):

    (submission) -> untouched | held | shadow          job_submit.lua, inside slurmctld
    held      -> placed | released                     daemon: started on its nodes, or given to Slurm
    placed    -> placed | released                     daemon: resized or re-placed; unpinned after a lease
    shadow    -> shadowed;  shadowed -> shadowed       daemon in shadow mode: annotate only
    untouched, released: final (the daemon never acts on them again)
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Mapping

from slurm_liquid.ledger.limits import COMMENT_LIMIT, MAX_CLOCK_SKEW_S, VERSION, LedgerError, clean, segments
from slurm_liquid.ledger.placed import Placed


class TagState(str, Enum):
    UNTOUCHED = "untouched"
    HELD = "held"
    SHADOW = "shadow"
    SHADOWED = "shadowed"
    PLACED = "placed"
    RELEASED = "released"

    def __str__(self) -> str:
        return self.value


TRANSITIONS: dict[TagState, frozenset[TagState]] = {
    TagState.UNTOUCHED: frozenset(),
    TagState.HELD: frozenset({TagState.PLACED, TagState.RELEASED}),
    TagState.PLACED: frozenset({TagState.PLACED, TagState.RELEASED}),
    TagState.SHADOW: frozenset({TagState.SHADOWED}),
    TagState.SHADOWED: frozenset({TagState.SHADOWED}),
    TagState.RELEASED: frozenset(),
}
_SIGNAL = re.compile(r"[A-Z0-9]{1,12}")
_MODEL = re.compile(r"[a-z0-9][a-z0-9._\-]{0,63}")
_DIGEST = re.compile(r"[0-9a-f]{12}")
_KEY = re.compile(r"[a-z][a-z0-9_\-]{0,31}")
_TYPED = ("state", "placed", "at", "elastic", "sig", "grace", "model", "batch", "spec")
MAX_BATCH = 1_000_000


def spec_digest(spec_text: str) -> str:
    """12 hex digits naming a record's spec text (what the daemon saw when it placed the job)."""
    return hashlib.sha256(" ".join(spec_text.split()).encode("utf-8", "surrogatepass")).hexdigest()[:12]


@dataclass(frozen=True)
class TrustedSpec:
    """What the daemon acts on after placement, copied from the user's spec and bounded by the site."""

    low: int | None = None          # elastic range (None: not elastic)
    high: int | None = None
    signal: str = "USR1"
    grace_s: int = 60
    model: str = ""
    batch: int | None = None        # global batch size (the speed prior of the trace models)
    digest: str = ""

    @property
    def elastic(self) -> bool:
        return self.low is not None and self.high is not None

    @classmethod
    def of(cls, spec, spec_text: str, max_grace_s: float, max_gpus: int) -> "TrustedSpec":
        """From a parsed JobSpec: the range clamped to [1, max_gpus], the grace to the site's cap."""
        low = high = None
        if spec.elastic:
            a, b = (int(x) for x in spec.elastic.split(":"))
            high = max(1, min(b, max_gpus))
            low = max(1, min(a, high))
        signal, _, grace = (spec.signal or "USR1@60").partition("@")
        grace_s = int(min(float(grace or 60), max_grace_s))
        model = (spec.model or "").lower()
        batch = spec.batch_size if spec.batch_size and 0 < spec.batch_size <= MAX_BATCH else None
        return cls(low, high, signal if _SIGNAL.fullmatch(signal) else "USR1", max(grace_s, 0),
                   model if _MODEL.fullmatch(model) else "", batch, spec_digest(spec_text))

    def words(self) -> list[str]:
        words = []
        if self.elastic:
            words.append(f"elastic={self.low}:{self.high}")
        words += [f"sig={self.signal}", f"grace={self.grace_s}"]
        if self.model:
            words.append(f"model={self.model}")
        if self.batch:
            words.append(f"batch={self.batch}")
        if self.digest:
            words.append(f"spec={self.digest}")
        return words

    @classmethod
    def of_words(cls, values: Mapping[str, str]) -> "TrustedSpec | None":
        if "sig" not in values:
            return None
        low = high = None
        lo, sep, hi = values.get("elastic", "").partition(":")
        if sep and lo.isdigit() and hi.isdigit() and len(lo) < 6 and len(hi) < 6 and 1 <= int(lo) <= int(hi):
            low, high = int(lo), int(hi)
        grace = values.get("grace", "60")
        model, digest, batch = values.get("model", ""), values.get("spec", ""), values.get("batch", "")
        return cls(low, high, values["sig"] if _SIGNAL.fullmatch(values["sig"]) else "USR1",
                   int(grace) if grace.isdigit() and len(grace) < 7 else 60,
                   model if _MODEL.fullmatch(model) else "",
                   int(batch) if batch.isdigit() and 0 < int(batch[:8]) <= MAX_BATCH and len(batch) < 8 else None,
                   digest if _DIGEST.fullmatch(digest) else "")


@dataclass(frozen=True)
class Tag:
    state: TagState
    placed: str = ""                    # Placed.render() of the daemon's placement
    at: int | None = None               # when the daemon placed (unix seconds)
    trusted: TrustedSpec | None = None
    extra: Mapping[str, str] = field(default_factory=dict)   # why=, would=, change=: for people

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", TagState(self.state))

    def to(self, state: TagState | str, **changes) -> "Tag":
        """The tag after a move to `state`; LedgerError when the move is not allowed."""
        state = TagState(state)
        if state not in TRANSITIONS[self.state]:
            raise LedgerError(f"tag state {self.state} cannot become {state}")
        extra = {**self.extra, **{k: clean(v) for k, v in changes.pop("extra", {}).items()}}
        return replace(self, state=state, extra=extra, **changes)

    def placement(self) -> Placed | None:
        try:
            return Placed.parse(self.placed) if self.placed else None
        except LedgerError:
            return None

    def placed_at(self, now: float) -> int | None:
        """`at`, unless it lies in the future (a clock jump, a hand edit): then not believed."""
        return self.at if self.at is not None and self.at <= now + MAX_CLOCK_SKEW_S else None

    def render(self) -> str:
        words = [VERSION, f"state={self.state.value}"]
        if self.placed:
            words.append(f"placed={clean(self.placed)}")
        if self.at is not None:
            words.append(f"at={int(self.at)}")
        if self.trusted:
            words += self.trusted.words()
        words += [f"{k}={clean(v)}" for k, v in sorted(self.extra.items()) if k not in _TYPED and _KEY.fullmatch(k)]
        return " ".join(words)

    @classmethod
    def parse(cls, text: str) -> "Tag | None":
        """The tag in an AdminComment (other segments, an admin's note or the usage, are not it)."""
        if not text or VERSION not in text:    # most jobs' AdminComment: no segment of ours
            return None
        for values in segments(text, VERSION):
            try:
                state = TagState(values.get("state", ""))
            except ValueError:
                continue
            placed = values.get("placed", "")
            try:
                Placed.parse(placed) if placed else None
            except LedgerError:
                placed = ""
            at = values.get("at", "")
            extra = {k: v for k, v in values.items() if k not in _TYPED}
            return cls(state, placed, int(at) if at.isdigit() and len(at) <= 12 else None,
                       TrustedSpec.of_words(values), extra)
        return None


def with_tag(admin_comment: str, tag: Tag) -> str:
    """The AdminComment with our tag replaced (other segments, e.g. the agent's usage, kept)."""
    from slurm_liquid.ledger.usage import _fit

    kept = [s.strip() for s in (admin_comment or "").split(";") if s.strip() and Tag.parse(s) is None]
    return _fit([tag.render(), *kept])[:COMMENT_LIMIT]
