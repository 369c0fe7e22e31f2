"""The site files this package ships (etc/ in the source tree, slurm_liquid/admin/site/ in a wheel), where
each one goes, and how the installed copies differ from them.

One table, `SITE_FILES`, says it all: `admin install` writes from it, `doctor` and the daemon's and the
agent's start-up warnings compare against it.
"""

from __future__ import annotations

import difflib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from slurm_liquid.errors import LiquidError
from slurm_liquid.ledger import lua

log = logging.getLogger(__name__)

ROLES = ("controller", "node", "login")
SLURM_DIR = "/etc/slurm"
SYSTEMD_DIR = "/etc/systemd/system"
DOC_DIR = "/usr/share/doc/slurm-liquid"   # the systemd units' Documentation= points here


@dataclass(frozen=True)
class SiteFile:
    source: str                 # relative to the site root (etc/... or docs/...)
    where: str                  # "slurm" | "systemd" | "doc": which destination directory
    mode: int
    roles: tuple[str, ...]      # the hosts that need it
    keep: bool = False          # the site's own settings: written only when absent, never replaced

    @property
    def name(self) -> str:
        return Path(self.source).name

    @property
    def lua(self) -> bool:
        return self.source.endswith(".lua")


ALL = ROLES
SITE_FILES: tuple[SiteFile, ...] = (
    SiteFile("etc/slurm/liquid.conf", "slurm", 0o644, ALL),
    SiteFile("etc/slurm/liquid.toml", "slurm", 0o644, ALL, keep=True),
    # sbatch runs cli_filter.lua wherever users submit; slurmctld runs job_submit.lua
    SiteFile("etc/slurm/cli_filter.lua", "slurm", 0o644, ("controller", "login")),
    SiteFile("etc/slurm/job_submit.lua", "slurm", 0o644, ("controller",)),
    SiteFile("etc/slurm/liquid-epilog", "slurm", 0o755, ("controller",)),
    SiteFile("etc/slurm/liquid-node-epilog", "slurm", 0o755, ("node",)),
    SiteFile("etc/slurm/liquid-task-prolog", "slurm", 0o755, ("node",)),
    SiteFile("etc/systemd/slurm-liquid-daemon.service", "systemd", 0o644, ("controller",)),
    SiteFile("etc/systemd/slurm-liquid-agent.service", "systemd", 0o644, ("node",)),
    *(SiteFile(f"docs/{name}", "doc", 0o644, ALL)
      for name in ("admin.md", "agent.md", "dl2.md", "elastic.md", "estimate.md", "placement.md", "simulator.md",
                   "slurm.md", "staging.md", "submission.md")),
)


def site_root() -> Path:
    """Where the shipped files are: inside the installed package, else the source checkout."""
    here = Path(__file__).resolve().parent
    for root in (here / "site", here.parents[1]):
        if (root / "etc" / "slurm" / "job_submit.lua").is_file():
            return root
    raise LiquidError(f"the site files are missing from this installation ({here / 'site'}); "
                      "reinstall slurm-liquid from its wheel or sdist")


def shipped_text(item: SiteFile) -> str:
    return (site_root() / item.source).read_text()


def chosen(roles: tuple[str, ...] | None = None, wheres: tuple[str, ...] = ("slurm", "systemd", "doc")) -> list[SiteFile]:
    """The files of these roles (None: every role) and destinations."""
    return [f for f in SITE_FILES if f.where in wheres and (roles is None or set(roles) & set(f.roles))]


@dataclass(frozen=True)
class Drift:
    path: Path
    problem: str                # "missing" | "constants" | "differs" | "mode"
    detail: str

    @property
    def serious(self) -> bool:
        """A missing file or stale ledger constants: slurmctld does not run what this package expects."""
        return self.problem in ("missing", "constants")


def destination(item: SiteFile, slurm_dir: str | os.PathLike = SLURM_DIR, systemd_dir: str | os.PathLike = SYSTEMD_DIR,
                doc_dir: str | os.PathLike = DOC_DIR) -> Path:
    return Path({"slurm": slurm_dir, "systemd": systemd_dir, "doc": doc_dir}[item.where]) / item.name


def compare(item: SiteFile, path: Path) -> Drift | None:
    """How the installed `path` differs from the shipped `item` (None: it does not, or it is the site's own)."""
    try:
        installed = path.read_text(errors="replace")
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return Drift(path, "missing", "not installed")
    except OSError as exc:
        return Drift(path, "missing", f"unreadable: {exc.strerror}")
    if item.keep:
        return None
    if item.lua and lua.block_in(installed) != lua.lua_block():
        return Drift(path, "constants", "its ledger constants block (version, limits, opt-in patterns) is not "
                                        "this package's")
    if installed != shipped_text(item):
        return Drift(path, "differs", "differs from this package's copy")
    if item.mode & 0o111 and not mode & 0o100:
        return Drift(path, "mode", f"not executable (mode {mode:o})")
    return None


def drift(roles: tuple[str, ...], slurm_dir: str | os.PathLike = SLURM_DIR) -> list[Drift]:
    """The Slurm files of `roles` in `slurm_dir` that are missing or not what this package ships."""
    found = []
    for item in chosen(roles, ("slurm",)):
        problem = compare(item, destination(item, slurm_dir))
        if problem is not None:
            found.append(problem)
    return found


def warn_at_start(role: str, slurm_dir: str | os.PathLike | None = None) -> list[Drift]:
    """The daemon's and the agent's start-up warning: installed Slurm files that are not this package's.

    Never raises: a warning must not stop a daemon that works."""
    slurm_dir = slurm_dir or default_slurm_dir()
    try:
        found = drift((role,), slurm_dir)
    except Exception as exc:  # noqa: BLE001 -- a start-up check, never a reason to stop
        log.warning("could not compare the installed Slurm files with this package's: %s", exc)
        return []
    for item in found:
        log.warning("%s: %s; `slurm-liquid admin install --dest %s --dry-run` shows the difference, "
                    "`slurm-liquid doctor` checks the rest", item.path, item.detail, slurm_dir)
    return found


def default_slurm_dir() -> str:
    """Where slurm.conf is: the directory of $SLURM_CONF, else /etc/slurm."""
    conf = os.environ.get("SLURM_CONF")
    return str(Path(conf).parent) if conf else SLURM_DIR


def unified_diff(old: str, new: str, path: Path) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"{path} (installed)", f"{path} (slurm-liquid)"))
