"""`python -m slurm_liquid.estimate ...`: the same as `slurm-liquid estimate ...`."""

from __future__ import annotations

import sys

from slurm_liquid.cli import main as dispatch


def main(argv: list[str] | None = None) -> int:
    return dispatch(["estimate", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
