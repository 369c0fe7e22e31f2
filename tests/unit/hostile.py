"""Hostile inputs for the parsers, made from the recorded real ones by a `random.Random`.

The property tests drive these with hypothesis (`st.randoms()`, so failures shrink and replay)
and benchmarks/robustness/fuzz_parsers.py drives them with a seeded Random to count thousands
of inputs. Every generator starts from a real input (a recorded Slurm answer of each version, a
site file, a correction file, a placement state, a topology) and breaks it the ways a careless
user, a newer Slurm or a corrupted file would: wrong types, NaN and infinities, 400-digit
numbers, negative counts, missing keys, far-future and negative times, invalid UTF-8, host lists
that expand to millions of names, JSON nested thousands deep.
"""

from __future__ import annotations

import copy
import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SLURM_VERSIONS = sorted(p.name for p in (FIXTURES / "slurm").iterdir() if (p / "manifest.json").exists())
NODES_FILE = {v: "sinfo.json" if v.startswith("22.") else "scontrol_nodes.json" for v in SLURM_VERSIONS}

# the fields the parsers read: mutations hit these half the time, any other field otherwise
READ_KEYS = frozenset({
    "job_id", "name", "user_name", "user", "job_state", "state", "current", "state_reason", "reason", "partition",
    "nodes", "node_count", "allocation_nodes", "cpus", "CPUs", "tres_alloc_str", "tres_req_str", "tres_per_node",
    "tres_per_job", "allocated", "requested", "count", "type", "comment", "job", "administrator", "system",
    "admin_comment", "priority", "hold", "restart_cnt", "exit_code", "return_code", "submit_time", "start_time",
    "eligible_time", "end_time", "submission", "start", "end", "eligible", "limit", "time_limit", "required_nodes",
    "memory_per_node", "memory_per_cpu", "features", "constraints", "current_working_directory",
    "working_directory", "set", "infinite", "number", "gres", "gres_used", "partitions", "active_features",
    "alloc_cpus", "real_memory", "alloc_memory", "state_flags", "version", "errors", "jobs", "meta", "major",
    "minor", "micro", "description"})


def _scalars() -> list[Any]:
    return [
        None, True, False, 0, 1, -1, -2, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 63, 2 ** 64, 10 ** 400, -(10 ** 400),
        0xFFFFFFFE, 0.5, -0.0, 1e308, -1e308, float("nan"), float("inf"), float("-inf"),
        99999999999999, 253402300800, -99999999999999, 1796209339,
        "", " ", "x", "0", "-5", "1e400", "9" * 400, "9" * 5000, "NaN", "Infinity", "null", "None", "(null)",
        "\udcff", "\ufffd", "\x00", "a\nb", "é" * 50, "x" * 5000,
        "gpu[1-", "gpu[01-99999]", "gpu[1-99999],cpu[1-99999]", "a[1-300]b[1-300]", "[]", "gpu]01[",
        "gres/gpu:" + "9" * 400, "gpu:h100:99999999999(IDX:0-3)", "gres/gpu:-3", "gpu:h100:3(IDX:0-2",
        "cpu=2,mem=" + "9" * 400 + "G,gres/gpu=" + "9" * 40, "cpu=-1,gres/gpu=nan", "gres/gpu=1e999",
        "IDLE+DRAIN", "MIXED", "PENDING", "REQUEUED", "+,+,", "2-", "1:2:3:4", "99999999999-00:00:00",
        [], {}, [None], ["DRAIN", 5, None, []], [[[[[]]]]], {"a": {"b": {"c": []}}},
        {"set": True, "infinite": False, "number": 10 ** 400}, {"set": True, "infinite": False, "number": float("nan")},
        {"set": True, "infinite": False, "number": 99999999999999}, {"set": True, "infinite": False, "number": -7},
        {"set": True, "infinite": False, "number": "x"}, {"set": "yes", "number": []}, {"number": {"number": 1}},
        {"set": False}, {"infinite": True},
    ]


SCALARS = _scalars()


