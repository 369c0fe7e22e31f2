"""The `slurm-liquid` command: a thin dispatcher over one module per subcommand.

Each subcommand module is imported only when that subcommand runs, so that the
submit-time path (`slurm-liquid estimate`, called from sbatch) never pays for the
imports of the simulator or the policy code. A subcommand module provides
`add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from slurm_liquid import __version__
from slurm_liquid.errors import LiquidError

# name -> (module, one-line help). Add a row to add a subcommand.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "slurm": ("slurm_liquid.slurm.cli", "read jobs, nodes and topology through the Slurm client"),
    "estimate": ("slurm_liquid.estimate.cli", "estimate what a DL job needs (GPUs, memory, CPUs)"),
    "place": ("slurm_liquid.placement.cli", "place GPU jobs on a switch topology"),
    "simulate": ("slurm_liquid.sim.cli", "run the trace-driven scheduling simulator"),
    "policy": ("slurm_liquid.training.cli", "train and inspect the DL2 scheduling policy"),
    "sbatch": ("slurm_liquid.admission.sbatch", "sbatch with --liquid-KEY VALUE job-spec flags"),
    "submit-filter": ("slurm_liquid.admission.filter", "the helper cli_filter.lua runs in every sbatch"),
    "daemon": ("slurm_liquid.daemon.cli", "hold, place and release opted-in jobs (runs beside slurmctld)"),
    "explain": ("slurm_liquid.explain", "show a job's slurm-liquid record and the reasoning behind it"),
    "agent": ("slurm_liquid.agent.cli", "measure what jobs use on this node (NVML) and record it in sacct"),
    "admin": ("slurm_liquid.admin.cli", "install the Slurm files, systemd units and docs this package ships"),
    "doctor": ("slurm_liquid.admin.doctor", "check this controller or node's set-up; say what is wrong and the fix"),
}

# What the `site` extra adds to the light install (pyproject.toml).
SITE_MODULES = {"numpy", "scipy", "sklearn", "networkx", "hostlist", "pynvml", "tqdm", "inotify_simple",
                "prometheus_client", "msgspec"}


def log_to_file(path: str) -> None:
    """Append INFO and above to `path` (the daemons' decisions); stderr keeps the -v level."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    for other in root.handlers:
        other.setLevel(max(other.level, root.level))
    root.addHandler(handler)
    root.setLevel(min(root.level, logging.INFO))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slurm-liquid", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"slurm-liquid {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log what it does to stderr (-v: decisions, -vv: every command run)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Parse only up to the subcommand, then hand the rest to the subcommand's own parser,
    # which is built after its module is imported.
    top, rest = parser.parse_known_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(top.verbose, logging.DEBUG)
    logging.basicConfig(level=level,
                        format="slurm-liquid: %(levelname)s: %(message)s", stream=sys.stderr)
    if top.command is None:
        parser.print_help()
        return 2
    # Only the chosen subcommand's module is imported: `slurm-liquid estimate`, which runs inside
    # every sbatch, must not pay for numpy or the simulator.
    module_name, help_text = SUBCOMMANDS[top.command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"slurm-liquid {top.command}: not available in this installation ({exc})", file=sys.stderr)
            return 2
        if exc.name and exc.name.split(".")[0] in SITE_MODULES:   # the light install (progress API only)
            print(f"slurm-liquid {top.command}: needs the site install: pip install 'slurm-liquid[site]=={__version__}' "
                  f"({exc.name} is missing)", file=sys.stderr)
            return 2
        raise
    if getattr(module, "RAW_ARGV", False):  # a wrapper: its arguments belong to another command
        args = argparse.Namespace(argv=rest)
    else:
        sub_parser = argparse.ArgumentParser(prog=f"slurm-liquid {top.command}", description=help_text)
        module.add_arguments(sub_parser)
        prepare = getattr(module, "prepare_argv", None)   # a module may check its own flags' spelling first
        args = sub_parser.parse_args(prepare(sub_parser, rest) if prepare else rest)
    try:
        return int(module.run(args) or 0)
    except LiquidError as exc:
        print(f"slurm-liquid {top.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `slurm-liquid slurm jobs | head`
        sys.stderr.close()
        return 0
