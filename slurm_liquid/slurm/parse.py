"""The one place that reads Slurm's JSON, for every version we ship.

Slurm 22.05 speaks openapi v0.0.38 (plain numbers, states as strings, `gres:gpu:2`),
24.11 speaks data_parser v0.0.42 (numbers as `{set, infinite, number}`, states as lists,
comments in sacct as `{job, administrator, system}`, `gres/gpu:2`), and 26.05 data_parser
v0.0.45, of the same family. Each helper below accepts every shape it has been seen in,
and the recorded outputs in tests/fixtures/slurm/ pin that down.

Whatever a reply holds, reading it ends in one of three ways, never in another exception:

- **the document is not a Slurm answer** (not a JSON object, `jobs`/`nodes`/`errors` not a list,
  JSON nested too deeply or not JSON at all): `SlurmError`, and the caller has no jobs this time;
- **one entry cannot be read** (not an object, no job id or node name, a count that is negative
  or beyond Slurm's 32-bit range, a number that is not finite where one is needed, a state that
  is neither a string nor a list, an unexpandable host list, a field of the wrong type): that entry
  is skipped with a logged reason (WARNING the first time, DEBUG after) and, when the caller
  passes a `skipped` list, the reason is appended there. Every other entry is still returned, so
  one user's odd job never hides the healthy ones from the daemon;
- **a field that is merely unset or out of range but has a safe meaning** becomes that meaning:
  NaN, infinity and `{set: false}` read as unset; timestamps at or before the epoch read as
  unset; a timestamp beyond the year 9999 (`--begin=uts99999999999999`) reads as unset, except a
  pending job's eligible (begin) time, which becomes `FAR_FUTURE`: the job asked not to start
  yet, and treating that as "no begin time" would let the daemon start it.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import replace
from functools import lru_cache
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, MutableSequence, Optional, TypeVar

import hostlist

from slurm_liquid import hostnames
from slurm_liquid.gcpause import gc_paused
from slurm_liquid.files import parse_json
from slurm_liquid.slurm.errors import SlurmError
from slurm_liquid.slurm.models import FINISHED_STATES, Job, Node, Partition, SlurmVersion

log = logging.getLogger(__name__)
T = TypeVar("T")

BASE_JOB_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})
BASE_NODE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_TRES_AMOUNT = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMGT]?)")
# Slurm keeps counts (CPUs, GPUs, nodes, job ids, priorities) in 32 bits; memory in MiB in 64.
MAX_COUNT = 2 ** 32 - 1
MAX_MIB = 2 ** 63
# 0xfffffffe / 0xffffffff: NO_VAL and INFINITE, which 22.05's plain numbers print as they are
_NO_VAL32 = (0xFFFFFFFE, 0xFFFFFFFF)
MAX_HOSTS = 100_000  # more names than any cluster has: a host list beyond it is not a node list
FAR_FUTURE = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
_LAST_SECOND = FAR_FUTURE.timestamp()


class BadEntry(SlurmError):
    """One job, node or partition of a reply that cannot be read; the others still are."""


# ---------------------------------------------------------------- scalars

def num(value: Any) -> int | float | None:
    """A number from either a plain value or `{set, infinite, number}`; None when unset, infinite or NaN."""
    kind = type(value)
    if kind is int:     # the common cases first: isinstance against Mapping costs an ABC check
        return value
    if kind is dict or (kind is not str and isinstance(value, Mapping)):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
        if type(value) is int:
            return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]{1,30}\s*", value):
        return int(value)
    return None


def integer(value: Any, default: int = 0) -> int:
    """A whole number (a float is truncated); `default` when unset."""
    n = num(value)
    return default if n is None else int(n)


def count(value: Any, what: str, default: int = 0, high: int = MAX_COUNT) -> int:
    """A count Slurm keeps unsigned: `default` when unset, BadEntry when negative or beyond `high`."""
    # the common cases first, as `num` reads them (200,000 calls for 20,000 jobs): a set, finite
    # `{set, infinite, number}` or a plain int in range; anything else goes the long way
    kind = type(value)
    if kind is dict:
        if value.get("set", True) and not value.get("infinite", False):
            n = value.get("number")
            if type(n) is int and 0 <= n <= high:
                return n
    elif kind is int and 0 <= value <= high:
        return value
    n = integer(value, default)
    if not 0 <= n <= high:
        raise BadEntry(f"{what}={_short(n)} is out of range")
    return n


def timestamp(value: Any, beyond: datetime | None = None) -> datetime | None:
    """A UTC time from seconds since the epoch; None when unset or not after the epoch, and
    `beyond` for a time past what datetime holds (the year 9999)."""
    n = num(value)
    if n is None or n <= 0:
        return None
    if n > _LAST_SECOND:
        return beyond
    return datetime.fromtimestamp(n, tz=timezone.utc)


def states(value: Any, base: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """(base state, other flags) from `"IDLE+DRAIN"`, `"PENDING"` or `["MIXED", "DRAIN"]`."""
    if type(value) is list and len(value) == 1 and type(value[0]) is str and value[0] in base:   # ["RUNNING"]
        return value[0], ()
    if isinstance(value, str):
        items: list[Any] = re.split(r"[+,]", value)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif value is None:
        items = []
    else:
        raise BadEntry(f"state is a {type(value).__name__}, not a string or a list")
    names = [text(i, "state").strip().upper() for i in items]
    names = [s for s in names if s]
    main = next((s for s in names if s in base), names[0] if names else "UNKNOWN")
    return main, tuple(s for s in names if s != main)


def job_states(value: Any) -> tuple[str, tuple[str, ...]]:
    """Job state and flags; a bare REQUEUED (22.05 sacct) is a pending job that was requeued, as 24.11 says."""
    state, flags = states(value, BASE_JOB_STATES)
    if state == "REQUEUED":
        return "PENDING", ("REQUEUED", *flags)
    return state, flags


def text(value: Any, what: str = "value") -> str:
    """A string field: strings and numbers as text, None as ''; BadEntry for lists and objects."""
    if type(value) is str or value is None:
        return value or ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):  # bool included: `true` -> 'True' as before
        return str(value) if not isinstance(value, int) or abs(value) < 10 ** 30 else _short(value)
    raise BadEntry(f"{what} is a {type(value).__name__}, not a string")


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _mapping(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadEntry(f"{key} is a {type(value).__name__}, not an object")
    return value


def expand_hostlist(expr: str, limit: int = MAX_HOSTS) -> list[str]:
    """`gpu[01-02],cpu1` -> 3 names, refused past `limit` before expansion (slurm_liquid.hostnames).
    Raises hostlist.BadHostlist."""
    return hostnames.expand(expr, limit)


def expand_nodes(expr: Any) -> tuple[str, ...]:
    """`gpu[01-02],cpu1` -> ('gpu01', 'gpu02', 'cpu1'); lists pass through; '(null)'/'None' -> ()."""
    if isinstance(expr, (list, tuple)):
        if len(expr) > MAX_HOSTS:
            raise BadEntry(f"node list of {len(expr)} names")
        return tuple(text(n, "node name") for n in expr)
    expr = text(expr, "node list").strip()
    if not expr or expr in {"(null)", "None", "N/A", "None assigned"}:
        return ()
    return _expanded(expr)


@lru_cache(maxsize=16384)
def _expanded(expr: str) -> tuple[str, ...]:
    """expand_nodes of one host list; a running job's list comes back in every pass, read once."""
    try:
        return tuple(expand_hostlist(expr))
    except hostlist.BadHostlist as exc:
        raise BadEntry(f"node list {_short(expr)}: {exc}") from None


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
    return list(_gres_text(text(spec, "gres")))


