"""`slurm-liquid admin install`: write the Slurm files, systemd units and docs this package ships.

    slurm-liquid admin install --dest /etc/slurm --dry-run     # what would change, as a diff
    slurm-liquid admin install --dest /etc/slurm --role node   # on a GPU node

Each file is compared with what is there and written only when it differs (atomically, with its mode;
owned by root when run as root). `liquid.toml` is the site's own: written when absent, never replaced
(its difference from the shipped one is shown). slurm.conf itself is never edited: the command prints
the line to add, and `slurm-liquid doctor` checks how it merges with what the site has.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from slurm_liquid import __version__
from slurm_liquid.admin import files
from slurm_liquid.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = sub.add_parser("install", help="write the Slurm files, systemd units and docs (shows a diff)")
    install.add_argument("--dest", default=files.SLURM_DIR, help="Slurm's configuration directory (default %(default)s)")
    install.add_argument("--role", choices=("all", *files.ROLES), default="all",
                         help="the files this host needs: controller, node (GPU node), login; all (default)")
    install.add_argument("--systemd-dir", default=files.SYSTEMD_DIR, help="where the units go (default %(default)s)")
    install.add_argument("--doc-dir", default=files.DOC_DIR, help="where the docs go (default %(default)s)")
    install.add_argument("--no-systemd", action="store_true", help="skip the systemd units")
    install.add_argument("--no-docs", action="store_true", help="skip the docs")
    install.add_argument("--dry-run", action="store_true", help="only show what would change")
    install.add_argument("--quiet", action="store_true", help="no diffs, one line per file")
    shadow = sub.add_parser("shadow", help="shadow mode's figures from sacct: would-be placements against Slurm's, "
                                           "estimates against measured peaks")
    shadow.add_argument("--since-days", type=int, default=7, help="jobs of this many past days (default %(default)s)")
    shadow.add_argument("--json", action="store_true", help="one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.action == "shadow":
        from slurm_liquid.admin import shadow
        found = shadow.figures(shadow.read(args.since_days), shadow.leaf_function()).to_json()
        print(json.dumps(found, indent=1) if args.json else shadow.render(found, args.since_days))
        return 0
    wheres = ("slurm",) + (() if args.no_systemd else ("systemd",)) + (() if args.no_docs else ("doc",))
    roles = None if args.role == "all" else (args.role,)
    if not Path(args.dest).is_dir() and not args.dry_run:
        raise UsageError(f"--dest {args.dest}: no such directory (Slurm's configuration directory)")
    changed = 0
    print(f"slurm-liquid {__version__}: site files from {files.site_root()}")
    for item in files.chosen(roles, wheres):
        path = files.destination(item, args.dest, args.systemd_dir, args.doc_dir)
        new = files.shipped_text(item)
        try:
            old = path.read_text(errors="replace")
        except FileNotFoundError:
            old = None
        except OSError as exc:
            raise UsageError(f"{path}: {exc.strerror}") from None
        mode_ok = old is not None and (path.stat().st_mode & 0o7777) == item.mode
        if old is None:
            verb = "would write" if args.dry_run else "wrote"
        elif old == new and (mode_ok or item.keep):
            print(f"unchanged  {path}")
            continue
        elif item.keep:
            print(f"kept       {path} (the site's settings; the shipped file differs:)")
            if not args.quiet:
                sys.stdout.write(files.unified_diff(old, new, path))
            continue
        else:
            verb = "would update" if args.dry_run else "updated"
        print(f"{verb:<10} {path}" + ("" if old is None or old != new else f" (mode {item.mode:o})"))
        if old is not None and old != new and not args.quiet:
            sys.stdout.write(files.unified_diff(old, new, path))
        changed += 1
        if not args.dry_run:
            write(path, new, item.mode)
    if args.role in ("all", "controller") and not args.dry_run:
        print(f"\nnext: add `include {Path(args.dest) / 'liquid.conf'}` to slurm.conf (or merge its lines), "
              "then `slurm-liquid doctor` and `scontrol reconfigure`")
    print(f"{changed} file(s) {'would change' if args.dry_run else 'changed'}")
    return 0


def write(path: Path, text: str, mode: int) -> None:
    """Atomically: a file slurmctld reads is never seen half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        if os.geteuid() == 0:
            os.chown(tmp, 0, 0)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
