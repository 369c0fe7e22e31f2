"""What `doctor` reads from the host: importable modules, processes (/proc), commands with a timeout."""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path

COMMAND_TIMEOUT_S = 15


def importable(name: str) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 -- broken counts as missing
        return False


def expand(nodelist: str) -> list[str]:
    try:
        import hostlist
        return list(hostlist.expand_hostlist(nodelist))
    except Exception:  # noqa: BLE001 -- an odd list is read as one name
        return [nodelist] if nodelist and nodelist != "None assigned" else []


def processes(*words: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv]
        if any(Path(a).name == words[0] for a in text[:2]) and all(w in text for w in words[1:]):
            found.append(int(entry.name))
    return found


def run_command(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 127, "", str(exc))


def detect_roles() -> tuple[str, ...]:
    roles = tuple(role for role, daemon in (("controller", "slurmctld"), ("node", "slurmd")) if processes(daemon))
    return roles or ("login",)
