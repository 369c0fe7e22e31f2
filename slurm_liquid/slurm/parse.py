"""The one place that reads Slurm's JSON, for every version we ship.

Slurm 22.05 speaks openapi v0.0.38 (plain numbers, states as strings, `gres:gpu:2`),
24.11 speaks data_parser v0.0.42 (numbers as `{set, infinite, number}`, states as lists,
comments in sacct as `{job, administrator, system}`, `gres/gpu:2`), and 26.05 data_parser
v0.0.45, of the same family. Each helper below accepts every shape it has been seen in,
and the recorded outputs in tests/fixtures/slurm/ pin that down.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Mapping

import hostlist

from slurm_liquid.slurm.errors import SlurmError
from slurm_liquid.slurm.models import FINISHED_STATES, Job, Node, Partition, SlurmVersion

BASE_JOB_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})
BASE_NODE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


# ---------------------------------------------------------------- scalars

def num(value: Any) -> int | float | None:
    """A number from either a plain value or `{set, infinite, number}`; None when unset or infinite."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return int(str(value))
    except ValueError:
        return None


def integer(value: Any, default: int = 0) -> int:
    n = num(value)
    return default if n is None else int(n)


def timestamp(value: Any) -> datetime | None:
    n = num(value)
    return datetime.fromtimestamp(n, tz=timezone.utc) if n else None


def states(value: Any, base: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """(base state, other flags) from `"IDLE+DRAIN"`, `"PENDING"` or `["MIXED", "DRAIN"]`."""
    if isinstance(value, str):
        items = re.split(r"[+,]", value)
    else:
        items = list(value or [])
    items = [str(i).strip().upper() for i in items if str(i).strip()]
    main = next((s for s in items if s in base), items[0] if items else "UNKNOWN")
    return main, tuple(s for s in items if s != main)


def job_states(value: Any) -> tuple[str, tuple[str, ...]]:
    """Job state and flags; a bare REQUEUED (22.05 sacct) is a pending job that was requeued, as 24.11 says."""
    state, flags = states(value, BASE_JOB_STATES)
    if state == "REQUEUED":
        return "PENDING", ("REQUEUED", *flags)
    return state, flags


def text(value: Any) -> str:
    return "" if value is None else str(value)


def expand_nodes(expr: Any) -> tuple[str, ...]:
    """`gpu[01-02],cpu1` -> ('gpu01', 'gpu02', 'cpu1'); lists pass through; '(null)'/'None' -> ()."""
    if isinstance(expr, (list, tuple)):
        return tuple(str(n) for n in expr)
    expr = text(expr).strip()
    if not expr or expr in {"(null)", "None", "N/A", "None assigned"}:
        return ()
    return tuple(hostlist.expand_hostlist(expr))


# ---------------------------------------------------------------- GRES and TRES

def split_gres(spec: str) -> list[str]:
    """Split a GRES list on commas outside parentheses: 'gpu:h100:3(IDX:0-2),shard:0(0/4,0/4)'."""
    parts, depth, current = [], 0, []
    for ch in spec:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip() and p.strip() not in {"(null)", "N/A"}]


def parse_gres(spec: Any) -> list[tuple[str, str | None, int]]:
    """[(name, type, count)] from 'gpu:h100:4(S:0),shard:16', 'gres/gpu:2' (24.11) or 'gres:gpu:2' (22.05)."""
    out = []
    for item in split_gres(text(spec)):
        item = re.sub(r"\(.*\)$", "", item)
        item = re.sub(r"^gres[/:]", "", item)
        fields = item.split(":")
        count = 1
        if len(fields) > 1 and re.fullmatch(r"\d+", fields[-1]):
            count = int(fields.pop())
        name = fields[0]
        gtype = fields[1] if len(fields) > 1 else None
        out.append((name, gtype, count))
    return out


def gres_count(spec: Any, name: str = "gpu") -> tuple[int, str | None]:
    """Total count of one GRES in a spec, and its type when the spec names one."""
    total, gtype = 0, None
    for gname, t, count in parse_gres(spec):
        if gname == name:
            total += count
            gtype = gtype or t
    return total, gtype


