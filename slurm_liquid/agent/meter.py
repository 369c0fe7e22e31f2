"""Per-job meters: fold each sample of the node's processes and GPUs into what every job used.

Attribution, per GPU and sample:
- a GPU that Slurm gave one job whole (alloc.py: slurmd's and slurmctld's view, never a process's
  environment), or that only one job's processes use while Slurm has not said whose it is, is
  charged to that job with all its used memory: what the card lost to the job, CUDA context and
  allocator cache included (the `nvml` measure the estimator learns from). Processes of other jobs
  on it (possible only where devices are not constrained) are taken off and charged to their jobs;
  they cannot make the holder's GPU count as shared;
- a GPU shared by Slurm (shard GRES, or given to several jobs) or, without an allocation, used by
  processes of several jobs, is charged per process, using the NVML accounting peak where an admin
  enabled accounting mode (the true peak between samples).
Host memory is the sum of the job's resident sets; CPUs busy come from the processes' CPU ticks.
Readings that are not finite non-negative numbers count as no reading.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping

from slurm_liquid.agent.alloc import Allocation
from slurm_liquid.agent.gpus import GpuProcess, GpuSample
from slurm_liquid.agent.procs import MAX_JOB_ID, Process
from slurm_liquid.ledger import Usage

MAX_GPUS = 1024             # GPU meters per job: more is a corrupt state file, not a node
MAX_READING = float(2 ** 40)


def reading(value: Any) -> float | None:
    """A memory or utilisation reading as a finite non-negative float, else None (no reading; NaN fails too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:       # an integer beyond any float
        return None
    # 2**40 MiB is an exabyte: a larger reading is a broken one, and sums of several stay finite
    return value if 0 <= value < MAX_READING else None


@dataclass
class GpuMeter:
    peak_mib: float = 0.0
    util_sum: float = 0.0
    util_samples: int = 0
    shared: bool = False


@dataclass
class JobMeter:
    job_id: int
    first_seen: float
    last_seen: float
    nodelist: str = ""
    samples: int = 0
    host_peak_mib: float = 0.0
    cpu_seconds: float = 0.0
    gpus: dict[int, GpuMeter] = field(default_factory=dict)
    shards: int = 0
    via: str = ""

    def usage(self, source: str, node: str) -> Usage:
        measured = list(self.gpus.values())
        utils = [g.util_sum / g.util_samples for g in measured if g.util_samples]
        seconds = max(self.last_seen - self.first_seen, 0.0)
        return Usage(by=source, gpus=len(measured), peak_mib=round(max((g.peak_mib for g in measured), default=0)),
                     util=sum(utils) / len(utils) if utils else None, host_mib=round(self.host_peak_mib),
                     cpus=self.cpu_seconds / seconds if seconds > 0 else 0.0,
                     shared=self.shards > 0 or any(g.shared for g in measured), seconds=round(seconds),
                     samples=self.samples, nodes=(node,))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "JobMeter":
        """A meter from its saved form; ValueError when anything in it is not what to_json writes."""
        if not isinstance(data, Mapping) or not set(data) <= {f.name for f in fields(cls)}:
            raise ValueError("not a saved job meter")
        gpus = data.get("gpus", {})
        if not isinstance(gpus, Mapping) or len(gpus) > MAX_GPUS:
            raise ValueError("bad GPU meters")
        values = {key: _typed(key, data[key], cls.__dataclass_fields__[key].type) for key in data if key != "gpus"}
        meter = cls(**{**values, "gpus": {_index(k): _gpu_meter(v) for k, v in gpus.items()}})
        if not 0 < meter.job_id <= MAX_JOB_ID:
            raise ValueError(f"bad job id {meter.job_id}")
        return meter


def _typed(key: str, value: Any, kind: str) -> Any:
    """A saved field checked against its annotation (`int`, `float`, `str`, `bool`)."""
    if kind == "str" and isinstance(value, str) and len(value) <= 4096:
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 63:
        return value
    if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number):
            return number
    raise ValueError(f"bad saved value {key}={str(value)[:40]!r}")


def _index(key: Any) -> int:
    text = str(key)
    if not (text.isascii() and text.isdigit() and len(text) <= 4):
        raise ValueError(f"bad GPU index {key!r}")
    return int(text)


def _gpu_meter(data: Any) -> GpuMeter:
    if not isinstance(data, Mapping) or not set(data) <= {f.name for f in fields(GpuMeter)}:
        raise ValueError("not a saved GPU meter")
    return GpuMeter(**{key: _typed(key, value, GpuMeter.__dataclass_fields__[key].type) for key, value in data.items()})


def trusted(processes: Mapping[int, Process]) -> dict[int, Process]:
    """Processes whose job we may charge. SLURM_JOB_ID in the environment is anyone's to set: such a
    process counts only as its own user's (a job's process that left its slurmstepd, e.g. a
    daemonised data loader), never towards another user's job or a job seen no other way."""
    owners: dict[int, set[int]] = defaultdict(set)
    for proc in processes.values():
        if proc.job.via != "environ":
            owners[proc.job.job_id].add(proc.uid)
    return {pid: p for pid, p in processes.items() if p.job.via != "environ" or p.uid in owners[p.job.job_id]}


