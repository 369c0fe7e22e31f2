"""Which GPUs (and GPU shares) a job holds on this node, from Slurm's view only.

A job's own processes can set any environment they like: a SLURM_JOB_GPUS naming another job's
GPU made that GPU look shared, and its holder was then charged only its processes' memory (a
60000 MiB peak recorded as 20000). So the agent takes a job's GPUs from what users cannot write:

1. the job's cgroup v1 devices allow-list (`devices.list`, root's), where it is a list: with
   ConstrainDevices the GPUs a job may open are `c 195:<minor>` lines. Where devices are not
   constrained, or constrained by denying only the other GPUs (the list then reads `a *:* rwm`),
   or on cgroup v2 (an eBPF program, nothing to read), it tells nothing and the next source counts;
2. slurmctld's allocation: the node's GRES with device indices (`squeue --json` gres_detail, what
   `scontrol show job -d` prints as `GRES=gpu:h100:2(IDX:0-1)`), asked once per job and cached;
   the shares (`shard`) and the job's node list always come from here;
3. at the job's end, the node Epilog's drop file (the GPUs slurmd gave the Epilog, cli.py).

A job none of them has answered for yet holds no GPU as far as the meters know: its processes are
still charged for what NVML sees them use, but it cannot make another job's GPU look shared.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import hostlist

from slurm_liquid.errors import LiquidError
from slurm_liquid.slurm.parse import MAX_DEVICE_INDEX, gres_indices

log = logging.getLogger(__name__)

NVIDIA_MAJOR = 195          # /dev/nvidiaN are char 195:N; 195:254 is nvidia-modeset, 195:255 nvidiactl
RETRY_S = 60.0              # a job Slurm did not answer for is asked again after this long
MAX_ASK = 64                # jobs asked about in one Slurm call (one call per sample at most)
MAX_LIST_BYTES = 64 * 1024

# {job id: {node: GRES detail}} for the given jobs; raises LiquidError when Slurm does not answer
Lookup = Callable[[list[int]], Mapping[int, Mapping[str, str]]]


@dataclass(frozen=True)
class Allocation:
    gpus: tuple[int, ...]       # absolute GPU indices on this node (device minor numbers)
    shards: int = 0             # GPU shares (shard GRES) on this node; 0: whole GPUs
    nodelist: str = ""          # the job's nodes as Slurm names them, "" when unknown
    via: str = ""               # where the GPUs came from: "cgroup-devices", "slurm" or "epilog"


def gpus_from_devices_list(text: str) -> tuple[int, ...] | None:
    """The GPU minors a cgroup v1 `devices.list` allows, or None when the list allows every device
    (`a *:* rwm`: nothing constrained, or only denials, which the kernel does not list)."""
    gpus: set[int] = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) != 3:
            continue
        kind, numbers, _ = words
        if kind == "a":
            return None
        major, _, minor = numbers.partition(":")
        if kind != "c" or major not in (str(NVIDIA_MAJOR), "*"):
            continue
        if minor == "*":
            return None                 # every NVIDIA device: says nothing about which GPU
        if minor.isascii() and minor.isdigit() and len(minor) <= 4 and int(minor) <= min(MAX_DEVICE_INDEX, 253):
            gpus.add(int(minor))
    return tuple(sorted(gpus))


def gpus_from_epilog(text: str) -> tuple[int, ...]:
    """The GPU indices of the Epilog's `gpus=` (slurmd's SLURM_JOB_GPUS: `0,1`); other words are ignored."""
    found = {int(i) for i in text.split(",")[:MAX_DEVICE_INDEX + 1]
             if i.isascii() and i.isdigit() and len(i) <= 4 and int(i) <= MAX_DEVICE_INDEX}
    return tuple(sorted(found))


def from_gres_detail(detail: str, nodelist: str = "") -> Allocation:
    """A node's allocation from its GRES detail ('gpu:h100:2(IDX:0-1)'); LiquidError when unreadable."""
    gpus, _ = gres_indices(detail, "gpu")
    shard_gpus, shards = gres_indices(detail, "shard")
    return Allocation(tuple(sorted({*gpus, *shard_gpus})), shards, nodelist, "slurm")


