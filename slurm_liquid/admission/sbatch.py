"""`slurm-liquid sbatch [--liquid-KEY VALUE ...] [sbatch arguments] script.sh`

A thin wrapper: every `--liquid-KEY VALUE` (or `--liquid-KEY=VALUE`) becomes `KEY=VALUE` in a
`--comment="liquid: ..."`, the job-spec vocabulary of `#LIQUID` lines; every other argument goes to
sbatch untouched, in order. A `--comment` of the user's own rides along after ` || ` (the record
keeps it verbatim); a `liquid:` one is merged with the flags. The spec is checked here first, so a typo fails before anything is
submitted; cli_filter.lua and the daemon then read the comment like any other job's.
"""

from __future__ import annotations

import os
import shutil
from typing import Sequence

from slurm_liquid.errors import UsageError
from slurm_liquid.jobspec import JobSpec, KEYS, canonical_key, parse_comment
from slurm_liquid.ledger import comment_spec
from slurm_liquid.ledger.optin import USER_SEP

RAW_ARGV = True   # the dispatcher hands over the arguments unparsed: they are mostly sbatch's
PREFIX = "--liquid-"
# sbatch options that take no separate value (everything else does, as in sbatch's getopt table);
# options with an optional value take it only as --opt=value.
_SHORT_FLAGS = set("hHIkOQsvVW")
_LONG_FLAGS = {"contiguous", "exclusive", "get-user-env", "help", "hold", "ignore-pbs", "no-kill", "nice",
               "no-requeue", "overcommit", "oversubscribe", "parsable", "propagate", "quiet", "reboot", "requeue",
               "spread-job", "test-only", "usage", "use-min-nodes", "verbose", "version", "wait", "exact"}


def _takes_value(option: str) -> bool:
    if option.startswith("--"):
        return "=" not in option and option[2:] not in _LONG_FLAGS
    return len(option) == 2 and option[1] not in _SHORT_FLAGS


def sbatch_argv(argv: Sequence[str]) -> list[str]:
    """The sbatch command line for the wrapper's arguments (raises UsageError on a bad spec).

    Like sbatch, it reads options up to the script; the script's own arguments pass untouched.
    """
    passed: list[str] = []
    values: dict[str, str] = {}
    comment: str | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--" or not arg.startswith("-") or arg == "-":
            passed += args[i - 1:]   # the script (or --) and everything after it
            break
        if arg.startswith(PREFIX):
            name, sep, value = arg[len(PREFIX):].partition("=")
            key = canonical_key(name, source=f"{PREFIX}{name}")
            if not sep:
                nxt = args[i] if i < len(args) else None
                if KEYS[key].is_flag and (nxt is None or nxt.startswith("-") or not _is_bool(nxt)):
                    value = "true"
                elif nxt is not None:
                    value, i = nxt, i + 1
                else:
                    raise UsageError(f"{PREFIX}{name}: needs a value")
            values[key] = value
        elif arg == "--comment" and i < len(args):
            comment, i = args[i], i + 1
        elif arg.startswith("--comment="):
            comment = arg.partition("=")[2]
        else:
            passed.append(arg)
            if _takes_value(arg) and i < len(args):
                passed.append(args[i])
                i += 1
    if not values:
        return ["sbatch", *passed] if comment is None else ["sbatch", f"--comment={comment}", *passed]
    spec = JobSpec.from_values(values, source="--liquid flags")   # main() names the command
    text = spec.to_directive().removeprefix("#LIQUID ")
    user = ""
    if comment is not None:
        said = comment_spec(comment)
        if said is None:               # the user's own text: kept after the spec, as records keep it
            user = comment.strip()
        else:
            text = (said + " " + text).strip()
            user = comment.partition(USER_SEP)[2].strip()
            parse_comment(f"liquid: {text}")   # the merged spec must hold together too (conflicts, bad values)
    return ["sbatch", f"--comment=liquid: {text}" + (f"{USER_SEP}{user}" if user else ""), *passed]


def _is_bool(text: str) -> bool:
    try:
        KEYS["checkpointing"].parse(text)
    except ValueError:
        return False
    return True


def add_arguments(parser) -> None:  # the arguments are sbatch's: see RAW_ARGV
    pass


def run(args) -> int:
    argv = sbatch_argv(args.argv)
    if argv[1:] and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if shutil.which("sbatch") is None:
        raise UsageError("sbatch is not on PATH")
    os.execvp("sbatch", argv)  # replaces this process: sbatch's output and exit code are the user's
    return 0  # pragma: no cover
