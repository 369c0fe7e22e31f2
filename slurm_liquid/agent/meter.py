"""Per-job meters: fold each sample of the node's processes and GPUs into what every job used.

Attribution, per GPU and sample:
- a GPU that one job holds alone (its processes' SLURM_JOB_GPUS name it, or only its processes run
  on it, and it asked for no GPU share) is charged all its used memory: what the card lost to the job,
  CUDA context and allocator cache included (the `nvml` measure the estimator learns from);
- a shared GPU (shard GRES, or processes of several jobs on it) is charged per process, using the
  NVML accounting peak where an admin enabled accounting mode (the true peak between samples).
Host memory is the sum of the job's resident sets; CPUs busy come from the processes' CPU ticks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from slurm_liquid.agent.gpus import GpuSample
from slurm_liquid.agent.procs import Process
from slurm_liquid.ledger import Usage


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
    def from_json(cls, data: Mapping[str, Any]) -> "JobMeter":
        gpus = {int(k): GpuMeter(**v) for k, v in dict(data.get("gpus", {})).items()}
        return cls(**{**dict(data), "gpus": gpus})


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

    def update(self, now: float, processes: Mapping[int, Process], gpus: Iterable[GpuSample]) -> None:
        processes = trusted(processes)
        by_job: dict[int, list[Process]] = defaultdict(list)
        for proc in processes.values():
            by_job[proc.job.job_id].append(proc)
        for job_id, procs in by_job.items():
            meter = self.jobs.get(job_id)
            if meter is None:
                meter = self.jobs[job_id] = JobMeter(job_id, now, now, via=procs[0].job.via)
            meter.last_seen = now
            meter.samples += 1
            meter.nodelist = meter.nodelist or next((p.nodelist for p in procs if p.nodelist), "")
            meter.shards = max([meter.shards, *(p.shards for p in procs)])
            meter.host_peak_mib = max(meter.host_peak_mib, sum(p.rss_kib for p in procs) / 1024)
            meter.cpu_seconds += self._cpu_delta(job_id, procs) / self.ticks_per_s
        self._charge_gpus(processes, by_job, gpus)
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

    def _charge_gpus(self, processes: Mapping[int, Process], by_job: Mapping[int, list[Process]],
                     gpus: Iterable[GpuSample]) -> None:
        holders: dict[int, set[int]] = defaultdict(set)     # GPU index -> jobs Slurm gave it to
        for job_id, procs in by_job.items():
            for proc in procs:
                for index in proc.job_gpus:
                    holders[index].add(job_id)
        for gpu in gpus:
            on_gpu: dict[int, list[Any]] = defaultdict(list)   # job -> its GPU processes here
            for gp in gpu.processes:
                proc = processes.get(gp.pid)
                if proc is not None:
                    on_gpu[proc.job.job_id].append(gp)
            jobs = holders[gpu.index] | set(on_gpu)
            shared = len(jobs) > 1 or any(self.jobs[j].shards for j in jobs)
            for job_id in jobs:
                own = on_gpu.get(job_id, [])
                if shared:
                    used = sum(max(gp.used_mib or 0.0, gp.peak_mib or 0.0) for gp in own)
                    utils = [gp.util for gp in own if gp.util is not None]
                    util = sum(utils) if utils else gpu.util
                else:
                    used = max([gpu.used_mib, *(gp.peak_mib or 0.0 for gp in own)])
                    util = gpu.util
                meter = self.jobs[job_id].gpus.setdefault(gpu.index, GpuMeter())
                meter.peak_mib = max(meter.peak_mib, used)
                meter.shared = meter.shared or shared
                if util is not None:
                    meter.util_sum += min(util, 100.0)
                    meter.util_samples += 1
        for job_id, procs in by_job.items():
            # GPUs a job holds but NVML could not read (no NVML, a lost GPU) still count as held
            for index in {i for p in procs for i in p.job_gpus}:
                self.jobs[job_id].gpus.setdefault(index, GpuMeter())

    def finish(self, job_id: int) -> JobMeter | None:
        return self.jobs.pop(job_id, None)

    def to_json(self) -> dict[str, Any]:
        return {str(k): m.to_json() for k, m in self.jobs.items()}

    def restore(self, data: Mapping[str, Any]) -> None:
        for key, value in data.items():
            self.jobs.setdefault(int(key), JobMeter.from_json(value))