class Meters:
    """Every job seen on this node since it started, until `finish` hands its usage over."""

    def __init__(self, ticks_per_s: int = 100):
        self.jobs: dict[int, JobMeter] = {}
        self.ticks_per_s = ticks_per_s
        self._ticks: dict[int, tuple[int, int]] = {}   # pid -> (job, last cpu ticks)

    def update(self, now: float, processes: Mapping[int, Process], gpus: Iterable[GpuSample],
               allocations: Mapping[int, Allocation] | None = None) -> None:
        """Fold one sample in. `allocations`: the GPUs Slurm gave each job here (alloc.py); a job
        without one holds none as far as attribution goes."""
        processes = trusted(processes)
        allocations = allocations or {}
        by_job: dict[int, list[Process]] = defaultdict(list)
        for proc in processes.values():
            by_job[proc.job.job_id].append(proc)
        for job_id, procs in by_job.items():
            meter = self.jobs.get(job_id)
            if meter is None:
                meter = self.jobs[job_id] = JobMeter(job_id, now, now, via=procs[0].job.via)
            meter.last_seen = now
            meter.samples += 1
            held = allocations.get(job_id)
            if held is not None:
                meter.nodelist = held.nodelist or meter.nodelist
                meter.shards = max(meter.shards, held.shards)
            meter.host_peak_mib = max(meter.host_peak_mib, sum(p.rss_kib for p in procs) / 1024)
            meter.cpu_seconds += self._cpu_delta(job_id, procs) / self.ticks_per_s
        self._charge_gpus(processes, {j: allocations[j] for j in by_job if j in allocations}, gpus)
        # forget the tick counters of processes that ended; their time was already counted
        self._ticks = {pid: v for pid, v in self._ticks.items() if pid in processes}

    def _cpu_delta(self, job_id: int, procs: list[Process]) -> int:
        delta = 0
        for proc in procs:
            seen = self._ticks.get(proc.pid)
            # a process first seen now counts from now: its earlier ticks may predate this agent
            if seen is not None and seen[0] == job_id and proc.cpu_ticks >= seen[1]:
                delta += proc.cpu_ticks - seen[1]
            self._ticks[proc.pid] = (job_id, proc.cpu_ticks)
        return delta

    def _charge_gpus(self, processes: Mapping[int, Process], allocations: Mapping[int, Allocation],
                     gpus: Iterable[GpuSample]) -> None:
        holders: dict[int, set[int]] = defaultdict(set)     # GPU index -> jobs Slurm gave it to
        for job_id, held in allocations.items():
            for index in held.gpus:
                holders[index].add(job_id)
        for gpu in gpus:
            on_gpu: dict[int, list[GpuProcess]] = defaultdict(list)   # job -> its GPU processes here
            for gp in gpu.processes:
                proc = processes.get(gp.pid)
                if proc is not None:
                    on_gpu[proc.job.job_id].append(gp)
            held = holders.get(gpu.index, set())
            # the job the whole card is charged to: its only holder, or, where Slurm has not said
            # whose the GPU is, the only job using it; none when Slurm shares it out
            owner = next(iter(held or on_gpu)) if len(held or on_gpu) == 1 else None
            if owner is not None and self.jobs[owner].shards:
                owner = None
            card, card_util = reading(gpu.used_mib) or 0.0, reading(gpu.util)
            for job_id in held | set(on_gpu):
                own = on_gpu.get(job_id, [])
                if job_id == owner:
                    others = sum(_process_mib(gp) for j, procs in on_gpu.items() if j != job_id for gp in procs)
                    used = max([card - others, *(reading(gp.peak_mib) or 0.0 for gp in own)])
                    util = card_util
                else:
                    used = sum(_process_mib(gp) for gp in own)
                    utils = [u for gp in own if (u := reading(gp.util)) is not None]
                    util = sum(utils) if utils else card_util
                meter = self.jobs[job_id].gpus.setdefault(gpu.index, GpuMeter())
                meter.peak_mib = max(meter.peak_mib, used)
                meter.shared = meter.shared or job_id != owner
                if util is not None:
                    meter.util_sum += min(util, 100.0)
                    meter.util_samples += 1
        for job_id, held in allocations.items():
            # GPUs a job holds but NVML could not read (no NVML, a lost GPU) still count as held
            for index in held.gpus:
                self.jobs[job_id].gpus.setdefault(index, GpuMeter())

    def finish(self, job_id: int) -> JobMeter | None:
        return self.jobs.pop(job_id, None)

    def to_json(self) -> dict[str, Any]:
        return {str(k): m.to_json() for k, m in self.jobs.items()}

    def restore(self, data: Any) -> int:
        """Add the saved meters of jobs not measured yet; a malformed entry is skipped (ValueError
        when `data` is not a saved Meters at all). Returns how many were skipped."""
        meters, skipped = saved_meters(data)
        for job_id, meter in meters.items():
            self.jobs.setdefault(job_id, meter)
        return skipped


def saved_meters(data: Any) -> tuple[dict[int, JobMeter], int]:
    """({job id: meter}, how many malformed entries were skipped) of a saved {"<job id>": meter}
    object (ValueError when it is not an object)."""
    if not isinstance(data, Mapping):
        raise ValueError("saved meters are not an object")
    meters, skipped = {}, 0
    for key, value in data.items():
        try:
            meter = JobMeter.from_json(value)
            if str(meter.job_id) != key:
                raise ValueError("job id does not match its key")
        except (ValueError, TypeError):
            skipped += 1
            continue
        meters[meter.job_id] = meter
    return meters, skipped


def _process_mib(gp: GpuProcess) -> float:
    """What one process holds on a GPU: its accounting peak where known, else its current use."""
    return max(reading(gp.used_mib) or 0.0, reading(gp.peak_mib) or 0.0)
