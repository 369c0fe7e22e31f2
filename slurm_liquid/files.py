"""Reading the files users and admins hand us (site, correction, state, requests, topology).

Each way such a file can be unreadable becomes one UsageError naming the file and what is wrong:
missing or unreadable, not UTF-8, not JSON, JSON nested deeper than the parser can follow, an
integer too long to convert. Only the standard library, so the submit path stays light.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_liquid.errors import LiquidError, UsageError


def read_text(path: str | Path, what: str) -> str:
    """The file's text (UTF-8); UsageError saying `what` file could not be read and why."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} file {path}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})") from None


def parse_json(text: str, where: str, error: type[LiquidError] = UsageError) -> Any:
    """JSON from `text`; `error` prefixed by `where` for anything Python's parser refuses."""
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise error(f"{where}: JSON that cannot be read: {exc}") from None


def read_json(path: str | Path, what: str) -> Any:
    """`read_text` then `parse_json`: the file's JSON value, whatever its type."""
    return parse_json(read_text(path, what), f"{what} file {path}")
