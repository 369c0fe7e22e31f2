"""The agent loop: job ends from the epilog or from Slurm, stragglers, saved meters, no NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from slurm_liquid.agent.alloc import Allocations
from slurm_liquid.agent.cli import Agent
from slurm_liquid.agent.gpus import GpuProcess, GpuSample, NoGpuReader
from slurm_liquid.agent.procs import JobRef, Process, scan
from slurm_liquid.config import AgentConfig
from slurm_liquid.ledger import Usage
from slurm_liquid.slurm.errors import SlurmError
from tests.unit.test_agent_procs import add, env


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


def process(job: int) -> Process:
    return Process(pid=100 + job, uid=1001, comm="python", job=JobRef(job, "batch", "slurmstepd"), rss_kib=2048,
                   cpu_ticks=0)


class Slurm:
    """What slurmctld says each job holds per node (`gres_detail`), and how often it was asked."""

    def __init__(self, held: dict[int, dict[str, str]]):
        self.held = held
        self.asked: list[list[int]] = []

    def __call__(self, job_ids: list[int]) -> dict[int, dict[str, str]]:
        self.asked.append(job_ids)
        return {j: self.held[j] for j in job_ids if j in self.held}


def make_agent(tmp_path: Path, jobs: dict[int, Process], reader=None, running=None,
               held: dict[int, dict[str, str]] | None = None) -> tuple[Agent, ListRecorder, Clock]:
    clock, recorder = Clock(), ListRecorder()
    cfg = AgentConfig(spool_dir=str(tmp_path), end_grace_s=30)
    slurm = Slurm({1: {"gpu01": "gpu:h100:1(IDX:0)"}} if held is None else held)
    agent = Agent(cfg, reader or FixedReader(), recorder, scan=lambda: dict(jobs), job_running=running, clock=clock,
                  allocations=Allocations("gpu01", slurm, clock=clock))
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
    agent, recorder, clock = make_agent(tmp_path, {101: process(1)}, reader=NoGpuReader("no NVML"), held={})
    agent.sample()
    agent.finish({1: {}})
    drain(agent)
    assert recorder.records == []


def test_without_nvml_a_gpu_job_is_recorded_with_host_measurements(tmp_path: Path) -> None:
    agent, recorder, clock = make_agent(tmp_path, {101: process(1)}, reader=NoGpuReader("no NVML"),
                                        held={1: {"gpu01": "gpu:h100:2(IDX:0-1)"}})
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


# --- finding: a user's environment must not change another user's record --------------------

class TwoGpus(FixedReader):
    """GPU 0: alice's process (job 7); GPU 1: bob's (job 8), 20000 MiB of it his process's, 60000 the card's."""

    def sample(self) -> list[GpuSample]:
        return [GpuSample(0, "NVIDIA H100", "GPU-0", 10000.0, 81559.0, 50.0, (GpuProcess(70, 9000.0),)),
                GpuSample(1, "NVIDIA H100", "GPU-1", 60000.0, 81559.0, 90.0, (GpuProcess(80, 20000.0),))]


def alice_and_bob(root: Path) -> Path:
    """A /proc with alice's job 7 and bob's job 8, each in its job cgroup; alice's process claims
    bob's GPU through SLURM_JOB_GPUS (anyone can set it)."""
    procs_root = root / "proc"
    procs_root.mkdir()
    add(procs_root, 70, uid=1001, cgroup="0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n",
        environ=env(SLURM_JOB_ID="7", SLURM_JOB_GPUS="0,1", SLURM_STEP_GPUS="0,1", SLURM_SHARDS_ON_NODE="1"))
    add(procs_root, 80, uid=1002, cgroup="0::/system.slice/slurmstepd.scope/job_8/step_0/user/task_0\n",
        environ=env(SLURM_JOB_ID="8", SLURM_JOB_GPUS="1"))
    return procs_root


def test_a_users_slurm_job_gpus_does_not_lower_another_users_peak(tmp_path: Path) -> None:
    root = alice_and_bob(tmp_path)
    cfg = AgentConfig(spool_dir=str(tmp_path / "spool"))
    agent = Agent(cfg, TwoGpus(), ListRecorder(), scan=lambda: scan(root), clock=Clock())
    agent.sample()
    bob = agent.meters.jobs[8].usage("nvml", "gpu01")
    assert (bob.peak_mib, bob.shared) == (60000, False)          # was 20000 and shared
    assert set(agent.meters.jobs[7].gpus) == {0}                 # alice's claim to GPU 1 counts for nothing


