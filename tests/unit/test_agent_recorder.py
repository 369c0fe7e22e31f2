"""The recorder: waits for the job's end in accounting, takes turns across nodes, merges, verifies."""

from __future__ import annotations

from dataclasses import replace

from slurm_liquid.agent.recorder import Recorder
from slurm_liquid.ledger import Tag, Usage
from slurm_liquid.slurm.errors import SlurmCommandError
from slurm_liquid.slurm.models import Job

TAG = "liquid/1 state=placed placed=gpu[01-02]:2"


class FakeAccounting:
    """sacct / sacctmgr for one job: a script of states the job's latest run goes through."""

    def __init__(self, states: list[str], admin_comment: str = TAG):
        self.states = states
        self.job = Job(job_id=5, name="train", user="alice", state=states[0], admin_comment=admin_comment,
                       source="sacct")
        self.reads = 0
        self.writes: list[str] = []
        self.fail_writes = 0
        self.other_node_writes: list[str] = []     # lines "another node" writes right after ours

    def accounting(self, job_ids=None, since=None, until=None):
        self.reads += 1
        state = self.states[min(self.reads - 1, len(self.states) - 1)]
        return [replace(self.job, state=state)]

    def set_recorded_admin_comment(self, job_id: int, text: str) -> None:
        if self.fail_writes:
            self.fail_writes -= 1
            raise SlurmCommandError(["sacctmgr"], "failed with exit code 1", 1, "slurmdbd not reachable")
        self.writes.append(text)
        self.job = replace(self.job, admin_comment=text)
        if self.other_node_writes:
            self.job = replace(self.job, admin_comment=self.other_node_writes.pop(0))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def usage(node: str, peak: int = 30000, gpus: int = 2) -> Usage:
    return Usage(by="nvml", gpus=gpus, peak_mib=peak, util=80.0, host_mib=9000, cpus=2.0, seconds=60,
                 samples=60, nodes=(node,))


def recorder(client: FakeAccounting, node: str = "gpu01", **kw) -> tuple[Recorder, Clock]:
    clock = Clock()
    return Recorder(client, node, "sacct", clock=clock, sleep=clock.sleep, **kw), clock


def test_waits_until_the_run_has_ended_in_accounting_then_keeps_the_tag() -> None:
    client = FakeAccounting(["RUNNING", "RUNNING", "COMPLETED"])
    rec, clock = recorder(client)
    line = rec.record(5, usage("gpu01"))
    assert client.reads >= 3 and len(client.writes) == 1 and clock.now >= 2
    assert Tag.parse(line).placed == "gpu[01-02]:2"
    assert Usage.parse(line) == usage("gpu01")


def test_gives_up_when_the_end_never_reaches_accounting() -> None:
    client = FakeAccounting(["RUNNING"])
    rec, clock = recorder(client, ended_wait_s=10)
    assert rec.record(5, usage("gpu01")) is None
    assert client.writes == [] and 10 <= clock.now < 12


def test_second_node_waits_for_the_first_then_merges() -> None:
    client = FakeAccounting(["COMPLETED"])
    first_done = f"{TAG}; {usage('gpu01').render()}"
    rec, clock = recorder(client, node="gpu02", order_wait_s=30)
    # gpu01 records after 3 s: the accounting read then shows its segment
    original = client.accounting

    def accounting(*a, **k):
        if clock.now >= 3 and not client.writes and "gpu01" not in client.job.admin_comment:
            client.job = replace(client.job, admin_comment=first_done)
        return original(*a, **k)

    client.accounting = accounting
    line = rec.record(5, usage("gpu02", peak=31000, gpus=2), nodelist="gpu[01-02]")
    merged = Usage.parse(line)
    assert merged.nodes == ("gpu01", "gpu02") and merged.gpus == 4 and merged.peak_mib == 31000
    assert 3 <= clock.now < 30 and len(client.writes) == 1


def test_a_silent_earlier_node_is_waited_for_only_order_wait_s() -> None:
    client = FakeAccounting(["COMPLETED"])
    rec, clock = recorder(client, node="gpu02", order_wait_s=5)
    line = rec.record(5, usage("gpu02"), nodelist="gpu[01-02]")
    assert Usage.parse(line).nodes == ("gpu02",) and 5 <= clock.now < 7


def test_first_node_does_not_wait() -> None:
    client = FakeAccounting(["COMPLETED"])
    rec, clock = recorder(client, node="gpu01", order_wait_s=30)
    rec.record(5, usage("gpu01"), nodelist="gpu[01-02]")
    assert clock.now == 0


def test_a_write_lost_to_another_node_is_merged_again() -> None:
    client = FakeAccounting(["COMPLETED"])
    # right after our write, gpu03 (which read before us) writes its own segment over ours
    client.other_node_writes = [f"{TAG}; {usage('gpu03').render()}"]
    rec, _ = recorder(client, node="gpu01")
    line = rec.record(5, usage("gpu01"))
    assert len(client.writes) == 2 and Usage.parse(line).nodes == ("gpu01", "gpu03")


def test_failed_writes_are_retried_and_then_given_up() -> None:
    client = FakeAccounting(["COMPLETED"])
    client.fail_writes = 1
    rec, _ = recorder(client)
    assert rec.record(5, usage("gpu01")) is not None and len(client.writes) == 1
    client = FakeAccounting(["COMPLETED"])
    client.fail_writes = 5
    rec, _ = recorder(client)
    assert rec.record(5, usage("gpu01")) is None and client.writes == []


def test_log_and_off_modes_touch_no_accounting() -> None:
    for mode in ("log", "off"):
        client = FakeAccounting(["COMPLETED"])
        rec = Recorder(client, "gpu01", mode)
        assert rec.record(5, usage("gpu01")) is None
        assert client.reads == 0 and client.writes == []


def test_under_estimates_are_counted_once_by_the_first_node() -> None:
    """A peak above the record's est= counts (liquid_agent_under_estimates_total); a later node does not."""
    for comment, peak, node, expected in (
            ("liquid/1 mode=advise est=2xh100-80gb:20G | model=x", 30000, "gpu01", 1),   # 30000 > 20480 MiB
            ("liquid/1 mode=advise est=2xh100-80gb:40G | model=x", 30000, "gpu01", 0),
            ("liquid/1 mode=advise est=2xh100-80gb:20G | model=x", 30000, "gpu02", 0),   # not the first node
            ("my own text", 30000, "gpu01", 0)):                                          # no estimate
        client = FakeAccounting(["COMPLETED"])
        client.job = replace(client.job, comment=comment)
        rec, _ = recorder(client, node=node, order_wait_s=0)
        assert rec.record(5, usage(node, peak=peak), nodelist="gpu[01-02]") is not None
        assert rec.under_estimated == expected, comment