class Allocations:
    """Each running job's allocation on this node, learnt once per job (see the module doc)."""

    def __init__(self, node: str, lookup: Lookup | None, cgroup_root: Path = Path("/sys/fs/cgroup"),
                 clock: Callable[[], float] = time.monotonic):
        self.node = node
        self.lookup = lookup
        self.cgroup_root = cgroup_root
        self.clock = clock
        self.jobs: dict[int, Allocation] = {}
        self._devices: dict[int, tuple[int, ...] | None] = {}
        self._asked_at: dict[int, float] = {}       # jobs Slurm has not answered for, and when asked
        self._answered: set[int] = set()            # jobs Slurm has answered for: never asked again
        self.problem = ""                           # the last reason Slurm gave no answer

    def get(self, job_id: int) -> Allocation | None:
        return self.jobs.get(job_id)

    def forget(self, job_id: int) -> None:
        for table in (self.jobs, self._devices, self._asked_at):
            table.pop(job_id, None)
        self._answered.discard(job_id)

    def refresh(self, devices_cgroups: Mapping[int, str]) -> None:
        """Learn the allocation of jobs seen for the first time ({job id: its devices cgroup, or ""}):
        their devices list now, and at most one Slurm call for those Slurm has not answered for."""
        for job_id, directory in devices_cgroups.items():
            if job_id not in self._devices:
                self._devices[job_id] = self._read_devices(directory) if directory else None
                if self._devices[job_id] is not None and job_id not in self.jobs:
                    self.jobs[job_id] = Allocation(self._devices[job_id], via="cgroup-devices")
        now = self.clock()
        ask = sorted(j for j in devices_cgroups
                     if j not in self._answered and now - self._asked_at.get(j, -RETRY_S) >= RETRY_S)[:MAX_ASK]
        if not ask or self.lookup is None:
            return
        for job_id in ask:
            self._asked_at[job_id] = now
        try:
            answer = self.lookup(ask)
        except LiquidError as exc:          # Slurm unreachable or slow: ask again in RETRY_S
            self.problem = str(exc)
            return
        self.problem = ""
        for job_id in ask:
            self._answered.add(job_id)
            self._asked_at.pop(job_id, None)
            details = answer.get(job_id)
            if details:
                self._learn(job_id, details)
            elif job_id not in self.jobs:   # no GRES (or no longer running): it holds no GPU
                self.jobs[job_id] = Allocation((), 0, "", "slurm")

    def _learn(self, job_id: int, details: Mapping[str, str]) -> None:
        try:
            nodelist = hostlist.collect_hostlist(sorted(details))
        except (hostlist.BadHostlist, ValueError):
            nodelist = ""
        mine = details.get(self.node)
        if mine is None:
            log.warning("job %d: Slurm allocated it on %s, not on %s (is this host's Slurm node name %s?)",
                        job_id, nodelist or "other nodes", self.node, self.node)
            self.jobs[job_id] = Allocation((), 0, nodelist, "slurm")
            return
        try:
            found = from_gres_detail(mine, nodelist)
        except LiquidError as exc:
            log.warning("job %d: %s", job_id, exc)
            return
        devices = self._devices.get(job_id)
        if devices is not None and devices != found.gpus:
            # two root views that disagree: the device list is what the job can open here
            log.warning("job %d: its devices cgroup allows GPUs %s, Slurm says %s; using the cgroup's",
                        job_id, list(devices), list(found.gpus))
            found = Allocation(devices, found.shards, nodelist, "cgroup-devices")
        self.jobs[job_id] = found

    def _read_devices(self, directory: str) -> tuple[int, ...] | None:
        path = self.cgroup_root / "devices" / directory.lstrip("/") / "devices.list"
        try:
            with open(path, "rb") as handle:
                text = handle.read(MAX_LIST_BYTES).decode("ascii", "replace")
        except OSError:
            return None
        return gpus_from_devices_list(text)

    def keep_only(self, job_ids: Iterable[int]) -> None:
        """Drop what is known about jobs no longer measured."""
        alive = set(job_ids)
        for job_id in [j for j in {*self.jobs, *self._devices, *self._asked_at, *self._answered} if j not in alive]:
            self.forget(job_id)