def hostile_value(rng: random.Random) -> Any:
    """One value no parser should trust, sometimes built fresh (deep nesting, long strings)."""
    roll = rng.random()
    if roll < 0.08:
        depth = rng.choice([10, 100, 500, 900])
        value: Any = rng.choice([[], {}, "x", 1])
        for _ in range(depth):
            value = [value] if rng.random() < 0.5 else {"k": value}
        return value
    if roll < 0.14:
        return "".join(rng.choice("aZ09[]-,:+=()/ \t\n\\\"'\udcff\u00e9\u202e") for _ in range(rng.randint(1, 60)))
    if roll < 0.2:
        return rng.choice([rng.randint(-(2 ** 70), 2 ** 70), rng.uniform(-1e20, 1e20), rng.randint(-3, 3)])
    return copy.deepcopy(rng.choice(SCALARS))


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for i, child in enumerate(value[:50]):
            out.extend(_paths(child, (*prefix, i)))
    return out


def _mutate_at(root: Any, path: tuple, rng: random.Random) -> Any:
    """Replace, delete, retype or wrap the value at `path`; returns the (possibly new) root."""
    if not path:
        return hostile_value(rng) if rng.random() < 0.5 else _retype(root, rng)
    parent = root
    for key in path[:-1]:
        try:
            parent = parent[key]
        except (KeyError, IndexError, TypeError):
            return root
    key = path[-1]
    if not isinstance(parent, (dict, list)):
        return root
    try:
        current = parent[key]
    except (KeyError, IndexError, TypeError):
        return root
    roll = rng.random()
    if roll < 0.15 and isinstance(parent, dict):
        del parent[key]
    elif roll < 0.3:
        parent[key] = _retype(current, rng)
    else:
        parent[key] = hostile_value(rng)
    return root


def _retype(value: Any, rng: random.Random) -> Any:
    """The same information in another type: 5 -> "5" / [5] / {"number": 5}, "a" -> ["a"]."""
    return rng.choice([[value], {"number": value}, json.dumps(value, default=str)[:200], str(value)[:200], None])