@lru_cache(maxsize=4096)
def _gres_text(spec: str) -> tuple[tuple[str, str | None, int], ...]:
    """parse_gres of one string, read once per distinct string (see _tres_text)."""
    out = []
    for item in split_gres(spec):
        item = re.sub(r"\(.*\)$", "", item)
        item = re.sub(r"^gres[/:]", "", item)
        fields = item.split(":")
        amount = 1
        if len(fields) > 1 and re.fullmatch(r"[0-9]+", fields[-1]):
            amount = _digits(fields.pop(), "gres count")
        name = fields[0]
        gtype = fields[1] if len(fields) > 1 else None
        out.append((name, gtype, amount))
    return tuple(out)


def _digits(value: str, what: str) -> int:
    if len(value) > 20 or int(value) > MAX_COUNT:
        raise BadEntry(f"{what} {_short(value)} is out of range")
    return int(value)


def gres_count(spec: Any, name: str = "gpu") -> tuple[int, str | None]:
    """Total count of one GRES in a spec, and its type when the spec names one."""
    total, gtype = 0, None
    for gname, t, amount in parse_gres(spec):
        if gname == name:
            total += amount
            gtype = gtype or t
    return total, gtype


def parse_tres(value: Any) -> dict[str, float]:
    """TRES as {'cpu': 2, 'mem': MiB, 'node': 1, 'gres/gpu': 2, 'gres/gpu:h100': 2}.

    Accepts the string form ('cpu=2,mem=2G,gres/gpu=3') and the list form of sacct
    ([{'type': 'gres', 'name': 'gpu', 'count': 2}, ...]). An amount that is not a finite
    number below 2^63 is a BadEntry (a TRES total nobody can have); negative list counts
    (energy: -2) mean "not counted" and are left out.
    """
    if isinstance(value, str):
        return dict(_tres_text(value))   # a copy: callers may change theirs
    out: dict[str, float] = {}
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, Mapping):
                raise BadEntry(f"a TRES item is a {type(item).__name__}, not an object")
            name = text(item.get("name"), "TRES name")
            key = text(item.get("type"), "TRES type") + (f"/{name}" if name else "")
            amount = num(item.get("count"))
            if amount is not None and amount >= 0:
                out[key] = _amount(amount, key)
        return out
    return dict(_tres_text(text(value, "TRES")))


