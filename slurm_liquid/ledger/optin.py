"""The opt-in rule: which jobs slurm-liquid may ever touch. One rule, for Python and both Lua plugins.

A job opted in when its Comment starts (after white space) with `liquid:` (a spec) or `liquid/`
(a record cli_filter wrote), any case, or when its batch script has a line that starts (after spaces
or tabs) with the word `#LIQUID`, any case, followed by white space or the end of the line.
`liquidity ...` or `#LIQUIDATE` do not opt in.

The two patterns below are written so that Lua (string.find) and Python (re) read them the same way;
the Lua plugins carry them in their generated constants block (see lua_block()).
"""

from __future__ import annotations

import re

# Lua pattern == Python regular expression, character for character.
OPT_IN_COMMENT = "^[ \t\r\n]*[Ll][Ii][Qq][Uu][Ii][Dd][:/]"
OPT_IN_SCRIPT = "\n[ \t]*#[Ll][Ii][Qq][Uu][Ii][Dd][ \t\r\n]"   # searched in "\n" .. script .. "\n"

_COMMENT = re.compile(OPT_IN_COMMENT)
_SCRIPT = re.compile(OPT_IN_SCRIPT)


def comment_opts_in(comment: str | None) -> bool:
    return bool(comment) and _COMMENT.search(comment) is not None


def script_opts_in(script: str | None) -> bool:
    return bool(script) and _SCRIPT.search(f"\n{script}\n") is not None


def opted_in(script: str | None, comment: str | None) -> bool:
    return comment_opts_in(comment) or script_opts_in(script)


SPEC_PREFIX = "liquid:"
USER_SEP = " || "      # what follows it in a Comment is the user's own text, kept verbatim


def comment_spec(comment: str | None) -> str | None:
    """The job spec a `liquid: key=value ...` Comment carries (the text after the prefix), or None
    when the Comment is not one (a record `liquid/1 ...`, or the user's own text)."""
    body = (comment or "").strip()
    if body[:len(SPEC_PREFIX)].lower() != SPEC_PREFIX:
        return None
    return body[len(SPEC_PREFIX):].partition(USER_SEP)[0].strip()   # `liquid: spec || user text`
