"""Typed views of what Slurm reports, the same for every Slurm version we support."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from slurm_liquid.slurm.errors import SlurmError


@dataclass(frozen=True, order=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    @classmethod
    def parse(cls, text: str) -> "SlurmVersion":
        """'slurm 24.11.5', '24.11.5' or '22.05.8' -> SlurmVersion; SlurmError when it names none."""
        words = text.strip().split()
        match = re.match(r"([0-9]{1,5})(?:\.([0-9]{1,5}))?(?:\.([0-9]{1,5}))?", words[-1] if words else "")
        if not match:
            shown = text.strip()[:60]
            raise SlurmError(f"cannot read a Slurm version from {shown!r}")
        return cls(*(int(part or 0) for part in match.groups()))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


@dataclass(frozen=True)
class Job:
    """A job as squeue (live) or sacct (accounting) reports it.

    `gpus` is what the job holds when it has an allocation, else what it asked for.
    `state` is the base state (PENDING, RUNNING, COMPLETED, ...); `state_flags` holds the
    extra flags newer Slurm versions list beside it (REQUEUED, COMPLETING, ...).
    As in Slurm's own options, `cpus` counts the whole job (`cpus_per_node` divides it), while
    `mem_mib` is per node (--mem, or --mem-per-cpu times the CPUs of a node; None when unknown
    or --mem=0, a whole node). `features` is the job's --constraint expression as Slurm prints it.
    """

    job_id: int
    name: str
    user: str
    state: str
    partition: str = ""
    reason: str = ""
    state_flags: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    num_nodes: int = 0
    cpus: int = 0
    mem_mib: int | None = None
    gpus: int = 0
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    shards: int = 0
    comment: str = ""
    admin_comment: str = ""
    system_comment: str = ""
    priority: int | None = None
    held: bool = False
    restarts: int = 0
    exit_code: int | None = None
    submit_time: datetime | None = None
    eligible_time: datetime | None = None   # a pending job's begin time (--begin, or a hold lease)
    required_nodes: tuple[str, ...] = ()    # ReqNodeList
    start_time: datetime | None = None
    end_time: datetime | None = None
    time_limit_s: int | None = None
    work_dir: str = ""
    source: str = "squeue"
    features: str = ""                      # --constraint, e.g. 'a100&ib' or '[rack1|rack2]'

    @property
    def cpus_per_node(self) -> int:
        """CPUs on each node (rounded up when they do not divide evenly)."""
        return -(-self.cpus // max(self.num_nodes, 1))

    @property
    def is_pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def is_running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES


FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                             "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})


@dataclass(frozen=True)
class Node:
    """A compute node: what it has, what is allocated, and whether it can take work."""

    name: str
    state: str
    state_flags: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    cpus: int = 0
    cpus_alloc: int = 0
    mem_mib: int = 0
    mem_alloc_mib: int = 0
    gpus: int = 0
    gpus_alloc: int = 0
    gpu_type: str | None = None
    shards: int = 0
    shards_alloc: int = 0
    reason: str = ""
    version: str = ""
    features: tuple[str, ...] = ()          # active features (what --constraint is matched against)

    @property
    def available(self) -> bool:
        """Up and schedulable: not down, drained, draining, failing or powered off."""
        return self.state not in UNAVAILABLE_NODE_STATES and UNAVAILABLE_NODE_STATES.isdisjoint(self.state_flags)

    @property
    def gpus_free(self) -> int:
        return max(self.gpus - self.gpus_alloc, 0) if self.available else 0


UNAVAILABLE_NODE_STATES = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "POWERED_DOWN",
    "POWERING_DOWN", "RESERVED", "MAINTENANCE", "FUTURE", "INVALID", "UNKNOWN"})


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...] = ()
    state: str = "UP"
    is_default: bool = False
    max_time_s: int | None = None
    total_gpus: int = 0
    flags: tuple[str, ...] = field(default=())