@lru_cache(maxsize=4096)
def _tres_text(value: str) -> tuple[tuple[str, float], ...]:
    """The string form of parse_tres; jobs of one cluster repeat a few hundred TRES strings, so
    each is read once (an error is not cached: it is raised again for the next entry)."""
    out: dict[str, float] = {}
    for item in value.split(","):
        if "=" not in item:
            continue
        key, raw = item.split("=", 1)
        match = _TRES_AMOUNT.fullmatch(raw.strip())
        if not match:
            continue
        if len(match.group(1)) > 30:
            raise BadEntry(f"TRES {key}={_short(raw)} is out of range")
        amount = float(match.group(1))
        if key == "mem":
            amount *= _MEM_UNITS.get(match.group(2) or "M", 1)
        out[key.strip()] = _amount(amount, key)
    return tuple(out.items())


def _amount(amount: float, key: str) -> float:
    if not 0 <= amount < MAX_MIB:
        raise BadEntry(f"TRES {key}={_short(amount)} is out of range")
    return float(amount)


def tres_gpus(tres: Mapping[str, float]) -> int:
    """GPUs in a TRES map: the untyped 'gres/gpu' total, else the sum of typed ones."""
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    return int(sum(v for k, v in tres.items() if k.startswith("gres/gpu:")))


# ---------------------------------------------------------------- documents

def check_document(doc: Any, command: str) -> None:
    """Raise SlurmError when a reply is not a JSON object or carries errors (22.05's "Nothing
    found" is an empty answer)."""
    if not isinstance(doc, Mapping):
        raise SlurmError(f"{command} printed JSON that is not an object ({type(doc).__name__})")
    raw = doc.get("errors")
    if not raw:
        return
    if not isinstance(raw, list):
        raise SlurmError(f"{command} printed `errors` that is a {type(raw).__name__}, not a list")
    errors = [e for e in raw if not (isinstance(e, Mapping) and e.get("description") == "Nothing found")]
    if errors:
        messages = "; ".join(_error_text(e) for e in errors[:5])
        raise SlurmError(f"{command} reported: {messages}")


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        error = error.get("description") or error.get("error") or error
    shown = error if isinstance(error, str) else _short(error)
    return shown if len(shown) <= 300 else shown[:297] + "..."


