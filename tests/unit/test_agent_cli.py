"""The agent loop: job ends from the epilog or from Slurm, stragglers, saved meters, no NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from slurm_liquid.agent.cli import Agent
from slurm_liquid.agent.gpus import GpuSample, NoGpuReader
from slurm_liquid.agent.procs import JobRef, Process
from slurm_liquid.config import AgentConfig
from slurm_liquid.ledger import Usage


class FixedReader:
    source = "nvml"
    problem = ""

    def __init__(self, used: float = 20000.0):
        self.used = used

    def sample(self) -> list[GpuSample]:
        return [GpuSample(0, "NVIDIA H100", "GPU-0", self.used, 81559.0, 75.0, ())]

    def close(self) -> None:
        pass


class BrokenReader(FixedReader):
    def sample(self) -> list[GpuSample]:
        raise RuntimeError("GPU has fallen off the bus")


class ListRecorder:
    node = "gpu01"

    def __init__(self) -> None:
        self.records: list[tuple[int, Usage, str]] = []

    def record(self, job_id: int, usage: Usage, nodelist: str = "") -> None:
        self.records.append((job_id, usage, nodelist))


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def process(job: int, gpus: tuple[int, ...] = (0,)) -> Process:
    return Process(pid=100 + job, uid=1001, comm="python", job=JobRef(job, "batch", "slurmstepd"), rss_kib=2048,
                   cpu_ticks=0, job_gpus=gpus, shards=0, nodelist="gpu01")


def make_agent(tmp_path: Path, jobs: dict[int, Process], reader=None, running=None) -> tuple[Agent, ListRecorder, Clock]:
    clock, recorder = Clock(), ListRecorder()
    cfg = AgentConfig(spool_dir=str(tmp_path), end_grace_s=30)
    agent = Agent(cfg, reader or FixedReader(), recorder, scan=lambda: dict(jobs), job_running=running, clock=clock)
    agent.ended_dir.mkdir(parents=True)
    return agent, recorder, clock


def drain(agent: Agent) -> None:
    agent._records.put(None)
    agent.record_forever()


def test_epilog_file_ends_the_job_and_its_usage_is_recorded(tmp_path: Path) -> None:
    jobs = {101: process(1)}
    agent, recorder, clock = make_agent(tmp_path, jobs)
    agent.sample()
    (agent.ended_dir / "1").write_text("gpus=0,3 nodes=gpu[01-02] other=x\n")
    (agent.ended_dir / "not-a-job").touch()
    agent.finish(agent.ended_jobs(clock.now))
    drain(agent)
    # the epilog says the job also held GPU 3 (idle) and ran on two nodes
    assert [(j, u.peak_mib, u.gpus, u.by, nodes) for j, u, nodes in recorder.records] == \
        [(1, 20000, 2, "nvml", "gpu[01-02]")]
    assert list(agent.ended_dir.iterdir()) == []


def test_stragglers_of_an_ended_job_do_not_start_a_new_meter_but_a_later_run_does(tmp_path: Path) -> None:
    jobs = {101: process(1)}
    agent, recorder, clock = make_agent(tmp_path, jobs)
    agent.sample()
    agent.finish({1: {}})
    clock.now += 1
    agent.sample()                              # the process is still there for a moment
    assert 1 not in agent.meters.jobs
    clock.now += 60                             # a requeued run on this node, later
    agent.sample()
    assert 1 in agent.meters.jobs


def test_a_vanished_job_is_ended_only_when_slurm_says_it_is_not_running(tmp_path: Path) -> None:
    jobs = {101: process(1)}
    answers: dict[int, bool | None] = {1: None}
    asked: list[int] = []
    agent, recorder, clock = make_agent(tmp_path, jobs, running=lambda j: asked.append(j) or answers[j])
    agent.sample()
    jobs.clear()
    clock.now += 20
    assert agent.ended_jobs(clock.now) == {} and asked == []     # not quiet long enough to ask
    clock.now += 11
    assert agent.ended_jobs(clock.now) == {}             # Slurm unreachable: never guess
    answers[1] = True
    clock.now += 31
    assert agent.ended_jobs(clock.now) == {}             # between steps of a multi-node job
    assert agent.ended_jobs(clock.now + 5) == {} and asked == [1, 1]   # asked once per grace period
    answers[1] = False
    clock.now += 31
    assert agent.ended_jobs(clock.now) == {1: {}}


def test_jobs_without_gpus_are_not_recorded(tmp_path: Path) -> None:
    agent, recorder, clock = make_agent(tmp_path, {101: process(1, gpus=())}, reader=NoGpuReader("no NVML"))
    agent.sample()
    agent.finish({1: {}})
    drain(agent)
    assert recorder.records == []


def test_without_nvml_a_gpu_job_is_recorded_with_host_measurements(tmp_path: Path) -> None:
    agent, recorder, clock = make_agent(tmp_path, {101: process(1, gpus=(0, 1))}, reader=NoGpuReader("no NVML"))
    agent.sample()
    agent.finish({1: {}})
    drain(agent)
    (_, usage, _), = recorder.records
    assert (usage.by, usage.gpus, usage.peak_mib, usage.host_mib) == ("none", 2, 0, 2)


def test_a_failing_gpu_read_is_said_once_and_sampling_goes_on(tmp_path: Path, caplog) -> None:
    agent, recorder, clock = make_agent(tmp_path, {101: process(1)}, reader=BrokenReader())
    for _ in range(3):
        agent.sample()
    assert agent.meters.jobs[1].samples == 3
    assert sum("fallen off the bus" in r.message for r in caplog.records) == 1


def test_meters_are_saved_and_restored_but_not_from_a_file_someone_else_owns(tmp_path: Path) -> None:
    agent, _, _ = make_agent(tmp_path, {101: process(1)})
    agent.sample()
    state = tmp_path / "state" / "meters.json"
    agent.save(state)
    assert state.stat().st_mode & 0o777 == 0o600
    fresh, _, _ = make_agent(tmp_path / "b", {})
    fresh.restore(state)
    assert fresh.meters.jobs[1].gpus[0].peak_mib == 20000
    if os.geteuid() == 0:
        os.chown(state, 1234, 1234)
        other, _, _ = make_agent(tmp_path / "c", {})
        other.restore(state)
        assert other.meters.jobs == {}
    state.write_text("{not json")
    broken, _, _ = make_agent(tmp_path / "d", {})
    if os.geteuid() == 0:
        os.chown(state, 0, 0)
    broken.restore(state)                       # a corrupt file is ignored with a warning
    assert broken.meters.jobs == {}


def test_once_without_nvml_prints_the_problem_and_exits_zero(tmp_path: Path) -> None:
    config = tmp_path / "liquid.toml"
    config.write_text('[agent]\ngpu_source = "nvml"\nrecord = "off"\n')
    out = subprocess.run([sys.executable, "-m", "slurm_liquid", "agent", "--config", str(config), "--once"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    snapshot = json.loads(out.stdout)
    # this machine has no NVIDIA driver: the agent says why once and measures what it can
    assert snapshot["gpu_source"] == "none" and "NVML" in snapshot["problem"]
    assert len(out.stderr.strip().splitlines()) == 1 and "NVML unavailable" in out.stderr


def test_an_ended_job_not_yet_recorded_survives_a_restart_and_is_recorded_once(tmp_path: Path) -> None:
    agent, recorder, clock = make_agent(tmp_path, {101: process(1)})
    agent.sample()
    agent.finish({1: {"gpus": "0"}})           # handed over; the agent dies before recording it
    state = tmp_path / "state.json"
    agent.save(state)
    again, recorder2, _ = make_agent(tmp_path / "b", {})
    again.restore(state)
    drain(again)
    assert [(j, u.peak_mib) for j, u, _ in recorder2.records] == [(1, 20000)]
    assert again.unrecorded == {}
    again.save(state)                           # once recorded, a further restart records nothing
    third, recorder3, _ = make_agent(tmp_path / "c", {})
    third.restore(state)
    drain(third)
    assert recorder3.records == []
