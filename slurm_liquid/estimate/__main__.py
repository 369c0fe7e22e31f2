"""`python -m slurm_liquid.estimate ...`: the estimate command without the top-level dispatcher, for
the submit-time helper (cli_filter), so that it never imports the other subcommands' packages."""

from __future__ import annotations

import argparse
import os
import sys

from slurm_liquid.errors import LiquidError
from slurm_liquid.estimate import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slurm-liquid estimate", description=cli.__doc__.splitlines()[0])
    cli.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return int(cli.run(args) or 0)
    except LiquidError as exc:
        print(f"slurm-liquid estimate: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say
        sys.stdout = open(os.devnull, "w")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