def _entries(doc: Mapping[str, Any], key: str, command: str) -> list[Any]:
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SlurmError(f"{command} printed `{key}` that is a {type(value).__name__}, not a list")
    return value


_warned: set[str] = set()


def _each(entries: Iterable[Any], read: Callable[[Mapping[str, Any]], T], command: str, what: str,
          skipped: MutableSequence[str] | None) -> list[T]:
    """`read` of every entry; an entry it cannot read is skipped with its reason (see the module doc)."""
    out = []
    for i, raw in enumerate(entries):
        try:
            if not isinstance(raw, Mapping):
                raise BadEntry(f"is a {type(raw).__name__}, not an object")
            out.append(read(raw))
        # Any exception: one unreadable entry must never take the whole answer with it. The
        # helpers raise BadEntry with a precise reason; anything else is named by its type.
        except Exception as exc:
            reason = f"{command}: skipped {what} {_ident(raw, i)}: {_reason(exc)}"
            if skipped is not None:
                skipped.append(reason)
            if reason in _warned:
                log.debug("%s", reason)
            else:
                if len(_warned) < 10_000:
                    _warned.add(reason)
                log.warning("%s", reason)
    return out


def _ident(raw: Any, index: int) -> str:
    if isinstance(raw, Mapping):
        for key in ("job_id", "name"):
            value = raw.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and len(str(value)) <= 40:
                return f"{value} (entry {index})"
    return f"entry {index}"


def _reason(exc: Exception) -> str:
    message = str(exc) if isinstance(exc, BadEntry) else f"{type(exc).__name__}: {exc}"
    return message if len(message) <= 300 else message[:297] + "..."


