"""Which Slurm job each process on this node belongs to, and what it uses (RSS, CPU time).

Three sources, tried in order of how far they can be trusted:

1. the cgroup path (/proc/PID/cgroup). slurmstepd puts every task in a job cgroup, and only root
   can move processes between cgroups, so users cannot forge it. Layouts:
       v1:  N:controller:/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/...
       v2:  0::/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/{user,slurm}/...
   Both are anchored: the job directory must sit directly below Slurm's own root (`slurm*` or
   `*slurmstepd.scope`), and that root may only sit below systemd slices and scopes (a container's
   scope, a doubled system.slice under cgroupns=host). That keeps out a directory merely named
   job_5 and the subtrees systemd delegates to users (user@UID.service), where they may mkdir.
2. the slurmstepd ancestor. Under proctrack/linuxproc (no cgroups, e.g. containers) Slurm itself
   tracks tasks by parentage. The nearest root-owned `slurmstepd` ancestor names its step in its
   process title ("slurmstepd: [1234.0]"); users can rename their own processes but cannot make
   them root's, so a user-owned "slurmstepd" is passed over.
3. SLURM_JOB_ID in /proc/PID/environ: what the process was started with. Any user can set it, so
   such a match says via="environ" and callers must not let it decide anything that matters.

Nothing else is taken from a process's environment: which GPUs a job holds comes from slurmd's
and slurmctld's view (agent/alloc.py), never from SLURM_JOB_GPUS, which its owner can set to name
another job's GPUs. What a process does give is the devices cgroup of its job (cgroup v1), root's.

A scan reads each process's files at most once: ancestors' stat/status/cmdline are cached, so a
tree of hundreds of processes under one slurmstepd costs one read per file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

PF_KTHREAD = 0x00200000     # /proc/PID/stat flags bit of kernel threads (include/linux/sched.h)
MAX_ANCESTRY = 64           # a task sits a few levels below its slurmstepd; bound the walk anyway
MAX_JOB_ID = 2 ** 32 - 1    # Slurm's job ids are uint32; a longer number is nobody's job
MAX_FILE_BYTES = 1 << 20    # /proc/PID/environ can be large, but not this large for what we read

# systemd slices/scopes only: a delegated user subtree always passes through user@UID.service
_SYSTEMD_PREFIX = r"(?:/[^/]+\.(?:slice|scope))*"
_STEP = r"(?:/step_(\w+))?(?=/|$)"
_CGROUP_V1 = re.compile(rf"^{_SYSTEMD_PREFIX}/slurm[^/]*/uid_\d+/job_(\d+){_STEP}", re.ASCII)
_CGROUP_V2 = re.compile(rf"^{_SYSTEMD_PREFIX}/[^/]*slurmstepd\.scope/job_(\d+){_STEP}", re.ASCII)
_STEP_NAME = re.compile(r"\w+", re.ASCII)
# "[job.step]", a heterogeneous step's component as "+N"
_STEPD_TITLE = re.compile(r"^slurmstepd: \[(\d+)\.(\w+)(?:\+\d+)?\]", re.ASCII)


@dataclass(frozen=True)
class JobRef:
    job_id: int
    step: str | None      # "0", "batch", "extern", or None when unknown
    via: str              # "cgroup-v1" | "cgroup-v2" | "slurmstepd" | "environ"


@dataclass(frozen=True)
class Process:
    pid: int
    uid: int                    # real uid from /proc/PID/status
    comm: str
    job: JobRef
    rss_kib: int                # VmRSS (0 for zombies)
    cpu_ticks: int              # utime + stime, in clock ticks (see clock_ticks())
    devices_cgroup: str = ""    # cgroup v1: the job's directory in the devices hierarchy, else ""


def job_from_cgroup(text: str) -> JobRef | None:
    """The job of a /proc/PID/cgroup content; the first line naming one wins (all controllers of
    one process name the same step, and a hybrid host's 0:: line never names one)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        v2 = parts[0] == "0" and parts[1] == ""
        match = (_CGROUP_V2 if v2 else _CGROUP_V1).match(parts[2])
        if match and (job_id := job_id_of(match[1])) is not None:
            return JobRef(job_id, match[2], "cgroup-v2" if v2 else "cgroup-v1")
    return None


def devices_cgroup(text: str) -> str:
    """The job directory in the cgroup v1 devices hierarchy (`/slurm/uid_1001/job_7`) of a
    /proc/PID/cgroup content, "" when the devices controller does not hold it in a Slurm job."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "devices" in parts[1].split(","):
            match = _CGROUP_V1.match(parts[2])
            return parts[2][:match.end(1)] if match and job_id_of(match[1]) is not None else ""
    return ""


def job_from_stepd_cmdline(cmdline: bytes) -> JobRef | None:
    """The step a slurmstepd serves, from its process title ("slurmstepd: [1234.batch]\\0")."""
    title = cmdline.split(b"\0", 1)[0].decode("utf-8", "replace")
    match = _STEPD_TITLE.match(title)
    job_id = job_id_of(match[1]) if match else None
    return JobRef(job_id, match[2], "slurmstepd") if match and job_id is not None else None


def job_from_environ(data: bytes) -> JobRef | None:
    """SLURM_JOB_ID (and SLURM_STEP_ID) of a /proc/PID/environ content. Forgeable: via="environ"."""
    env = _parse_environ(data)
    job_id = job_id_of(env.get("SLURM_JOB_ID", ""))
    if job_id is None:
        return None
    step = env.get("SLURM_STEP_ID", "")
    return JobRef(job_id, step if _STEP_NAME.fullmatch(step) and len(step) <= 32 else None, "environ")


def clock_ticks() -> int:
    """Clock ticks per second, the unit of Process.cpu_ticks."""
    return os.sysconf("SC_CLK_TCK")


def scan(proc_root: Path = Path("/proc")) -> dict[int, Process]:
    """Every process under proc_root that belongs to a Slurm job, by pid. slurmstepd (Slurm's, not
    the job's) and kernel threads are left out; a process that vanishes or cannot be read is
    skipped."""
    root = Path(proc_root)
    with os.scandir(root) as entries:
        pids = [int(entry.name) for entry in entries if entry.name.isascii() and entry.name.isdigit()]
    return _scan(_Tree(lambda pid, name: _read(root / str(pid) / name)), pids)


def scan_files(files: Mapping[int, Mapping[str, bytes]]) -> dict[int, Process]:
    """scan() over an in-memory /proc ({pid: {"stat": b"...", "cgroup": b"...", ...}}): the same
    parsing, for tests and the fuzz suite."""
    def read(pid: int, name: str) -> bytes:
        try:
            return files[pid][name]
        except KeyError:
            raise FileNotFoundError(name) from None
    return _scan(_Tree(read), [pid for pid in files if isinstance(pid, int) and pid > 0])


def _scan(tree: "_Tree", pids: list[int]) -> dict[int, Process]:
    found = {}
    for pid in pids:
        process = tree.process(pid)
        if process is not None:
            found[pid] = process
    return found


@dataclass(frozen=True)
class _Stat:
    comm: str
    ppid: int
    flags: int
    cpu_ticks: int


def _read(path: Path) -> bytes:
    with open(path, "rb") as file:
        return file.read(MAX_FILE_BYTES)


def job_id_of(text: str) -> int | None:
    """A Slurm job id from text that must be all ASCII digits (None otherwise, or when out of range):
    int() of a user's 5000-digit SLURM_JOB_ID would raise, and a root loop must not."""
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        return None
    job_id = int(text)
    return job_id if 0 < job_id <= MAX_JOB_ID else None


def _parse_stat(data: bytes) -> _Stat:
    # "pid (comm) state ppid ...": comm may hold spaces and ')', so it ends at the LAST ')'
    text = data.decode("utf-8", "replace")
    open_at, close_at = text.index("("), text.rindex(")")
    fields = text[close_at + 1:].split()   # fields[0] is the state, field 3 of proc(5)
    return _Stat(comm=text[open_at + 1:close_at], ppid=_counter(fields[1]), flags=_counter(fields[6]),
                 cpu_ticks=_counter(fields[11]) + _counter(fields[12]))


def _parse_status(data: bytes) -> tuple[int, int]:
    """(real uid, VmRSS in KiB); kernel threads and zombies have no VmRSS line."""
    uid, rss = None, 0
    for line in data.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key == "Uid":
            uid = _counter(value.split()[0])
        elif key == "VmRSS":
            rss = _counter(value.split()[0])
    if uid is None:
        raise ValueError("no Uid line")
    return uid, rss


def _counter(word: str) -> int:
    """A non-negative kernel number (ASCII digits, below 2**64); ValueError otherwise."""
    if not (word.isascii() and word.isdigit() and len(word) <= 20) or int(word) >= 2 ** 64:
        raise ValueError(f"not a /proc number: {word[:30]!r}")
    return int(word)


def _parse_environ(data: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:     # getenv() returns the first of duplicates
            env.setdefault(key.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    return env


class _Tree:
    """One scan's view of /proc; a file that cannot be read or parsed is remembered as None."""

    def __init__(self, read: Callable[[int, str], bytes]):
        self._read = read
        self._cache: dict[tuple[int, str], object] = {}

    def _file(self, pid: int, name: str, parse):
        key = (pid, name)
        if key not in self._cache:
            try:
                self._cache[key] = parse(self._read(pid, name))
            except (OSError, ValueError, IndexError):   # gone, unreadable, or not what proc(5) says
                self._cache[key] = None
        return self._cache[key]

    def stat(self, pid: int) -> _Stat | None:
        return self._file(pid, "stat", _parse_stat)

    def status(self, pid: int) -> tuple[int, int] | None:
        return self._file(pid, "status", _parse_status)

    def _is_root(self, pid: int) -> bool:
        status = self.status(pid)
        return status is not None and status[0] == 0

    def job_from_ancestry(self, pid: int) -> JobRef | None:
        """The step of the nearest root-owned slurmstepd among pid and its ancestors."""
        seen = set()
        for _ in range(MAX_ANCESTRY):
            if pid <= 0 or pid in seen:
                return None
            seen.add(pid)
            stat = self.stat(pid)
            if stat is None:
                return None
            if stat.comm == "slurmstepd" and self._is_root(pid):
                job = job_from_stepd_cmdline(self._file(pid, "cmdline", bytes) or b"")
                if job is not None:
                    return job
            pid = stat.ppid
        return None

    def process(self, pid: int) -> Process | None:
        stat, status = self.stat(pid), self.status(pid)
        if stat is None or status is None or stat.flags & PF_KTHREAD:
            return None
        uid, rss_kib = status
        if stat.comm == "slurmstepd" and uid == 0:     # a user may name a job process so
            return None
        cgroup = self._file(pid, "cgroup", lambda data: data.decode("utf-8", "replace")) or ""
        # the environment is read last and only for SLURM_JOB_ID (another user's environ needs
        # CAP_SYS_PTRACE, which root in a container may lack: such a process maps the other ways)
        job = (job_from_cgroup(cgroup) or self.job_from_ancestry(stat.ppid)
               or self._file(pid, "environ", job_from_environ))
        if job is None:
            return None
        return Process(pid=pid, uid=uid, comm=stat.comm, job=job, rss_kib=rss_kib,
                       cpu_ticks=stat.cpu_ticks, devices_cgroup=devices_cgroup(cgroup))