def test_with_slurms_allocation_each_job_is_charged_its_own_gpus(tmp_path: Path) -> None:
    root = alice_and_bob(tmp_path)
    slurm = Slurm({7: {"gpu01": "gpu:h100:1(IDX:0)"}, 8: {"gpu01": "gpu:h100:1(IDX:1)", "gpu02": "gpu:h100:1(IDX:3)"}})
    clock = Clock()
    cfg = AgentConfig(spool_dir=str(tmp_path / "spool"))
    agent = Agent(cfg, TwoGpus(), ListRecorder(), scan=lambda: scan(root), clock=clock,
                  allocations=Allocations("gpu01", slurm, clock=clock))
    for _ in range(3):
        agent.sample()
        clock.now += 5
    assert slurm.asked == [[7, 8]]                                # once per job, not per sample
    alice, bob = (agent.meters.jobs[j].usage("nvml", "gpu01") for j in (7, 8))
    assert (alice.gpus, alice.peak_mib, alice.shared) == (1, 10000, False)    # SLURM_SHARDS_ON_NODE ignored
    assert (bob.gpus, bob.peak_mib, bob.shared) == (1, 60000, False)
    assert agent.meters.jobs[8].nodelist == "gpu[01-02]"         # Slurm's, not SLURM_JOB_NODELIST


def test_a_job_claimed_only_through_the_environment_is_never_asked_about(tmp_path: Path) -> None:
    procs_root = tmp_path / "proc"
    procs_root.mkdir()
    for pid in range(100, 140):     # any user can start processes that say SLURM_JOB_ID=<anything>
        add(procs_root, pid, environ=env(SLURM_JOB_ID=str(pid * 1000)))
    slurm = Slurm({})
    agent, _, _ = make_agent(tmp_path, {})
    agent.scan = lambda: scan(procs_root)
    agent.allocations = Allocations("gpu01", slurm)
    agent.sample()
    assert slurm.asked == [] and agent.meters.jobs == {}


class SlowSlurm:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, job_ids: list[int]) -> dict[int, dict[str, str]]:
        self.calls += 1
        raise SlurmError("`squeue --json --jobs=1` did not answer within 5 s")


def test_slurm_not_answering_is_asked_again_only_after_a_while(tmp_path: Path) -> None:
    agent, _, clock = make_agent(tmp_path, {101: process(1)})
    slow = SlowSlurm()
    agent.allocations = Allocations("gpu01", slow, clock=clock)
    for _ in range(10):
        agent.step(clock.now)
        clock.now += 5
    assert slow.calls == 1 and agent.meters.jobs[1].samples == 10
    assert "did not answer" in agent.snapshot()["slurm_problem"]
    clock.now += 60
    agent.step(clock.now)
    assert slow.calls == 2


def test_any_exception_in_a_pass_is_counted_and_logged_once(tmp_path: Path, caplog) -> None:
    def broken_scan() -> dict[int, Process]:
        raise RuntimeError("something nobody thought of")

    agent, _, clock = make_agent(tmp_path, {})
    agent.scan = broken_scan
    agent.job_running = lambda job_id: 1 / 0
    agent.meters.update(0.0, {101: process(5)}, [])
    for _ in range(3):
        clock.now += 100
        agent.step(clock.now)
    assert agent.errors["sample"] == 3 and agent.errors["job state"] == 3
    assert sum("something nobody thought of" in r.message for r in caplog.records) == 1
    assert sum("ZeroDivisionError" in r.message for r in caplog.records) == 1


def test_a_bad_epilog_note_or_file_name_is_skipped(tmp_path: Path) -> None:
    agent, recorder, clock = make_agent(tmp_path, {101: process(1)})
    agent.sample()
    (agent.ended_dir / "1").write_bytes(b"gpus=0,99999999999999,\xff\xfe,3 nodes=gpu01\n" + b"x" * 100_000)
    (agent.ended_dir / ("9" * 200)).touch()
    (agent.ended_dir / "0").touch()
    assert agent.step(clock.now) == [1]
    drain(agent)
    assert [(j, u.gpus) for j, u, _ in recorder.records] == [(1, 2)]      # GPUs 0 and 3
    assert list(agent.ended_dir.iterdir()) == []


def test_a_pass_asks_slurm_a_bounded_number_of_questions(tmp_path: Path) -> None:
    jobs = {100 + j: process(j) for j in range(1, 21)}
    asked: list[int] = []
    agent, _, clock = make_agent(tmp_path, jobs, running=lambda j: asked.append(j) or True)
    agent.sample()
    jobs.clear()
    clock.now += 31
    assert agent.ended_jobs(clock.now) == {} and len(asked) == 4     # 4 x at most SLURM_WAIT_S
    agent.job_running = lambda j: asked.append(j) or None            # Slurm stops answering
    assert agent.ended_jobs(clock.now) == {} and len(asked) == 5     # one question, then next pass
    assert len(set(asked)) == 5
