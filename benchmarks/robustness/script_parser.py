"""How long the job-spec script parser takes on hostile batch scripts, by size.

    python benchmarks/robustness/script_parser.py

Three shapes: one huge line with an unclosed quote (shlex is quadratic in a line's length), many short
lines with unclosed quotes, many backslash continuations. Before the bound (MAX_LINE_CHARS, linear
joining of continuations) a 1 MB unclosed quote took 36.7 s and 4 MB about 250 s; see results.md."""

from __future__ import annotations

import time

from slurm_liquid.errors import LiquidError
from slurm_liquid.jobspec import parse_script

HEAD = "#!/bin/sh\n#LIQUID model=resnet50\n"
SHAPES = {
    "unclosed quote, one line": lambda n: HEAD + "python train.py --bs 32 '" + "a " * (n // 2),
    "unclosed quotes, short lines": lambda n: HEAD + "python train.py 'x\n" * (n // 20),
    "backslash continuations": lambda n: HEAD + "python train.py 'x \\\n" * (n // 20),
}


def main() -> None:
    print(f"{'shape':32s} {'MiB':>5s} {'seconds':>8s}")
    for name, make in SHAPES.items():
        for mib in (0.25, 1, 4):
            text = make(int(mib * (1 << 20)))
            started = time.perf_counter()
            try:
                parse_script(text)
            except LiquidError:
                pass
            print(f"{name:32s} {mib:5g} {time.perf_counter() - started:8.2f}")


if __name__ == "__main__":
    main()
