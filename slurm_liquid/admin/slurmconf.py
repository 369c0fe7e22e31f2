"""slurm.conf as Slurm reads it, for `doctor`: every `Key=value` with the file and line it came from,
`include` lines followed, and the lines of liquid.conf checked against what the site already has.

Slurm keeps the last value of a key given twice (it logs "specified more than once, latest value
used"): appending `include liquid.conf` after a site's own `Epilog=` silently replaces the site's epilog.
"""

from __future__ import annotations

import glob
import shlex
from dataclasses import dataclass
from pathlib import Path

# Keys whose value is a comma-separated list of plugins: ours must be one of them.
PLUGIN_LISTS = {"clifilterplugins": "cli_filter/lua", "jobsubmitplugins": "lua"}
# Keys whose value is one script: ours, or the site's own script that must call ours.
SCRIPTS = ("epilogslurmctld", "epilog", "taskprolog")
MAX_DEPTH = 8
DEFINITIONS = ("nodename", "partitionname", "nodeset", "downnodes", "frontendname", "switchname")


@dataclass(frozen=True)
class Setting:
    key: str            # as written
    value: str
    where: str          # file:line


def read(path: Path, depth: int = 0) -> list[Setting]:
    """Every Key=value of `path` and its includes, in the order Slurm reads them."""
    out: list[Setting] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.lower().startswith("include ") and depth < MAX_DEPTH:
            target = line.split(None, 1)[1].strip()
            pattern = target if target.startswith("/") else str(path.parent / target)
            for name in sorted(glob.glob(pattern)):
                out.extend(read(Path(name), depth + 1))
            continue
        # node, partition and switch lines define things; they set no option
        if "=" in line and not line.lower().startswith(DEFINITIONS):
            key, _, value = line.partition("=")
            try:
                value = " ".join(shlex.split(value.strip()))
            except ValueError:
                value = value.strip()
            out.append(Setting(key.strip(), value, f"{path}:{number}"))
    return out


def last(settings: list[Setting], key: str) -> Setting | None:
    found = [s for s in settings if s.key.lower() == key.lower()]
    return found[-1] if found else None


def overridden(settings: list[Setting]) -> list[tuple[Setting, Setting]]:
    """(earlier, later) pairs of a key set twice to different values: the earlier one is lost."""
    pairs = []
    seen: dict[str, Setting] = {}
    for s in settings:
        k = s.key.lower()
        if k in seen and seen[k].value != s.value:
            pairs.append((seen[k], s))
        seen[k] = s
    return pairs