def parse_tres(value: Any) -> dict[str, float]:
    """TRES as {'cpu': 2, 'mem': MiB, 'node': 1, 'gres/gpu': 2, 'gres/gpu:h100': 2}.

    Accepts the string form ('cpu=2,mem=2G,gres/gpu=3') and the list form of sacct
    ([{'type': 'gres', 'name': 'gpu', 'count': 2}, ...]).
    """
    out: dict[str, float] = {}
    if isinstance(value, list):
        for item in value:
            key = item.get("type", "") + (f"/{item['name']}" if item.get("name") else "")
            count = num(item.get("count"))
            if count is not None and count >= 0:
                out[key] = float(count)
        return out
    for item in text(value).split(","):
        if "=" not in item:
            continue
        key, raw = item.split("=", 1)
        match = re.fullmatch(r"([\d.]+)([KMGT]?)", raw.strip())
        if not match:
            continue
        amount = float(match.group(1))
        if key == "mem":
            amount *= _MEM_UNITS.get(match.group(2) or "M", 1)
        out[key.strip()] = amount
    return out


def tres_gpus(tres: Mapping[str, float]) -> int:
    """GPUs in a TRES map: the untyped 'gres/gpu' total, else the sum of typed ones."""
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    return int(sum(v for k, v in tres.items() if k.startswith("gres/gpu:")))


# ---------------------------------------------------------------- documents

def check_document(doc: Mapping[str, Any], command: str) -> None:
    """Raise SlurmError when a JSON reply carries errors (22.05's "Nothing found" is an empty answer)."""
    errors = [e for e in doc.get("errors") or []
              if not (isinstance(e, Mapping) and e.get("description") == "Nothing found")]
    if errors:
        messages = "; ".join(text(e.get("description") or e.get("error") or e) if isinstance(e, Mapping) else text(e)
                             for e in errors)
        raise SlurmError(f"{command} reported: {messages}")


def document_version(doc: Mapping[str, Any]) -> SlurmVersion | None:
    """The Slurm version in a reply's `meta` (24.11: meta.slurm.version, 22.05: meta.Slurm.version)."""
    meta = doc.get("meta") or {}
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    version = slurm.get("version") or {}
    try:
        return SlurmVersion(int(version["major"]), int(version["minor"]), int(version.get("micro", 0)))
    except (KeyError, TypeError, ValueError):
        return None


