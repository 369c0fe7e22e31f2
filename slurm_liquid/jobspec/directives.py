"""Explicit directives: `#LIQUID key=value ...` lines and a `liquid: key=value ...` Comment, and the
layer that collects values of one strength (two explicit values for one key must agree)."""

from __future__ import annotations

import shlex
from typing import Any, Iterable

from slurm_liquid.errors import UsageError
from slurm_liquid.jobspec.spec import KEYS, JobSpec, _attr, canonical_key
from slurm_liquid.ledger.limits import MAX_LINE_CHARS, MAX_SCRIPT_BYTES

MAX_DIRECTIVE_LINES = 256

def _split(text: str, where: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError as exc:
        raise UsageError(f"{where}: cannot split {text.strip()!r}: {exc}") from None


def _pairs(tokens: Iterable[str], where: str) -> list[tuple[str, str | bool]]:
    pairs: list[tuple[str, str | bool]] = []
    for token in tokens:
        key, sep, value = token.partition("=")
        name = canonical_key(key, where)
        if not sep:
            if not KEYS[name].is_flag:
                raise UsageError(f"{where}: {name} needs a value ({name}=...)")
            pairs.append((name, True))
        else:
            pairs.append((name, value))
    return pairs


class _Layer:
    """Raw values of one strength; two explicit values for one key must agree."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.values: dict[str, Any] = {}
        self.where: dict[str, str] = {}
        self.notes: list[str] = []

    def add(self, key: str, raw: Any, where: str) -> None:
        try:
            value = KEYS[key].parse(raw)
        except ValueError as exc:
            if self.strict:
                raise UsageError(f"{where}: {key}: {exc}") from None
            self.notes.append(f"ignored {key} from {where}: {exc}")
            return
        old = self.values.get(key)
        if old is not None and old != value:
            if self.strict:
                raise UsageError(f"conflicting directives for {key}: {old!r} ({self.where[key]}) "
                                 f"and {value!r} ({where})")
            self.notes.append(f"{where} says {key}={value!r}; kept {old!r} from {self.where[key]}")
            return
        self.values.setdefault(key, value)
        self.where.setdefault(key, where)

    def spec(self) -> JobSpec:
        spec = JobSpec(**{_attr(k): v for k, v in self.values.items()},
                       sources=dict(self.where), notes=tuple(self.notes))
        spec._check(", ".join(sorted(set(self.where.values()))) or "directives")
        return spec


def parse_comment(text: str) -> JobSpec:
    """A Slurm `--comment`; only a comment that starts with `liquid:` says anything."""
    layer = _Layer(strict=True)
    _comment_into(layer, text, "--comment")
    return layer.spec()


def _comment_into(layer: _Layer, text: str, where: str) -> None:
    from slurm_liquid.ledger.optin import comment_spec

    body = comment_spec(text)
    if body is None:
        return
    for key, value in _pairs(_split(body, where), where):
        layer.add(key, value, where)


def parse_directives(text: str) -> JobSpec:
    """`#LIQUID ...` lines (or bare `key=value` text) -- strict, as in a batch script."""
    layer = _Layer(strict=True)
    for number, line in _bounded_lines(text, layer.notes):
        body = line.strip()
        if body.upper().startswith("#LIQUID"):
            body = body[len("#LIQUID"):]
        where = f"line {number}"
        for key, value in _pairs(_split(body, where), where):
            layer.add(key, value, where)
    return layer.spec()



def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, line with its backslash continuations joined), in time linear in `text`."""
    parts: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not parts:
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            parts.append(stripped[:-1] + " ")
            continue
        parts.append(line)
        yield start, "".join(parts)
        parts = []
    if parts:
        yield start, "".join(parts)


def _bounded_lines(text: str, notes: list[str]) -> Iterable[tuple[int, str]]:
    """The logical lines worth reading: the first MAX_SCRIPT_BYTES of a script, lines of at most
    MAX_LINE_CHARS (shlex is quadratic in one line's length; no real option line is that long)."""
    if len(text) > MAX_SCRIPT_BYTES:
        notes.append(f"read only the first {MAX_SCRIPT_BYTES} characters of the script")
        text = text[:MAX_SCRIPT_BYTES]
    for number, line in _logical_lines(text):
        if len(line) > MAX_LINE_CHARS:
            if line.lstrip().upper().startswith("#LIQUID"):
                raise UsageError(f"line {number}: a #LIQUID line of {len(line)} characters "
                                 f"(at most {MAX_LINE_CHARS})")
            notes.append(f"skipped line {number}: longer than {MAX_LINE_CHARS} characters")
            continue
        yield number, line

