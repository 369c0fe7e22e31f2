"""Hostile inputs shared by the fuzz tests and benchmarks/robustness: what a user (or a broken Slurm)
can put in front of the daemon. Strategies for hypothesis and plain random generators for the
benchmark draw from the same pools."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from hypothesis import strategies as st

from slurm_liquid.slurm import Job, Node

NOW = 1_700_000_000.0
WORDS = ["liquid/1", "liquid:", "state=held", "state=placed", "state=shadow", "placed=gpu01:4", "placed=gpu[0-99999999]:4",
         "at=99999999999", "at=-1", "elastic=4:4", "elastic=1:99999", "sig=USR1", "grace=86400", "model=resnet50",
         "batch=0", "spec=zz", ";", "||", " | ", "=", "\x00", "\udcff", "é", "\n", "liquid-used/1", "gpus=1e400",
         "#LIQUID", "epoch=x", "signal=USR1@86400", "model=" + "x" * 300]
TEXT = st.one_of(st.text(max_size=60), st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join))
HUGE = [0, 1, -1, 2 ** 31, 10 ** 400 // 10 ** 380, 4096, 10 ** 12]


def at(offset: float | None) -> datetime | None:
    if offset is None:
        return None
    return datetime.fromtimestamp(NOW + offset, tz=timezone.utc)


def healthy_held(job_id: int = 1) -> Job:
    """The job that must still be placed in the same pass as the poison."""
    return Job(job_id, "ok", "alice", "PENDING", partition="gpu", gpus=1, gpu_type="h100", cpus=1, mem_mib=1000,
               comment="liquid/1 mode=adjust | model=resnet50 batch-size=32", admin_comment="liquid/1 state=held",
               submit_time=at(-5), eligible_time=at(50))


def nodes() -> list[Node]:
    return [Node(f"gpu0{i}", "IDLE", partitions=("gpu",), cpus=8, mem_mib=16000, gpus=4, gpu_type="h100", shards=16)
            for i in range(1, 5)]


@st.composite
def hostile_jobs(draw) -> Job:
    state = draw(st.sampled_from(["PENDING", "RUNNING", "COMPLETED", "", "WEIRD"]))
    gpus = draw(st.sampled_from(HUGE))
    return Job(
        job_id=draw(st.integers(2, 10 ** 6)), name=draw(TEXT), user=draw(st.sampled_from(["alice", "bob", "", "x\x00y"])),
        state=state, partition=draw(st.sampled_from(["gpu", "", "other", "gpu,other"])),
        nodes=tuple(draw(st.lists(st.sampled_from(["gpu01", "gpu02", "gpu99", ""]), max_size=3))),
        num_nodes=draw(st.sampled_from(HUGE)), cpus=draw(st.sampled_from(HUGE)),
        mem_mib=draw(st.none() | st.sampled_from(HUGE)), gpus=gpus,
        gpus_per_node=draw(st.none() | st.sampled_from(HUGE)), gpu_type=draw(st.none() | st.sampled_from(["h100", "a100", ""])),
        shards=draw(st.sampled_from([0, 0, 1, 64, 10 ** 6])), comment=draw(TEXT), admin_comment=draw(TEXT),
        held=draw(st.booleans()), restarts=draw(st.sampled_from(HUGE)),
        submit_time=at(draw(st.none() | st.sampled_from([-5.0, -1e6, 1e6]))),
        eligible_time=at(draw(st.none() | st.sampled_from([-5.0, 50.0, 1e6]))),
        start_time=at(draw(st.none() | st.sampled_from([-3600.0, 1e6]))),
        required_nodes=tuple(draw(st.lists(st.sampled_from(["gpu01", "gpu99"]), max_size=2))),
        time_limit_s=draw(st.none() | st.sampled_from(HUGE)))


def random_job(rng: random.Random) -> Job:
    """One hostile job from a plain Random (for the benchmark's counted runs)."""
    return _random_job(rng)


def _random_text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8)))
    return "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0, 0x10FFFF)])) for _ in range(rng.randint(0, 40)))


def _random_job(rng: random.Random) -> Job:
    return Job(rng.randint(2, 10 ** 6), _random_text(rng), rng.choice(["alice", "bob", ""]),
               rng.choice(["PENDING", "RUNNING", "COMPLETED", "WEIRD"]), partition=rng.choice(["gpu", "", "x"]),
               nodes=tuple(rng.sample(["gpu01", "gpu02", "gpu99"], rng.randint(0, 2))), num_nodes=rng.choice(HUGE),
               cpus=rng.choice(HUGE), mem_mib=rng.choice([None, *HUGE]), gpus=rng.choice(HUGE),
               gpus_per_node=rng.choice([None, *HUGE]), gpu_type=rng.choice([None, "h100", "a100"]),
               shards=rng.choice([0, 1, 64, 10 ** 6]), comment=_random_text(rng), admin_comment=_random_text(rng),
               held=rng.random() < 0.3, restarts=rng.choice(HUGE), submit_time=at(rng.choice([None, -5.0, 1e6])),
               eligible_time=at(rng.choice([None, 50.0, 1e6])), start_time=at(rng.choice([None, -3600.0])),
               required_nodes=tuple(rng.sample(["gpu01", "gpu99"], rng.randint(0, 2))),
               time_limit_s=rng.choice([None, *HUGE]))


def random_report(rng: random.Random) -> object:
    """A progress report as a hostile user might write it."""
    values = [None, "x", 1e400 if rng.random() < 0.1 else float("nan"), 10 ** 400, -5, True, [], {}, 3, 2.5, 10 ** 18]
    if rng.random() < 0.1:
        return rng.choice([[], "x", None, 5])
    return {k: rng.choice(values) for k in ("step", "total", "epoch", "checkpoint_time", "samples_per_s")
            if rng.random() < 0.8}