def _comments(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    comment = raw.get("comment")
    if isinstance(comment, Mapping):  # sacct, data_parser v0.0.40+
        return text(comment.get("job")), text(comment.get("administrator")), text(comment.get("system"))
    return text(comment), text(raw.get("admin_comment")), text(raw.get("system_comment"))


def _exit_code(value: Any) -> int | None:
    if isinstance(value, Mapping):
        return num(value.get("return_code"))
    status = num(value)  # 22.05 squeue: the raw wait status (exit 3 -> 768)
    if status is None:
        return None
    status = int(status)
    return status >> 8 if status & 0x7F == 0 else 128 + (status & 0x7F)


def exit_codes_from_sacct_text(text_out: str) -> dict[int, int]:
    """{job id: exit code} from `sacct --parsable2 --noheader -X -o JobIDRaw,ExitCode` ('3:0').

    Slurm 22.05's `sacct --json` reports exit code 0 for every job (seen on 22.05.8: a FAILED
    job with `ExitCode=3:0` in text shows `return_code: 0`), so the client reads it from text there.
    """
    codes = {}
    for line in text_out.splitlines():
        job_id, _, code = line.partition("|")
        exit_part, _, signal_part = code.partition(":")
        if job_id.isdigit() and exit_part.isdigit():
            signal = int(signal_part) if signal_part.isdigit() else 0
            codes[int(job_id)] = 128 + signal if signal else int(exit_part)
    return codes


def job_from_squeue(raw: Mapping[str, Any]) -> Job:
    state, flags = job_states(raw.get("job_state"))
    comment, admin_comment, system_comment = _comments(raw)
    alloc = parse_tres(raw.get("tres_alloc_str"))
    req = parse_tres(raw.get("tres_req_str"))
    per_node, node_type = gres_count(raw.get("tres_per_node"))
    per_job, job_type = gres_count(raw.get("tres_per_job"))
    num_nodes = integer(raw.get("node_count"))
    gpus = tres_gpus(alloc) or tres_gpus(req) or per_job or per_node * max(num_nodes, 1)
    priority = num(raw.get("priority"))
    mem = alloc.get("mem") or req.get("mem")
    limit_min = num(raw.get("time_limit"))
    return Job(
        job_id=integer(raw.get("job_id")), name=text(raw.get("name")), user=text(raw.get("user_name")),
        state=state, state_flags=flags, reason=text(raw.get("state_reason")), partition=text(raw.get("partition")),
        nodes=expand_nodes(raw.get("nodes")), num_nodes=num_nodes,
        cpus=integer(raw.get("cpus")), mem_mib=int(mem) if mem else None,
        gpus=gpus, gpus_per_node=per_node or None, gpu_type=node_type or job_type,
        shards=int(alloc.get("gres/shard") or req.get("gres/shard") or 0),
        comment=comment, admin_comment=admin_comment, system_comment=system_comment,
        priority=None if priority is None else int(priority),
        held=bool(raw.get("hold")) or (state == "PENDING" and priority == 0),
        restarts=integer(raw.get("restart_cnt")),
        exit_code=_exit_code(raw.get("exit_code")) if state in FINISHED_STATES else None,
        submit_time=timestamp(raw.get("submit_time")), start_time=timestamp(raw.get("start_time")),
        eligible_time=timestamp(raw.get("eligible_time")), required_nodes=expand_nodes(raw.get("required_nodes")),
        # squeue reports the expected end (start + time limit) for running jobs: keep only real ends.
        end_time=timestamp(raw.get("end_time")) if state in FINISHED_STATES else None,
        time_limit_s=None if limit_min is None else int(limit_min) * 60,
        work_dir=text(raw.get("current_working_directory")), source="squeue")


def job_from_sacct(raw: Mapping[str, Any]) -> Job:
    state_block = raw.get("state") or {}
    state, flags = job_states(state_block.get("current"))
    comment, admin_comment, system_comment = _comments(raw)
    tres = raw.get("tres") or {}
    alloc, req = parse_tres(tres.get("allocated")), parse_tres(tres.get("requested"))
    times = raw.get("time") or {}
    limit_min = num(times.get("limit"))
    required = raw.get("required") or {}
    user = raw.get("user")
    priority = num(raw.get("priority"))
    mem = alloc.get("mem") or req.get("mem")
    return Job(
        job_id=integer(raw.get("job_id")), name=text(raw.get("name")),
        user=text(user.get("name") if isinstance(user, Mapping) else user),
        state=state, state_flags=flags, reason=text(state_block.get("reason")), partition=text(raw.get("partition")),
        nodes=expand_nodes(raw.get("nodes")), num_nodes=integer(raw.get("allocation_nodes")),
        cpus=int(alloc.get("cpu") or req.get("cpu") or integer(required.get("CPUs"))),
        mem_mib=int(mem) if mem else None,
        gpus=tres_gpus(alloc) or tres_gpus(req), shards=int(alloc.get("gres/shard") or req.get("gres/shard") or 0),
        comment=comment, admin_comment=admin_comment, system_comment=system_comment,
        priority=None if priority is None else int(priority),
        held=bool(raw.get("hold")) or (state == "PENDING" and priority == 0),
        restarts=integer(raw.get("restart_cnt")),
        exit_code=_exit_code(raw.get("exit_code")) if state in FINISHED_STATES else None,
        submit_time=timestamp(times.get("submission")), start_time=timestamp(times.get("start")),
        end_time=timestamp(times.get("end")),
        time_limit_s=None if limit_min is None else int(limit_min) * 60,
        work_dir=text(raw.get("working_directory")), source="sacct")


def node_from_json(raw: Mapping[str, Any]) -> Node:
    """A node from `scontrol show nodes --json` (23.02+) or `sinfo --json` (22.05)."""
    state_value = raw.get("state")
    if isinstance(state_value, str) and raw.get("state_flags"):
        state_value = [state_value, *raw["state_flags"]]
    state, flags = states(state_value, BASE_NODE_STATES)
    gpus, gpu_type = gres_count(raw.get("gres"))
    gpus_alloc, _ = gres_count(raw.get("gres_used"))
    shards, _ = gres_count(raw.get("gres"), "shard")
    shards_alloc, _ = gres_count(raw.get("gres_used"), "shard")
    partitions = raw.get("partitions") or []
    return Node(
        name=text(raw.get("name")), state=state, state_flags=flags,
        partitions=tuple(partitions if isinstance(partitions, list) else text(partitions).split(",")),
        cpus=integer(raw.get("cpus")), cpus_alloc=integer(raw.get("alloc_cpus")),
        mem_mib=integer(raw.get("real_memory")), mem_alloc_mib=integer(raw.get("alloc_memory")),
        gpus=gpus, gpus_alloc=gpus_alloc, gpu_type=gpu_type, shards=shards, shards_alloc=shards_alloc,
        reason=text(raw.get("reason")), version=text(raw.get("version")))


def key_values(line: str) -> dict[str, str]:
    """`scontrol ... --oneliner` output as a dict; a value may itself hold '=' (TRES=cpu=32,...)."""
    pairs = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            pairs[key] = value
    return pairs


def partition_from_oneliner(line: str) -> Partition:
    """A partition from `scontrol show partition --oneliner` (the same text in every version)."""
    kv = key_values(line)
    max_time = kv.get("MaxTime", "UNLIMITED")
    return Partition(
        name=kv.get("PartitionName", ""), nodes=expand_nodes(kv.get("Nodes")), state=kv.get("State", "UP"),
        is_default=kv.get("Default") == "YES", max_time_s=_duration_s(max_time),
        total_gpus=tres_gpus(parse_tres(kv.get("TRES"))))


def _duration_s(value: str) -> int | None:
    """Slurm durations: 'UNLIMITED', 'MM', 'HH:MM:SS', 'D-HH:MM:SS' -> seconds."""
    if not value or value.upper() in {"UNLIMITED", "INFINITE", "NONE"}:
        return None
    days, _, clock = value.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if len(parts) == 1:
        seconds = parts[0] * 60
    else:
        while len(parts) < 3:
            parts.insert(0, 0)
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return seconds + int(days or 0) * 86400


def jobs_from_document(doc: Mapping[str, Any], command: str) -> list[Job]:
    if not command.startswith("sacct"):
        check_document(doc, command)
        return [job_from_squeue(raw) for raw in doc.get("jobs") or []]
    return latest_runs(runs_from_document(doc, command))


def runs_from_document(doc: Mapping[str, Any], command: str = "sacct") -> list[Job]:
    """Every run `sacct --json` recorded, a requeued job's earlier runs included, oldest first."""
    check_document(doc, command)
    # When a step's record reaches slurmdbd before its job's, slurmdbd stores a placeholder
    # (name "allocation", no partition, partial nodes) and fills it in later; seen on 22.05 under
    # load. Every real job has a partition, so a record without one is not reported yet.
    return [job for job in map(job_from_sacct, doc.get("jobs") or []) if job.partition]


def latest_runs(jobs: list[Job]) -> list[Job]:
    """One record per job id, its latest run, as plain `sacct` shows it (not `sacct -D`).

    slurmdbd keeps a record per run of a requeued job, oldest first (the earlier ones in state
    REQUEUED); the runs before the last one become its restart count, which sacct does not report.
    """
    runs: dict[int, list[Job]] = {}
    for job in jobs:
        runs.setdefault(job.job_id, []).append(job)
    return [replace(records[-1], restarts=max(records[-1].restarts, len(records) - 1)) if len(records) > 1
            else records[-1] for records in runs.values()]


def nodes_from_document(doc: Mapping[str, Any], command: str) -> list[Node]:
    check_document(doc, command)
    return [node_from_json(raw) for raw in doc.get("nodes") or []]


# ---------------------------------------------------------------- GRES device indices per node

MAX_DEVICE_INDEX = 1023     # a node's GRES device index (a GPU's minor number); more is not a real node


def gres_detail_from_squeue(raw: Mapping[str, Any]) -> dict[str, str]:
    """{node: its GRES with device indices} of one `squeue --json` job, e.g. {'gpu01': 'gpu:h100:2(IDX:0-1)'}.

    `gres_detail` holds one string per allocated node, in the order of the job's allocated nodes
    (job_resources: `allocated_nodes[].nodename` on 22.05, `nodes.allocation[].name` from 23.02 on);
    it is what `scontrol show job -d` prints as each node's `GRES=`, but JSON-escaped, so no text a
    user chose (job name, working directory) can pass for it. {} when it cannot be paired with nodes.
    """
    details = raw.get("gres_detail")
    if not isinstance(details, list) or not details:
        return {}
    resources = raw.get("job_resources")
    names: list[Any] = []
    if isinstance(resources, Mapping):
        nodes = resources.get("nodes")
        if isinstance(nodes, Mapping) and isinstance(nodes.get("allocation"), list):
            names = [n.get("name") if isinstance(n, Mapping) else None for n in nodes["allocation"]]
        elif isinstance(resources.get("allocated_nodes"), list):
            names = [n.get("nodename") if isinstance(n, Mapping) else None for n in resources["allocated_nodes"]]
    if not names:
        try:
            names = list(expand_nodes(raw.get("nodes")))
        except hostlist.BadHostlist:
            raise SlurmError(f"squeue: job {raw.get('job_id')!r} has an unreadable node list") from None
    if len(names) != len(details) or not all(isinstance(n, str) and n for n in names) \
            or not all(isinstance(d, str) for d in details):
        return {}
    return dict(zip(names, details))


def gres_details_from_document(doc: Mapping[str, Any], command: str = "squeue") -> dict[int, dict[str, str]]:
    """{job id: {node: GRES detail}} for every job of a `squeue --json` reply that holds GRES."""
    if not isinstance(doc.get("errors") or [], list):
        raise SlurmError(f"{command} printed errors that are not a list")
    check_document(doc, command)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmError(f"{command} printed no job list")
    out: dict[int, dict[str, str]] = {}
    for raw in jobs:
        if not isinstance(raw, Mapping):
            raise SlurmError(f"{command} printed a job that is not an object")
        job_id = num(raw.get("job_id"))
        if not isinstance(job_id, int) or not 0 < job_id < 2 ** 32:
            raise SlurmError(f"{command} printed a job without a valid id: {raw.get('job_id')!r}")
        detail = gres_detail_from_squeue(raw)
        if detail:
            out[job_id] = detail
    return out


def gres_indices(detail: str, name: str = "gpu") -> tuple[tuple[int, ...], int]:
    """(device indices, count) of one GRES in a node's detail, over all its types:
    'gpu:h100:2(IDX:0-1)' -> ((0, 1), 2); 'shard:4(IDX:0)' (22.05) and 'shard:4(4/4,0/4,0/4,0/4)'
    (23.02+: allocated/total per device) -> ((0,), 4); 'gpu:1(IDX:N/A)' -> ((), 1)."""
    if not isinstance(detail, str):
        raise SlurmError(f"GRES detail {detail!r} is not text")
    indices: set[int] = set()
    total = 0
    for item in split_gres(detail):
        match = re.fullmatch(r"([^:()]+)((?::[^:()]*)*?)(?::(\d{1,9}))?(?:\((.*)\))?", item)
        if match is None:
            raise SlurmError(f"unreadable GRES detail {item!r}")
        gname, count, inside = match[1], match[3], match[4] or ""
        if gname.removeprefix("gres/") != name:
            continue
        found = _device_indices(inside, item)
        total += int(count) if count else max(len(found), 1)     # 'gpu(IDX:4-7)' names no count
        indices.update(found)
    return tuple(sorted(indices)), total


def _device_indices(inside: str, item: str) -> set[int]:
    """Device indices of `IDX:0-1,3` or of a per-device `4/4,0/4` list (the devices with a share)."""
    if inside.startswith("IDX:"):
        ranges = inside[4:]
        if ranges in ("", "N/A"):
            return set()
        found: set[int] = set()
        for part in ranges.split(","):
            low, sep, high = part.partition("-")
            if not low.isdigit() or (sep and not high.isdigit()) or len(low) > 9 or len(high) > 9:
                raise SlurmError(f"unreadable device indices in GRES detail {item!r}")
            first, last = int(low), int(high) if sep else int(low)
            if first > last or last > MAX_DEVICE_INDEX:
                raise SlurmError(f"device indices out of range in GRES detail {item!r}")
            found.update(range(first, last + 1))
        return found
    if re.fullmatch(r"\d{1,9}/\d{1,9}(?:,\d{1,9}/\d{1,9})*", inside):
        shares = [int(p.split("/")[0]) for p in inside.split(",")]
        if len(shares) > MAX_DEVICE_INDEX + 1:
            raise SlurmError(f"too many devices in GRES detail {item!r}")
        return {i for i, share in enumerate(shares) if share > 0}
    if inside == "" or inside.startswith("S:"):     # no indices, or only the socket binding
        return set()
    raise SlurmError(f"unreadable device list in GRES detail {item!r}")
