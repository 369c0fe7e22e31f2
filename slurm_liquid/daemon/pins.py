"""What a daemon pin promises: the GPUs of pending jobs this daemon placed, until the pin lapses.

The daemon starts a job by pinning it (ReqNodeList) to the nodes it chose, and a resize requeues its
job pinned to the new nodes. Until Slurm starts the job, `scontrol show nodes` shows those GPUs as
free; the placement pass and the elastic slot both count them as taken, or a second job is placed on
them and waits behind the first (a resize planned onto a node where a requeued job was about to
restart stayed pending there until that job ended). One meaning, used by both: a pin holds for one
lease from placement, and after a resize also for the restart penalty and the capped checkpoint
grace (Slurm restarts a requeued job only once its old credential has expired, and its new nodes may
be held by a job resized in the same slot that is still checkpointing). A pin Slurm has not honoured
by then is blocked by something the daemon did not see; the pass unpins it and its promise lapses.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from slurm_liquid.config import Config
from slurm_liquid.ledger import Tag, TagState
from slurm_liquid.slurm import Job, Node


def pin_window_s(tag: Tag, config: Config) -> float:
    """How long after placement a pin of this daemon is expected to be honoured."""
    elastic = config.elastic
    resized = "change" in tag.extra
    return config.daemon.lease_s + (elastic.restart_penalty_s + elastic.max_grace_s if resized else 0.0)


def pin_lapsed(job: Job, tag: Tag, now: float, config: Config) -> bool:
    """Whether the daemon's pin of pending `job` is past its window, counted from placement or from
    when Slurm let the job become eligible, whichever is later (a pin without a believable time has
    lapsed)."""
    at = tag.placed_at(now)
    if at is None:
        return True
    since = max(at, job.eligible_time.timestamp() if job.eligible_time else 0.0)
    return now - since > pin_window_s(tag, config)


def promised(jobs: Iterable[Job], nodes: Mapping[str, Node], now: float, config: Config,
             extra: Mapping[str, int] | None = None) -> dict[str, int]:
    """GPUs per node that pending jobs pinned by this daemon will take when Slurm starts them, plus
    `extra` (what resizes in flight will take beyond what their jobs hold)."""
    taken: dict[str, int] = dict(extra or {})
    for job in jobs:
        if not job.is_pending:
            continue
        tag = Tag.parse(job.admin_comment)
        if not (tag and tag.state == TagState.PLACED):
            continue
        if pin_lapsed(job, tag, now, config):
            continue
        placement = tag.placement()
        if placement is None:
            continue
        if placement.shards:
            name = next(iter(placement.nodes))
            if name in nodes and not nodes[name].shards_alloc:
                taken[name] = taken.get(name, 0) + 1   # a share opens one GPU
            continue
        for name, gpus in placement.nodes.items():
            taken[name] = taken.get(name, 0) + gpus
    return taken