def document_version(doc: Mapping[str, Any]) -> SlurmVersion | None:
    """The Slurm version in a reply's `meta` (24.11: meta.slurm.version, 22.05: meta.Slurm.version)."""
    try:
        meta = doc.get("meta") or {}
        slurm = meta.get("slurm") or meta.get("Slurm") or {}
        version = slurm.get("version") or {}
        parts = [version["major"], version["minor"], version.get("micro", 0)]
        if not all(isinstance(p, int) and not isinstance(p, bool) or isinstance(p, str) and p.isascii()
                   and p.isdigit() and len(p) < 6 for p in parts):
            return None
        return SlurmVersion(*(int(p) for p in parts))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _comments(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    comment = raw.get("comment")
    if isinstance(comment, Mapping):  # sacct, data_parser v0.0.40+
        return (text(comment.get("job"), "comment"), text(comment.get("administrator"), "admin comment"),
                text(comment.get("system"), "system comment"))
    return (text(comment, "comment"), text(raw.get("admin_comment"), "admin comment"),
            text(raw.get("system_comment"), "system comment"))


def _exit_code(value: Any) -> int | None:
    if isinstance(value, Mapping):
        code = num(value.get("return_code"))
    else:
        status = num(value)  # 22.05 squeue: the raw wait status (exit 3 -> 768)
        if status is None or not 0 <= status <= MAX_COUNT:
            return None
        status = int(status)
        code = status >> 8 if status & 0x7F == 0 else 128 + (status & 0x7F)
    return int(code) if code is not None and -MAX_COUNT <= code <= MAX_COUNT else None


def exit_codes_from_sacct_text(text_out: str) -> dict[int, int]:
    """{job id: exit code} from `sacct --parsable2 --noheader -X -o JobIDRaw,ExitCode` ('3:0').

    Slurm 22.05's `sacct --json` reports exit code 0 for every job (seen on 22.05.8: a FAILED
    job with `ExitCode=3:0` in text shows `return_code: 0`), so the client reads it from text there.
    Lines that do not read as `<id>|<exit>:<signal>` are left out.
    """
    codes = {}
    for line in text_out.splitlines():
        match = re.fullmatch(r"([0-9]{1,10})\|([0-9]{1,10})(?::([0-9]{1,10}))?", line.strip())
        if match:
            signal = int(match.group(3) or 0)
            codes[int(match.group(1))] = 128 + signal if signal else int(match.group(2))
    return codes


def _job_id(raw: Mapping[str, Any]) -> int:
    if num(raw.get("job_id")) is None:
        raise BadEntry(f"no job_id (job_id={_short(raw.get('job_id'))})")
    return count(raw.get("job_id"), "job_id")


def _priority(value: Any) -> int | None:
    priority = num(value)
    return None if priority is None else count(priority, "priority")


def _time_limit_s(value: Any) -> int | None:
    """Minutes -> seconds; unset, unlimited (22.05's NO_VAL/INFINITE) and negative -> None."""
    minutes = num(value)
    if minutes is None or minutes < 0 or minutes >= _NO_VAL32[0]:
        return None
    return int(minutes) * 60


def _per_node_mib(explicit_node: Any, explicit_cpu: Any, cpus: int, nodes: int, total: float | None) -> int | None:
    """Memory per node: --mem, else --mem-per-cpu x CPUs per node, else the TRES total over the
    nodes; None when unknown (and for --mem=0, which means a whole node)."""
    per_node = num(explicit_node)
    if per_node is not None and 0 < per_node < MAX_MIB:
        return int(per_node)
    per_cpu = num(explicit_cpu)
    if per_cpu is not None and 0 < per_cpu < MAX_MIB and cpus:
        return int(per_cpu) * -(-cpus // max(nodes, 1))
    if total:
        return int(total) // max(nodes, 1)
    return None


def _gpu_type(*types: str | None) -> str | None:
    return next((t for t in types if t), None)


def job_from_squeue(raw: Mapping[str, Any]) -> Job:
    state, flags = job_states(raw.get("job_state"))
    comment, admin_comment, system_comment = _comments(raw)
    alloc = parse_tres(raw.get("tres_alloc_str"))
    req = parse_tres(raw.get("tres_req_str"))
    per_node, node_type = gres_count(raw.get("tres_per_node"))
    per_job, job_type = gres_count(raw.get("tres_per_job"))
    num_nodes = count(raw.get("node_count"), "node_count")
    gpus = tres_gpus(alloc) or tres_gpus(req) or per_job or per_node * max(num_nodes, 1)
    priority = _priority(raw.get("priority"))
    cpus = count(raw.get("cpus"), "cpus")
    return Job(
        job_id=_job_id(raw), name=text(raw.get("name"), "name"), user=text(raw.get("user_name"), "user_name"),
        state=state, state_flags=flags, reason=text(raw.get("state_reason"), "state_reason"),
        partition=text(raw.get("partition"), "partition"),
        nodes=expand_nodes(raw.get("nodes")), num_nodes=num_nodes, cpus=cpus,
        mem_mib=_per_node_mib(raw.get("memory_per_node"), raw.get("memory_per_cpu"), cpus, num_nodes,
                              alloc.get("mem") or req.get("mem")),
        gpus=count(gpus, "gpus"), gpus_per_node=count(per_node, "gpus per node") or None,
        gpu_type=_gpu_type(node_type, job_type),
        shards=count(alloc.get("gres/shard") or req.get("gres/shard") or 0, "shards"),
        features=text(raw.get("features"), "features"),
        comment=comment, admin_comment=admin_comment, system_comment=system_comment,
        priority=priority, held=bool(raw.get("hold")) or (state == "PENDING" and priority == 0),
        restarts=count(raw.get("restart_cnt"), "restart_cnt"),
        exit_code=_exit_code(raw.get("exit_code")) if state in FINISHED_STATES else None,
        submit_time=timestamp(raw.get("submit_time")), start_time=timestamp(raw.get("start_time")),
        # a begin time past the year 9999 still means "not yet", never "now"
        eligible_time=timestamp(raw.get("eligible_time"), beyond=FAR_FUTURE),
        required_nodes=expand_nodes(raw.get("required_nodes")),
        # squeue reports the expected end (start + time limit) for running jobs: keep only real ends.
        end_time=timestamp(raw.get("end_time")) if state in FINISHED_STATES else None,
        time_limit_s=_time_limit_s(raw.get("time_limit")),
        work_dir=text(raw.get("current_working_directory"), "current_working_directory"), source="squeue")


def job_from_sacct(raw: Mapping[str, Any]) -> Job:
    state_block = _mapping(raw, "state")
    state, flags = job_states(state_block.get("current"))
    comment, admin_comment, system_comment = _comments(raw)
    tres = _mapping(raw, "tres")
    alloc, req = parse_tres(tres.get("allocated")), parse_tres(tres.get("requested"))
    times = _mapping(raw, "time")
    required = _mapping(raw, "required")
    user = raw.get("user")
    priority = _priority(raw.get("priority"))
    num_nodes = count(raw.get("allocation_nodes"), "allocation_nodes")
    cpus = count(alloc.get("cpu") or req.get("cpu") or integer(required.get("CPUs")), "cpus")
    return Job(
        job_id=_job_id(raw), name=text(raw.get("name"), "name"),
        user=text(user.get("name") if isinstance(user, Mapping) else user, "user"),
        state=state, state_flags=flags, reason=text(state_block.get("reason"), "reason"),
        partition=text(raw.get("partition"), "partition"),
        nodes=expand_nodes(raw.get("nodes")), num_nodes=num_nodes, cpus=cpus,
        mem_mib=_per_node_mib(required.get("memory_per_node"), required.get("memory_per_cpu"), cpus, num_nodes,
                              alloc.get("mem") or req.get("mem")),
        gpus=count(tres_gpus(alloc) or tres_gpus(req), "gpus"),
        shards=count(alloc.get("gres/shard") or req.get("gres/shard") or 0, "shards"),
        features=text(raw.get("constraints"), "constraints"),
        comment=comment, admin_comment=admin_comment, system_comment=system_comment,
        priority=priority, held=bool(raw.get("hold")) or (state == "PENDING" and priority == 0),
        restarts=count(raw.get("restart_cnt"), "restart_cnt"),
        exit_code=_exit_code(raw.get("exit_code")) if state in FINISHED_STATES else None,
        submit_time=timestamp(times.get("submission")), start_time=timestamp(times.get("start")),
        eligible_time=timestamp(times.get("eligible"), beyond=FAR_FUTURE),
        end_time=timestamp(times.get("end")),
        time_limit_s=_time_limit_s(times.get("limit")),
        work_dir=text(raw.get("working_directory"), "working_directory"), source="sacct")


def _names(value: Any, what: str) -> tuple[str, ...]:
    """A list of names, or one comma-separated string of them (22.05 sinfo features)."""
    if isinstance(value, (list, tuple)):
        items = [text(v, what) for v in value]
    else:
        items = text(value, what).split(",")
    return tuple(i.strip() for i in items if i.strip())


def node_from_json(raw: Mapping[str, Any]) -> Node:
    """A node from `scontrol show nodes --json` (23.02+) or `sinfo --json` (22.05)."""
    name = text(raw.get("name"), "name")
    if not name:
        raise BadEntry("no name")
    state_value = raw.get("state")
    if isinstance(state_value, str) and raw.get("state_flags"):
        state_value = [state_value, *_names(raw.get("state_flags"), "state_flags")]
    state, flags = states(state_value, BASE_NODE_STATES)
    gpus, gpu_type = gres_count(raw.get("gres"))
    gpus_alloc, _ = gres_count(raw.get("gres_used"))
    shards, _ = gres_count(raw.get("gres"), "shard")
    shards_alloc, _ = gres_count(raw.get("gres_used"), "shard")
    # active_features: what the node has now (a node that can reboot into others lists those in features)
    features = raw.get("active_features") if raw.get("active_features") else raw.get("features")
    return Node(
        name=name, state=state, state_flags=flags, partitions=_names(raw.get("partitions"), "partitions"),
        features=_names(features, "features"),
        cpus=count(raw.get("cpus"), "cpus"), cpus_alloc=count(raw.get("alloc_cpus"), "alloc_cpus"),
        mem_mib=count(raw.get("real_memory"), "real_memory", high=MAX_MIB),
        mem_alloc_mib=count(raw.get("alloc_memory"), "alloc_memory", high=MAX_MIB),
        gpus=count(gpus, "gpus"), gpus_alloc=count(gpus_alloc, "gpus used"), gpu_type=gpu_type,
        shards=count(shards, "shards"), shards_alloc=count(shards_alloc, "shards used"),
        reason=text(raw.get("reason"), "reason"), version=text(raw.get("version"), "version"))


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
    name = kv.get("PartitionName", "")
    if not name:
        raise BadEntry("no PartitionName=")
    max_time = kv.get("MaxTime", "UNLIMITED")
    return Partition(
        name=name, nodes=expand_nodes(kv.get("Nodes")), state=kv.get("State", "UP"),
        is_default=kv.get("Default") == "YES", max_time_s=_duration_s(max_time),
        total_gpus=count(tres_gpus(parse_tres(kv.get("TRES"))), "TRES gres/gpu"))


def partitions_from_text(out: str, command: str = "scontrol show partition", skipped: MutableSequence[str] | None = None
                         ) -> list[Partition]:
    """Every partition of `scontrol show partition --oneliner`; a line that cannot be read is skipped."""
    return _each(({"line": line} for line in out.splitlines() if line.strip()),
                 lambda raw: partition_from_oneliner(raw["line"]), command, "partition line", skipped)


def _duration_s(value: str) -> int | None:
    """Slurm durations: 'UNLIMITED', 'MM', 'HH:MM:SS', 'D-HH:MM:SS' -> seconds."""
    if not value or value.upper() in {"UNLIMITED", "INFINITE", "NONE"}:
        return None
    match = re.fullmatch(r"(?:([0-9]{1,9})-)?([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?", value)
    if not match:
        raise BadEntry(f"duration {_short(value)} is not [D-]HH:MM:SS")
    days, *clock = match.groups()
    parts = [int(p) for p in clock if p is not None]
    if len(parts) == 1:
        seconds = parts[0] * 60
    else:
        while len(parts) < 3:
            parts.insert(0, 0)
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return seconds + int(days or 0) * 86400


def jobs_from_document(doc: Mapping[str, Any], command: str, skipped: MutableSequence[str] | None = None) -> list[Job]:
    """The jobs of a `squeue --json` or `sacct --json` reply (`command` says which)."""
    if not command.startswith("sacct"):
        check_document(doc, command)
        return _each(_entries(doc, "jobs", command), job_from_squeue, command, "job", skipped)
    return latest_runs(runs_from_document(doc, command, skipped))


def runs_from_document(doc: Mapping[str, Any], command: str = "sacct", skipped: MutableSequence[str] | None = None
                       ) -> list[Job]:
    """Every run `sacct --json` recorded, a requeued job's earlier runs included, oldest first."""
    check_document(doc, command)
    # When a step's record reaches slurmdbd before its job's, slurmdbd stores a placeholder
    # (name "allocation", no partition, partial nodes) and fills it in later; seen on 22.05 under
    # load. Every real job has a partition, so a record without one is not reported yet.
    runs = _each(_entries(doc, "jobs", command), job_from_sacct, command, "job", skipped)
    return [job for job in runs if job.partition]


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


def nodes_from_document(doc: Mapping[str, Any], command: str, skipped: MutableSequence[str] | None = None) -> list[Node]:
    """The nodes of a `scontrol show nodes --json` or `sinfo --json` reply."""
    check_document(doc, command)
    return _each(_entries(doc, "nodes", command), node_from_json, command, "node", skipped)


def loads(out: str, command: str) -> Mapping[str, Any]:
    """A Slurm command's JSON output as an object; SlurmError when it is anything else."""
    doc = parse_json(out, f"output of `{command}`", SlurmError)
    if not isinstance(doc, Mapping):
        raise SlurmError(f"output of `{command}`: JSON that is not an object")
    return doc


# ---------------------------------------------------------------- large answers, read fast

# What job_from_squeue and node_from_json read of an entry (a unit test holds them to it). A large
# answer is decoded keeping only these: the other hundred fields of a job, its `job_resources` above
# all (a core-by-core map, most of a running job's bytes), are skipped unread.
SQUEUE_FIELDS = (
    "job_id", "name", "user_name", "job_state", "state_reason", "partition", "nodes", "node_count", "cpus",
    "memory_per_node", "memory_per_cpu", "tres_alloc_str", "tres_req_str", "tres_per_node", "tres_per_job",
    "features", "comment", "admin_comment", "system_comment", "priority", "hold", "restart_cnt", "exit_code",
    "submit_time", "start_time", "eligible_time", "required_nodes", "end_time", "time_limit",
    "current_working_directory")
NODE_FIELDS = (
    "name", "state", "state_flags", "partitions", "active_features", "features", "cpus", "alloc_cpus",
    "real_memory", "alloc_memory", "gres", "gres_used", "reason", "version")


@lru_cache(maxsize=None)
def _entry_decoder(key: str, fields: tuple[str, ...]) -> Any:
    """A msgspec decoder of `{key: [entry, ...], errors, meta}` that keeps `fields` of each entry, or
    None without msgspec (then the standard library reads everything)."""
    try:
        import msgspec
    except ImportError:  # pragma: no cover -- a dependency; the slow path stays correct without it
        return None
    entry = msgspec.defstruct(f"{key}_entry", [(name, Any, None) for name in fields])
    answer = msgspec.defstruct(f"{key}_answer", [(key, Optional[list[entry]], None), ("errors", Any, None),
                                                 ("meta", Any, None)])
    return msgspec.json.Decoder(answer), msgspec


def _loads_entries(out: str, command: str, key: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    """`loads`, keeping only `fields` of each entry of `key` (a field an entry lacks reads as null,
    as `.get` reads it). An answer the fast reader refuses (not an object of objects, not JSON,
    NaN, nesting too deep) is read again by `loads`, so that it ends as it always did."""
    found = _entry_decoder(key, fields)
    if found is not None:
        decoder, msgspec = found
        try:
            raw = decoder.decode(out)
        except msgspec.MsgspecError:
            return loads(out, command)
        entries = getattr(raw, key)
        as_dict = msgspec.structs.asdict
        return {key: None if entries is None else [as_dict(e) for e in entries], "errors": raw.errors,
                "meta": raw.meta}
    return loads(out, command)


def jobs_from_output(out: str, command: str = "squeue", skipped: MutableSequence[str] | None = None,
                     where: str | None = None) -> list[Job]:
    """`jobs_from_document(loads(out))` of a `squeue --json` answer, reading only what the jobs are
    made of; `where` names the command in errors (default `command`)."""
    with gc_paused():
        return jobs_from_document(_loads_entries(out, where or command, "jobs", SQUEUE_FIELDS), command, skipped)


def nodes_from_output(out: str, command: str, skipped: MutableSequence[str] | None = None,
                      where: str | None = None) -> list[Node]:
    """`nodes_from_document(loads(out))` of a `scontrol show nodes --json` or `sinfo --json` answer."""
    with gc_paused():
        return nodes_from_document(_loads_entries(out, where or command, "nodes", NODE_FIELDS), command, skipped)


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
        except (hostlist.BadHostlist, BadEntry):
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