def _copy(value: Any) -> Any:
    """deepcopy of plain JSON data, several times faster (no memo: JSON has no shared parts)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def mutate_json(doc: Any, rng: random.Random, targets: int | None = None) -> Any:
    """A copy of `doc` with 1-4 mutations, half of them on fields the parsers read."""
    doc = _copy(doc)
    paths = _paths(doc)
    read = [p for p in paths if p and p[-1] in READ_KEYS]
    for _ in range(targets or rng.randint(1, 4)):
        pool = read if read and rng.random() < 0.5 else paths
        doc = _mutate_at(doc, rng.choice(pool), rng)
    return doc


def mutate_entries(doc: dict, key: str, rng: random.Random) -> tuple[dict, set[int]]:
    """`doc` with 1-3 of its `key` entries (jobs or nodes) mutated; returns it and their indexes.

    Only those entries are copied, so a big recorded answer costs little per input.
    """
    doc = dict(doc)
    entries = list(doc.get(key) or [])
    if not entries:
        return doc, set()
    hit = set(rng.sample(range(len(entries)), min(len(entries), rng.randint(1, 3))))
    for i in hit:
        entries[i] = mutate_json(entries[i], rng) if rng.random() < 0.9 else hostile_value(rng)
    doc[key] = entries
    return doc, hit


def mutate_text(text: str, rng: random.Random) -> str:
    """`text` with pieces cut, repeated or replaced by hostile snippets."""
    snippets = ["\udcff", "\x00", "=", "==", "[", "]", "[1-99999]", "-", ",", ":", "\n", "\\\n", "#", " ", "9" * 400,
                "nan", "inf", "-1", "1e999", "SwitchName=", "Nodes=", "Switches=", "LinkSpeed=", "Level=",
                "MaxTime=", "TRES=", "PartitionName=", "(null)", "é", "\u202e"]
    for _ in range(rng.randint(1, 6)):
        at = rng.randint(0, len(text))
        roll = rng.random()
        if roll < 0.3:
            text = text[:at] + text[at + rng.randint(1, 20):]
        elif roll < 0.45:
            text = text[:at] + text[at:at + 40] * rng.randint(2, 50) + text[at:]
        else:
            text = text[:at] + rng.choice(snippets) + text[at:]
    return text


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """`data` with invalid UTF-8, truncation, or nesting deeper than any parser follows."""
    roll = rng.random()
    if roll < 0.15:
        depth = rng.choice([1000, 5000, 100000])
        return b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"jobs": ' + b"[" * depth
    if roll < 0.3:
        return data[:rng.randint(0, len(data))]
    out = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        at = rng.randint(0, len(out))
        out[at:at] = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x00", b"\x80\x80", b"\xfe\xff"])
    return bytes(out)


def dumps(doc: Any) -> str:
    """JSON text as Python writes it (NaN and Infinity included: the reader must cope)."""
    return json.dumps(doc, default=str)


# ---------------------------------------------------------------- the real inputs mutated here

@lru_cache(maxsize=None)
def _slurm_text(version: str, name: str) -> str:
    return (FIXTURES / "slurm" / version / name).read_text()


def slurm_doc(version: str, name: str) -> dict:
    """A recorded Slurm answer (fresh copy of the top level; entries are shared, copy before changing)."""
    return json.loads(_slurm_text(version, name))


def slurm_text(version: str, name: str) -> str:
    return _slurm_text(version, name)


def site_doc() -> dict:
    return {"models": [{"name": "our-net", "family": "cnn", "params": 5e6, "act_bytes": 3e7, "aliases": ["ournet-v1"],
                        "image_size": 224},
                       {"name": "our-lm", "family": "decoder", "params": 1.3e9, "layers": 24, "hidden": 2048,
                        "heads": 16, "ffn": 8192, "vocab": 50257, "seq_len": 2048, "flash": True}],
            "gpus": {"mi100-32gb": {"model": "mi100", "mem_mib": 32752, "aliases": ["mi100"]}},
            "defaults": {"gpu_type": "mi100", "gpus_per_node": 4, "context_mib": 900, "headroom": 0.05,
                         "cpus_per_node": 64, "mem_mib_per_node": 512000, "nodes": 8}}


def correction_doc() -> dict:
    from slurm_liquid.estimate import correction as corr
    from slurm_liquid.estimate.decide import ModelUsage

    tree = corr.Tree((0, 0, 0), (8.5, 0.0, 0.0), (1, -1, -1), (2, -1, -1), (0.0, 0.1, 0.3))
    fitted = corr.Correction(0.05, 0.5, 0.1, (tree, tree), {"method": "gbr", "rows": 40},
                             {"resnet50": ModelUsage(12, 85.0, 20000.0)})
    return json.loads(json.dumps(fitted.to_json()))


def placement_state_doc() -> dict:
    return json.loads((FIXTURES / "topology" / "small_state.json").read_text())


def placement_requests_doc() -> list:
    return json.loads((FIXTURES / "topology" / "small_requests.json").read_text())


def placement_extreme(rng: random.Random) -> tuple[dict, list]:
    """A state and requests that are valid but extreme: empty nodes, a million GPUs, big batches."""
    from slurm_liquid.placement.inputs import MAX_GPUS

    def amount() -> int:
        return rng.choice([0, 1, 2, 3, 4, 7, 8, 16, MAX_GPUS - 1, MAX_GPUS, rng.randint(0, MAX_GPUS)])

    nodes = {}
    for i in range(rng.randint(1, 6)):
        gpus = amount()
        key = rng.choice([f"n{i}", f"r{i}n[1-{rng.randint(1, 64)}]", f"r{i}x[{rng.randint(0, 9)}-{rng.randint(10, 99)}]"])
        nodes[key] = {"gpus": gpus, "gpus_free": rng.randint(0, gpus)}
        if rng.random() < 0.3:
            nodes[key]["gpu_type"] = rng.choice(["h100", "a100", ""])
    requests = []
    for i in range(rng.randint(1, 8)):
        gpus = max(amount(), 1)
        request: dict[str, Any] = {"job": f"j{i}", "gpus": gpus}
        if rng.random() < 0.4:
            request["gpus_per_node"] = rng.choice([d for d in (1, 2, 4, 8, gpus) if gpus % d == 0])
        if rng.random() < 0.2:
            request["gpu_type"] = rng.choice(["h100", "a100", ""])
        requests.append(request)
    return {"nodes": nodes}, requests


def topology_text(rng: random.Random) -> str:
    sources = [(FIXTURES / "topology" / "small.conf").read_text()]
    sources += [_slurm_text(v, "topology.txt") for v in SLURM_VERSIONS]
    return rng.choice(sources)


Generator = Callable[[random.Random], Any]
