"""Hostile inputs for every parser of Slurm's answers and of the files users and admins give us.

    python benchmarks/robustness/fuzz_parsers.py --count 5000      # 5,000 inputs per case

`CASES` is a list of (name, callable): each callable makes one hostile input from the Random it
is given (tests/unit/hostile.py mutates the recorded real inputs) and feeds it to one parser.
It returns "ok" when the parser answers and "error" when it refuses with a clear project error
(`LiquidError`: SlurmError, UsageError); any other exception propagates and is a traceback.
benchmarks/robustness/fuzz.py runs these beside the codec, daemon and agent cases.

The Slurm cases go through the client (`CliBackend`) over a runner that answers the command
with the hostile text, so the JSON reader, the version check and 22.05's exit-code text are in
the path; a third of those inputs are bytes (invalid UTF-8, truncated, nested 100,000 deep)
decoded as the real runner decodes them.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from slurm_liquid.errors import LiquidError  # noqa: E402
from slurm_liquid.slurm import CliBackend, SlurmVersion  # noqa: E402
from slurm_liquid.slurm import parse  # noqa: E402
from slurm_liquid.slurm.runner import decode  # noqa: E402
from tests.unit import hostile  # noqa: E402

_TMP = tempfile.TemporaryDirectory(prefix="liquid-fuzz-")


class _Answer:
    """A runner that answers `command` (the first words of argv) with `text`, and the recorded
    answer of `version` to everything else the client asks on the way."""

    def __init__(self, version: str, command: tuple[str, ...], text: str):
        self.version, self.command, self.text = version, command, text

    def __call__(self, argv: Sequence[str], *, timeout: float, stdin: str | None = None) -> str:
        if tuple(argv[:len(self.command)]) == self.command:
            return self.text
        if tuple(argv[:2]) == ("scontrol", "--version"):
            return hostile.slurm_text(self.version, "version.txt")
        if tuple(argv[:2]) == ("sacct", "--noheader"):
            return hostile.slurm_text(self.version, "sacct_exit_codes.txt")
        raise AssertionError(f"unexpected command {argv}")


def _hostile_json(version: str, name: str, key: str, rng: random.Random) -> str:
    """A recorded answer with some entries broken (most inputs), the whole document broken, or its bytes."""
    roll = rng.random()
    if roll < 0.55:
        doc, _ = hostile.mutate_entries(hostile.slurm_doc(version, name), key, rng)
        return hostile.dumps(doc)
    if roll < 0.7:
        return hostile.dumps(hostile.mutate_json(hostile.slurm_doc(version, name), rng))
    return decode(hostile.mutate_bytes(hostile.slurm_text(version, name).encode(), rng))


def _outcome(read: Callable[..., Any], *args: Any) -> str:
    try:
        read(*args)
    except LiquidError:
        return "error"
    return "ok"


def _client_case(version: str, what: str) -> Callable[[random.Random], str]:
    name, key, command, read = {
        "squeue": ("squeue.json", "jobs", ("squeue", "--json"), lambda c: c.jobs()),
        "sacct": ("sacct.json", "jobs", ("sacct", "--json"), lambda c: c.accounting()),
        "nodes": (hostile.NODES_FILE[version], "nodes",
                  ("sinfo", "--json") if version.startswith("22.") else ("scontrol", "show", "nodes"),
                  lambda c: c.nodes()),
    }[what]

    def case(rng: random.Random) -> None:
        client = CliBackend(_Answer(version, command, _hostile_json(version, name, key, rng)))
        return _outcome(read, client)

    return case


def _text_case(sources: Callable[[random.Random], str], read: Callable[[str], Any]) -> Callable[[random.Random], str]:
    def case(rng: random.Random) -> None:
        text = sources(rng)
        text = hostile.mutate_text(text, rng) if rng.random() < 0.8 else decode(hostile.mutate_bytes(text.encode(), rng))
        return _outcome(read, text)

    return case


def _partitions(text: str) -> None:
    version = hostile.SLURM_VERSIONS[0]
    CliBackend(_Answer(version, ("scontrol", "show", "partition"), text)).partitions()


def _topology(text: str) -> None:
    from slurm_liquid.topology import Topology

    Topology.from_scontrol(text)
    Topology.from_topology_conf(text)


def _file_bytes(base: Any, rng: random.Random) -> bytes:
    """A JSON file made from `base`: mutated (most), or bytes that are not JSON / not UTF-8."""
    roll = rng.random()
    if roll < 0.1:
        return hostile.dumps(hostile.hostile_value(rng)).encode("utf-8", "surrogateescape")
    changes = 1 if rng.random() < 0.5 else None  # one change, or 1-4: small files break at the first
    text = hostile.dumps(hostile.mutate_json(base, rng, changes)).encode("utf-8", "surrogateescape")
    return hostile.mutate_bytes(text, rng) if roll > 0.8 else text


def _write(name: str, data: bytes) -> str:
    path = Path(_TMP.name) / name
    path.write_bytes(data)
    return str(path)


def _site(rng: random.Random) -> str:
    from slurm_liquid.estimate import api
    from slurm_liquid.estimate.api import estimate
    from slurm_liquid.estimate.catalog import load_catalog
    from slurm_liquid.estimate.gpus import load_gpu_table
    from slurm_liquid.jobspec import JobSpec

    for cached in (load_catalog, load_gpu_table):
        cached.cache_clear()  # estimate() reads the site through the caches

    def read(path: str) -> None:
        # uncached: the same path holds a new file each time
        catalog, table = load_catalog.__wrapped__(path), load_gpu_table.__wrapped__(path)
        table.lookup(table.default)
        for name in ("our-net", "our-lm", "resnet50"):
            try:  # what the daemon and sbatch do with a site file: estimate a job of a model in it
                estimate(JobSpec.from_values({"model": name, "batch-size": "32"}), site=path, correction="none")
            except LiquidError:
                pass
        for name in catalog.names():
            catalog.lookup(name)

    return _outcome(read, _write("site.json", _file_bytes(hostile.site_doc(), rng)))


def _correction(rng: random.Random) -> str:
    from slurm_liquid.estimate import correction

    def read(path: str) -> None:
        correction.load(path).log_ratio([rng.uniform(-5, 10) for _ in correction.FEATURES])

    return _outcome(read, _write("correction.json", _file_bytes(hostile.correction_doc(), rng)))


def _placement(rng: random.Random) -> str:
    from slurm_liquid.placement.factory import make_placer
    from slurm_liquid.placement.inputs import load_requests, load_state
    from slurm_liquid.topology import Topology

    def read(state_path: str, requests_path: str) -> None:
        state = load_state(state_path)
        requests = load_requests(requests_path)
        placer = rng.choice(["liquid", "slurm", "first-fit", "random"])
        make_placer(placer, Topology.flat(sorted(state.nodes))).place_all(requests, state)

    if rng.random() < 0.3:  # valid but extreme: the placers must answer
        state, requests = (hostile.dumps(doc).encode() for doc in hostile.placement_extreme(rng))
    else:
        state = _file_bytes(hostile.placement_state_doc(), rng)
        requests = _file_bytes(hostile.placement_requests_doc(), rng)
    return _outcome(read, _write("state.json", state), _write("requests.json", requests))


CASES: list[tuple[str, Callable[[random.Random], object]]] = [
    *((f"{what}-{version}", _client_case(version, what))
      for version in hostile.SLURM_VERSIONS for what in ("squeue", "sacct", "nodes")),
    ("partitions-text", _text_case(lambda rng: hostile.slurm_text(rng.choice(hostile.SLURM_VERSIONS), "partitions.txt"),
                                   _partitions)),
    ("topology-text", _text_case(hostile.topology_text, _topology)),
    ("sacct-exit-code-text", _text_case(lambda rng: hostile.slurm_text("22.05", "sacct_exit_codes.txt")
                                        if "22.05" in hostile.SLURM_VERSIONS else "1|0:0\n2|3:0\n",
                                        parse.exit_codes_from_sacct_text)),
    ("version-text", _text_case(lambda rng: hostile.slurm_text(rng.choice(hostile.SLURM_VERSIONS), "version.txt"),
                                SlurmVersion.parse)),
    ("site-file", _site),
    ("correction-file", _correction),
    ("placement-input", _placement),
]


def run(count: int, seed: int = 0, only: str | None = None) -> list[dict[str, Any]]:
    """Feed `count` inputs to each case; per case how many were answered, refused with a clear
    error and ended in a traceback (and the first traceback)."""
    rows = []
    for name, case in CASES:
        if only and only not in name:
            continue
        rng, first, started = random.Random(f"{seed}:{name}"), "", time.perf_counter()
        outcomes = {"ok": 0, "error": 0, "traceback": 0}
        for _ in range(count):
            try:
                outcomes[str(case(rng))] += 1
            except Exception:  # a traceback: what this benchmark counts
                outcomes["traceback"] += 1
                first = first or traceback.format_exc()
        rows.append({"case": name, "inputs": count, "tracebacks": outcomes["traceback"], "answered": outcomes["ok"],
                     "clear_errors": outcomes["error"], "first": first, "seconds": time.perf_counter() - started})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="inputs per case (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--case", help="only the cases whose name contains this")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # skipped entries log warnings by the thousand
    rows = run(args.count, args.seed, args.case)
    for row in rows:
        print(f"{row['case']:22s} {row['inputs']:7d} inputs: {row['answered']:6d} answered, "
              f"{row['clear_errors']:6d} clear errors, {row['tracebacks']:5d} tracebacks  {row['seconds']:6.1f} s")
    total, failed = sum(r["inputs"] for r in rows), sum(r["tracebacks"] for r in rows)
    print(f"{len(rows)} cases, {total} inputs, {failed} tracebacks")
    for row in rows:
        if row["first"]:
            print(f"\n--- first traceback of {row['case']}:\n{row['first']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
