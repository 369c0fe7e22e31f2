"""Replay of Slurm outputs recorded from real clusters (tests/fixtures/slurm/<version>/)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "manifest.json").exists())


class RecordedRunner:
    """Answers Slurm commands from a directory of recorded outputs and remembers what was run."""

    OUTPUTS = {
        ("scontrol", "--version"): "version.txt",
        ("squeue", "--json"): "squeue.json",
        ("sacct", "--json"): "sacct.json",
        ("sacct", "--noheader"): "sacct_exit_codes.txt",
        ("scontrol", "show", "nodes", "--json"): "scontrol_nodes.json",
        ("sinfo", "--json"): "sinfo.json",
        ("scontrol", "show", "partition"): "partitions.txt",
        ("scontrol", "show", "topology"): "topology.txt",
    }

    def __init__(self, version: str):
        self.dir = FIXTURES / version
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float, stdin: str | None = None) -> str:
        self.calls.append(list(argv))
        for prefix, name in self.OUTPUTS.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return (self.dir / name).read_text()
        if argv[0] == "sbatch":
            return "42;liquid\n"
        return ""
