"""One placement pass of the daemon, over an in-memory Slurm shaped like the test cluster.

The cluster: leaf1 over gpu01-02, leaf2 over gpu03-04, 4 H100s and 16 shards per node
(containers/slurm/topology.conf, gres.conf). The clock is injected; nothing sleeps.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import hostlist
import pytest
from hypothesis import given, strategies as st

from slurm_liquid.config import Config, parse
from slurm_liquid.daemon.admit import Admitter
from slurm_liquid.ledger.placed import format_placed, parse_placed
from slurm_liquid.estimate.api import estimate
from slurm_liquid.jobspec import parse_comment
from slurm_liquid.ledger import LedgerError, Record, Tag
from slurm_liquid.slurm import Job, Node, SlurmError
from slurm_liquid.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "containers" / "slurm" / "liquid-site.toml"
TOPOLOGY = Topology.from_topology_conf((ROOT / "containers" / "slurm" / "topology.conf").read_text())
NOW = 1_700_000_000.0
LEASE, MAX_HOLD, POLL = 60, 600, 5
SPEC = "model=bert-large batch-size=128"
RECORD = f"liquid/1 mode=adjust asked=gpu:h100:4 | {SPEC}"
HELD = "liquid/1 state=held"


def config(mode: str = "enforce", placer: str = "liquid") -> Config:
    return parse(f'[daemon]\nmode = "{mode}"\nplacer = "{placer}"\nlease_s = {LEASE}\nmax_hold_s = {MAX_HOLD}\n'
                 f'poll_s = {POLL}\nheartbeat_s = 2\nstale_after_s = 8\n[estimate]\nsite = "{SITE}"\n')


def at(offset_s: float) -> datetime:
    return datetime.fromtimestamp(NOW + offset_s, tz=timezone.utc)


def cluster(**used: int) -> list[Node]:
    """gpu01-04; `gpu01=2` means two of gpu01's GPUs are allocated."""
    return [Node(f"gpu0{i}", "MIXED" if used.get(f"gpu0{i}") else "IDLE", cpus=8, mem_mib=16000, gpus=4,
                 gpus_alloc=used.get(f"gpu0{i}", 0), gpu_type="h100", shards=16) for i in range(1, 5)]


def job(job_id: int, gpus: int = 4, *, per_node: int | None = None, num_nodes: int = 1, shards: int = 0,
        age: float = 5, lease_left: float = 50, comment: str = RECORD, admin: str = HELD,
        state: str = "PENDING", nodes: tuple[str, ...] = ()) -> Job:
    """A job submitted `age` s ago whose hold lease ends in `lease_left` s."""
    return Job(job_id, f"job{job_id}", "alice", state, nodes=nodes, num_nodes=num_nodes, gpus=gpus,
               gpus_per_node=per_node, gpu_type="h100" if gpus else None, shards=shards, comment=comment,
               admin_comment=admin, submit_time=at(-age), eligible_time=at(lease_left))


class FakeSlurm:
    """Jobs and nodes in memory; updates are recorded and applied to the jobs' comments."""

    def __init__(self, jobs: list[Job], nodes: list[Node], scripts: dict[int, str] | None = None,
                 failing: tuple[int, ...] = ()):
        self._jobs = {j.job_id: j for j in jobs}
        self._nodes = nodes
        self.scripts = scripts or {}
        self.failing = set(failing)
        self.updates: list[tuple[int, dict]] = []
        self.resizes: list[tuple] = []      # (job, GPUs per node, nodes, node names, GPU type)
        self.script_reads: list[int] = []

    def jobs(self, job_ids=None) -> list[Job]:
        return list(self._jobs.values())

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def topology(self) -> Topology:
        return TOPOLOGY

    def update_job(self, job_id: int, **fields) -> None:
        if job_id in self.failing:
            raise SlurmError(f"`scontrol update JobId={job_id}` exit code 1: Job is no longer pending")
        self.updates.append((job_id, fields))
        old = self._jobs[job_id]
        self._jobs[job_id] = replace(old, comment=fields.get("Comment", old.comment),
                                     admin_comment=fields.get("AdminComment", old.admin_comment))

    def update_jobs(self, job_ids, **fields) -> None:
        """As scontrol: every job it can update is updated; one that fails fails the command."""
        failures = []
        for job_id in job_ids:
            try:
                self.update_job(job_id, **fields)
            except SlurmError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def resize(self, job_id: int, gpus_per_node: int, num_nodes: int | None = None, nodes=None,
               gpu_type: str | None = None) -> None:
        if job_id in self.failing:
            raise SlurmError(f"`scontrol update JobId={job_id}` exit code 1: Job is no longer pending")
        self.resizes.append((job_id, gpus_per_node, num_nodes, tuple(nodes or ()), gpu_type))
        self._jobs[job_id] = replace(self._jobs[job_id], gpus=gpus_per_node * (num_nodes or 1),
                                     gpus_per_node=gpus_per_node, num_nodes=num_nodes or 1)

    def batch_script(self, job_id: int) -> str:
        self.script_reads.append(job_id)
        if job_id not in self.scripts:
            raise SlurmError(f"`scontrol write batch_script {job_id} -` exit code 1: no script")
        return self.scripts[job_id]

    def of(self, job_id: int) -> list[dict]:
        return [fields for jid, fields in self.updates if jid == job_id]

    def only(self, job_id: int) -> dict:
        (fields,) = self.of(job_id)
        return fields


def run_pass(client: FakeSlurm, mode: str = "enforce", placer: str = "liquid"):
    return Admitter(client, config(mode, placer), now=lambda: NOW).run_pass()


def placed_nodes(fields: dict) -> dict[str, int]:
    tag = Tag.parse(fields["AdminComment"])
    assert tag is not None and tag.state == "placed"
    return parse_placed(tag.placed)


def assert_started_on(fields: dict, nodes: dict[str, int]) -> None:
    """The one update that starts a placed job: node list, node count, start, tag and record agree."""
    assert fields["ReqNodeList"] == hostlist.collect_hostlist(list(nodes))
    assert fields["NumNodes"] == len(nodes) and fields["StartTime"] == "now"
    tag = Tag.parse(fields["AdminComment"])
    assert (tag.state, tag.placed, tag.at) == ("placed", format_placed(nodes), int(NOW))
    assert tag.trusted is not None and tag.trusted.digest   # what the daemon acts on later, copied now
    record = Record.parse(fields["Comment"])
    assert record.get("placed") == format_placed(nodes)


# --- the record's placement word ---------------------------------------------------------------

def test_format_placed_groups_nodes_by_gpu_count() -> None:
    assert format_placed({"gpu01": 4, "gpu02": 4, "gpu03": 1}) == "gpu[01-02]:4+gpu03:1"
    assert parse_placed("gpu[01-02]:4+gpu03:1") == {"gpu01": 4, "gpu02": 4, "gpu03": 1}
    assert parse_placed("") == {}
    with pytest.raises(LedgerError):
        parse_placed("gpu01:x+:3")


@given(st.dictionaries(st.integers(1, 99).map(lambda i: f"gpu{i:02d}"), st.integers(1, 8), min_size=1))
def test_placed_round_trip(nodes: dict[str, int]) -> None:
    text = format_placed(nodes)
    assert parse_placed(text) == nodes and Record.parse(Record().with_fields(placed=text).render()).get("placed") == text


# --- which jobs are touched ----------------------------------------------------------------------

def test_only_jobs_the_trusted_tag_holds_are_touched() -> None:
    client = FakeSlurm([
        job(1),
        job(2, comment=f"liquid/1 state=held | {SPEC}", admin=""),       # a user's forged "tag"
        job(3, admin="checked by ops"),
        job(4, admin=""),                                                   # opted in, never held
        job(5, admin="liquid/1 state=done"),
        job(6, state="RUNNING", nodes=("gpu04",), admin=""),
    ], cluster())
    report = run_pass(client)
    assert {jid for jid, _ in client.updates} == {1} and list(report.placed) == [1]


def test_a_per_job_request_lands_under_one_leaf() -> None:
    # free: gpu01 2, gpu02 4 | gpu03 3, gpu04 4 -- 6 GPUs fit under either leaf, or across them
    client = FakeSlurm([job(7, 6)], cluster(gpu01=2, gpu03=1))
    run_pass(client)
    fields = client.only(7)
    nodes = placed_nodes(fields)
    free = {n.name: n.gpus_free for n in cluster(gpu01=2, gpu03=1)}
    assert sum(nodes.values()) == 6 and all(0 < g <= free[n] for n, g in nodes.items())
    assert len({TOPOLOGY.leaf_of(n) for n in nodes}) == 1
    assert_started_on(fields, nodes)
    record = Record.parse(fields["Comment"])
    assert record.get("mode") == "adjust" and record.spec == SPEC and "note" not in record.fields


def test_a_per_node_request_gets_whole_nodes() -> None:
    # gpu01 is partly used: the only two whole free nodes under one leaf are gpu03 and gpu04
    client = FakeSlurm([job(8, 8, per_node=4, num_nodes=2)], cluster(gpu01=1))
    report = run_pass(client)
    fields = client.only(8)
    assert placed_nodes(fields) == {"gpu03": 4, "gpu04": 4}
    assert_started_on(fields, {"gpu03": 4, "gpu04": 4})
    assert fields["ReqNodeList"] == "gpu[03-04]" and report.placed == {8: "gpu[03-04]:4"}


def test_a_job_that_fits_under_one_leaf_later_does_not_cross_switches_while_young() -> None:
    # free: gpu01 2, gpu03 2 -- 4 GPUs only across the spine; the job fits one leaf once it empties
    busy = cluster(gpu01=2, gpu02=4, gpu03=2, gpu04=4)
    young = FakeSlurm([job(9, 4, age=5, lease_left=50)], busy)
    report = run_pass(young)
    assert report.waiting == [9] and young.updates == []
    old = FakeSlurm([job(9, 4, age=Config().daemon.spread_after_s + 10, lease_left=50)], busy)
    run_pass(old)
    fields = old.only(9)
    assert placed_nodes(fields) == {"gpu01": 2, "gpu03": 2}
    assert Record.parse(fields["Comment"]).get("note") == "2-switch"


ELASTIC = f"liquid/1 mode=adjust asked=gpu:h100:4 | {SPEC} elastic=1:8"


def test_an_elastic_job_starts_inside_its_range_at_what_is_free_rather_than_wait() -> None:
    # Two GPUs free (gpu01): the rigid job waits for its 4; the elastic one (elastic=1:8, asked 4)
    # starts now on the two, its GPU count set before it ever runs (no restart), and says so.
    busy = cluster(gpu01=2, gpu02=4, gpu03=4, gpu04=4)
    rigid = FakeSlurm([job(12, 4)], busy)
    assert run_pass(rigid).waiting == [12] and rigid.resizes == [] and rigid.updates == []
    client = FakeSlurm([job(13, 4, comment=ELASTIC)], busy)
    report = run_pass(client)
    assert client.resizes == [(13, 2, 1, ("gpu01",), "h100")]
    fields = client.only(13)
    assert_started_on(fields, {"gpu01": 2})
    assert Record.parse(fields["Comment"]).get("started") == "2of4"
    assert Tag.parse(fields["AdminComment"]).trusted.elastic and report.placed == {13: "gpu01:2"}


def test_an_elastic_job_never_starts_below_its_minimum_nor_across_switches_while_young() -> None:
    busy = cluster(gpu01=2, gpu02=4, gpu03=4, gpu04=4)
    at_least_3 = FakeSlurm([job(14, 4, comment=ELASTIC.replace("elastic=1:8", "elastic=3:8"))], busy)
    assert run_pass(at_least_3).waiting == [14] and at_least_3.resizes == []
    # gpu02 and gpu03 have one GPU each, under two leaves: 2 GPUs would cross the spine, 1 does not.
    split = cluster(gpu01=4, gpu02=3, gpu03=3, gpu04=4)
    client = FakeSlurm([job(15, 4, comment=ELASTIC)], split)
    run_pass(client)
    assert [r[1:3] for r in client.resizes] == [(1, 1)]
    assert sum(placed_nodes(client.only(15)).values()) == 1


def test_an_elastic_job_that_fits_its_ask_is_started_as_asked() -> None:
    client = FakeSlurm([job(16, 4, comment=ELASTIC)], cluster(gpu01=1))
    run_pass(client)
    assert client.resizes == [] and sum(placed_nodes(client.only(16)).values()) == 4


def test_an_elastic_start_whose_count_slurm_refuses_is_not_started() -> None:
    # The count update failed: nothing else is written (no start on nodes it did not get), the error is
    # counted and the job left alone; its lease ends and Slurm starts it as asked.
    client = FakeSlurm([job(17, 4, comment=ELASTIC)], cluster(gpu01=2, gpu02=4, gpu03=4, gpu04=4), failing=(17,))
    report = run_pass(client)
    assert client.updates == [] and 17 in report.failed and "no longer pending" in report.failed[17]


def test_an_elastic_job_alone_in_the_queue_starts_wider_on_one_node() -> None:
    # Nothing else waits and gpu03/gpu04 are idle: an elastic job asking 1 GPU (elastic=1:8) starts at
    # a whole node's 4, its count set before it ever runs, never across nodes; elastic=1:2 caps it at 2.
    busy = cluster(gpu01=4, gpu02=1)
    client = FakeSlurm([job(20, 1, comment=ELASTIC)], busy)
    report = run_pass(client)
    ((job_id, per_node, nodes, names, _),) = client.resizes
    assert (job_id, per_node, nodes) == (20, 4, 1) and names[0] in ("gpu03", "gpu04")
    fields = client.only(20)
    assert_started_on(fields, {names[0]: 4})
    assert Record.parse(fields["Comment"]).get("started") == "4of1" and 20 in report.placed
    capped = FakeSlurm([job(21, 1, comment=ELASTIC.replace("elastic=1:8", "elastic=1:2"))], busy)
    run_pass(capped)
    assert [r[1:3] for r in capped.resizes] == [(2, 1)]
    # only gpu02's 3 are free on any one node: 3
    three = FakeSlurm([job(22, 1, comment=ELASTIC)], cluster(gpu01=4, gpu02=1, gpu03=4, gpu04=4))
    run_pass(three)
    assert [r[1:3] for r in three.resizes] == [(3, 1)]


def test_a_job_starts_as_asked_when_others_wait_or_it_may_not_grow() -> None:
    idle = cluster()
    others = FakeSlurm([job(23, 1, comment=ELASTIC),
                        job(24, 2, comment="", admin="", age=30)], idle)    # a plain job waits too
    run_pass(others)
    assert others.resizes == [] and sum(placed_nodes(others.only(23)).values()) == 1
    rigid = FakeSlurm([job(25, 1)], idle)
    run_pass(rigid)
    assert rigid.resizes == [] and sum(placed_nodes(rigid.only(25)).values()) == 1
    spread = FakeSlurm([job(26, 2, per_node=1, num_nodes=2, comment=ELASTIC)], idle)   # asked two nodes
    run_pass(spread)
    assert spread.resizes == [] and placed_nodes(spread.only(26)) == {n: 1 for n in placed_nodes(spread.only(26))}
    off = FakeSlurm([job(27, 1, comment=ELASTIC)], idle)
    cfg = config()
    Admitter(off, replace(cfg, elastic=replace(cfg.elastic, start_wider=False)), now=lambda: NOW).run_pass()
    assert off.resizes == [] and sum(placed_nodes(off.only(27)).values()) == 1


# --- waiting, leases and release -----------------------------------------------------------------

def test_a_waiting_job_has_its_lease_renewed_only_when_it_runs_low() -> None:
    full = cluster(gpu01=4, gpu02=4, gpu03=4, gpu04=4)
    client = FakeSlurm([job(10, lease_left=LEASE / 2 - 1), job(11, lease_left=LEASE / 2 + 1)], full)
    report = run_pass(client)
    assert sorted(report.waiting) == [10, 11] and report.renewed == [10] and client.of(11) == []
    (renewal,) = client.of(10)
    assert set(renewal) == {"StartTime"}
    seconds = int(re.fullmatch(r"now\+(\d+)", renewal["StartTime"]).group(1))
    assert 0 < seconds <= LEASE


def test_renewals_of_one_lease_go_as_one_command_and_a_failure_falls_back_job_by_job() -> None:
    full = cluster(gpu01=4, gpu02=4, gpu03=4, gpu04=4)
    calls: list[tuple[int, ...]] = []

    class Counting(FakeSlurm):
        def update_jobs(self, job_ids, **fields):
            calls.append(tuple(job_ids))
            super().update_jobs(job_ids, **fields)

    client = Counting([job(i, lease_left=0) for i in range(30, 40)], full)
    report = run_pass(client)
    assert calls == [tuple(range(30, 40))] and sorted(report.renewed) == list(range(30, 40))
    # a job that cannot be updated (it ended since the read) costs the others nothing
    calls.clear()
    client = Counting([job(i, lease_left=0) for i in range(30, 40)], full, failing=(33,))
    report = run_pass(client)
    assert calls[0] == tuple(range(30, 40)) and sorted(report.renewed) == [i for i in range(30, 40) if i != 33]
    assert [e for e in report.errors if "renewing" in e] == ["job 33: renewing its hold failed: `scontrol update "
                                                              "JobId=33` exit code 1: Job is no longer pending"]


def test_a_renewal_never_outlives_the_daemons_own_release() -> None:
    age = MAX_HOLD - 10
    client = FakeSlurm([job(12, age=age, lease_left=0)], cluster(gpu01=4, gpu02=4, gpu03=4, gpu04=4))
    run_pass(client)
    seconds = int(client.only(12)["StartTime"].removeprefix("now+"))
    # still held when the daemon releases it at max_hold_s, and not for long after
    assert MAX_HOLD - age <= seconds <= MAX_HOLD - age + 2 * POLL


def test_a_job_held_too_long_is_given_to_slurm_with_a_note() -> None:
    client = FakeSlurm([job(13, age=MAX_HOLD + 100, lease_left=0)], cluster(gpu01=4, gpu02=4, gpu03=4, gpu04=4))
    report = run_pass(client)
    fields = client.only(13)
    assert report.released == [13] and fields["StartTime"] == "now"
    assert "ReqNodeList" not in fields and "NumNodes" not in fields
    assert Tag.parse(fields["AdminComment"]).state == "released"
    assert str(MAX_HOLD) in Record.parse(fields["Comment"]).get("note")


def test_a_held_job_slurm_started_itself_is_annotated() -> None:
    client = FakeSlurm([job(14, state="RUNNING", nodes=("gpu01",))], cluster(gpu01=4))
    report = run_pass(client)
    fields = client.only(14)
    assert report.annotated == [14] and set(fields) == {"AdminComment", "Comment"}
    assert Tag.parse(fields["AdminComment"]) == Tag("released", extra={"why": "lease"})
    assert "lease" in Record.parse(fields["Comment"]).get("note")


def test_a_held_job_without_gpus_is_released_at_once() -> None:
    client = FakeSlurm([job(15, gpus=0)], cluster())
    run_pass(client)
    fields = client.only(15)
    assert fields["StartTime"] == "now" and "ReqNodeList" not in fields
    assert Tag.parse(fields["AdminComment"]).state == "released"


# --- what is free --------------------------------------------------------------------------------

def test_gpus_promised_to_placed_jobs_are_not_given_twice() -> None:
    promised = job(20, 12, per_node=4, num_nodes=3, admin=f"liquid/1 state=placed placed=gpu[01-03]:4 at={int(NOW)}")
    client = FakeSlurm([promised, job(21, 4, age=9), job(22, 4, age=8, lease_left=10)], cluster())
    report = run_pass(client)
    assert client.of(20) == []
    assert placed_nodes(client.only(21)) == {"gpu04": 4}
    assert report.waiting == [22] and report.renewed == [22]
    assert set(client.only(22)) == {"StartTime"}


def test_a_promise_older_than_a_lease_no_longer_reserves_gpus() -> None:
    # The daemon starts a job it placed with StartTime=now: it became eligible when it was placed.
    stale = (f"liquid/1 state=placed placed=gpu[01-03]:4 at={int(NOW - LEASE - 1)}", -LEASE - 1)
    fresh = (f"liquid/1 state=placed placed=gpu[01-03]:4 at={int(NOW - 1)}", -1)
    for (admin, eligible_in), expected_free in ((stale, True), (fresh, False)):
        client = FakeSlurm([job(20, 12, per_node=4, num_nodes=3, admin=admin, lease_left=eligible_in),
                            job(21, 8, per_node=4, age=9)], cluster())
        report = run_pass(client)
        assert (21 in report.placed) is expected_free, admin


def test_a_resized_jobs_pin_reserves_its_gpus_until_its_restart_can_have_happened() -> None:
    # After a resize Slurm restarts the requeued job only once its old credential has expired, and its
    # new nodes may wait for a job resized with it to checkpoint: its pin holds a lease + the restart
    # penalty + the capped grace (daemon/pins.py), for the pass as for the elastic slot.
    window = LEASE + Config().elastic.restart_penalty_s + Config().elastic.max_grace_s
    for ago, expected_free in ((LEASE + 1, False), (window + 1, True)):
        admin = f"liquid/1 state=placed placed=gpu[01-03]:4 at={int(NOW - ago)} change=7"
        client = FakeSlurm([job(20, 12, per_node=4, num_nodes=3, admin=admin, lease_left=-ago),
                            job(21, 8, per_node=4, age=9)], cluster())
        report = run_pass(client)
        assert (21 in report.placed) is expected_free, ago


def test_a_promised_share_keeps_one_gpu_of_an_idle_node() -> None:
    share = job(23, gpus=0, shards=2, admin=f"liquid/1 state=placed placed=gpu04:shard2 at={int(NOW)}")
    client = FakeSlurm([share, job(24, 16, age=9, lease_left=10)], cluster())
    report = run_pass(client)
    assert report.waiting == [24] and 24 not in report.placed   # 15 GPUs left for a 16-GPU job


def test_a_batch_never_overcommits_a_node() -> None:
    jobs = [job(30, 4, age=4), job(31, 6, age=3), job(32, 2, age=2), job(33, 4, per_node=4, age=1)]
    client = FakeSlurm(jobs, cluster(gpu02=1))
    report = run_pass(client, placer="auto")                     # >= batch_min jobs: the grouping GA
    used: dict[str, int] = {"gpu02": 1}
    for jid in report.placed:
        for name, gpus in placed_nodes(client.only(jid)).items():
            used[name] = used.get(name, 0) + gpus
    assert all(gpus <= 4 for gpus in used.values())
    assert sum(j.gpus for j in jobs if j.job_id in report.placed) <= 15
    assert set(report.placed) | set(report.waiting) == {30, 31, 32, 33}


def test_shard_jobs_join_a_node_that_already_shares() -> None:
    nodes = [replace(n, shards_alloc=3) if n.name == "gpu03" else n for n in cluster(gpu01=1)]
    client = FakeSlurm([job(40, gpus=0, shards=2)], nodes)
    report = run_pass(client)
    fields = client.only(40)
    assert fields["ReqNodeList"] == "gpu03" and fields["NumNodes"] == 1
    tag = Tag.parse(fields["AdminComment"])
    assert (tag.state, tag.placed, tag.at) == ("placed", "gpu03:shard2", int(NOW))
    assert report.placed == {40: "gpu03:shard2"}


def test_shard_jobs_otherwise_go_where_fewest_gpus_are_free() -> None:
    client = FakeSlurm([job(41, gpus=0, shards=2)], cluster(gpu01=1, gpu02=3, gpu04=4))
    run_pass(client)
    assert client.only(41)["ReqNodeList"] == "gpu02"


# --- shadow mode ---------------------------------------------------------------------------------

def test_shadow_mode_records_where_a_job_would_go_and_changes_nothing() -> None:
    shadow = "liquid/1 state=shadow"
    client = FakeSlurm([job(50, 4, admin=shadow), job(51, 4, state="RUNNING", nodes=("gpu01",), admin=shadow),
                        job(52, 4)], cluster(gpu01=4, gpu02=1, gpu03=1))
    report = run_pass(client, mode="shadow")
    assert sorted(report.annotated) == [50, 51] and report.placed == {} and client.of(52) == []
    for jid in (50, 51):
        fields = client.only(jid)
        assert set(fields) == {"AdminComment", "Comment"}          # no node list, no start
        would = Record.parse(fields["Comment"]).get("would")
        assert Tag.parse(fields["AdminComment"]) == Tag("shadowed", extra={"would": would})
    # only gpu04 has 4 free GPUs; the running job is judged as if its own gpu01 were free
    assert Record.parse(client.only(50)["Comment"]).get("would") == "gpu04:4"
    running = Record.parse(client.only(51)["Comment"])
    assert running.get("would") in ("gpu01:4", "gpu04:4") and running.get("slurm") == "gpu01"
    assert run_pass(client, mode="shadow").annotated == []        # annotated once


# --- failures and records ------------------------------------------------------------------------

def test_a_failed_update_is_reported_and_the_pass_goes_on() -> None:
    client = FakeSlurm([job(60, 4, age=9), job(61, 4, age=8)], cluster(), failing=(60,))
    report = run_pass(client)
    assert len(report.errors) == 1 and "job 60" in report.errors[0] and "no longer pending" in report.errors[0]
    assert placed_nodes(client.only(61))


def test_a_job_without_a_record_gets_one_from_its_batch_script() -> None:
    script = f"#!/bin/sh\n#SBATCH --gpus=h100:4\n#LIQUID {SPEC}\npython train.py\n"
    client = FakeSlurm([job(70, comment="")], cluster(), scripts={70: script})
    run_pass(client)
    assert client.script_reads == [70]
    record = Record.parse(client.only(70)["Comment"])
    d = estimate(parse_comment(f"liquid: {SPEC}"), gpu_type="h100", site=str(SITE)).decision
    assert record.get("mode") == "server" and record.get("asked") == "gpu:h100:4"
    assert record.get("est").startswith(f"{d.gpus}x") and record.spec == SPEC
    assert record.get("placed") and "err" not in record.fields


def test_a_liquid_comment_is_read_without_the_script() -> None:
    client = FakeSlurm([job(71, comment=f"liquid: {SPEC}")], cluster())
    run_pass(client)
    assert client.script_reads == []
    assert Record.parse(client.only(71)["Comment"]).spec == SPEC


def test_an_unreadable_script_is_noted_and_the_job_still_placed() -> None:
    client = FakeSlurm([job(72, comment="")], cluster())
    report = run_pass(client)
    record = Record.parse(client.only(72)["Comment"])
    assert "err" in record.fields and record.get("placed") and 72 in report.placed
    assert report.errors == []


def test_a_slurm_error_reading_jobs_is_not_swallowed() -> None:
    class Down(FakeSlurm):
        def jobs(self, job_ids=None):
            raise SlurmError("`squeue --json` did not answer within 30 s")

    with pytest.raises(SlurmError):      # the daemon loop logs it; held jobs keep their leases
        run_pass(Down([], cluster()))


def test_a_requeued_job_pinned_to_a_dead_node_is_placed_again() -> None:
    pinned = replace(job(50, 2, admin=f"liquid/1 state=placed placed=gpu01:2 at={int(NOW - 999)}"),
                     required_nodes=("gpu01",))
    nodes = [replace(n, state="DOWN") if n.name == "gpu01" else n for n in cluster()]
    client = FakeSlurm([pinned], nodes)
    report = run_pass(client)
    assert 50 in report.placed and "gpu01" not in placed_nodes(client.only(50))
    # While its node is alive, a placed job waiting for Slurm is left alone.
    client = FakeSlurm([pinned], cluster())
    assert run_pass(client).placed == {} and client.of(50) == []


def test_a_stranded_job_that_cannot_be_placed_is_neither_released_unplaced_nor_delayed() -> None:
    pinned = replace(job(51, 16, age=MAX_HOLD + 50, lease_left=-100,
                         admin=f"liquid/1 state=placed placed=gpu[01-04]:4 at={int(NOW - 999)}"),
                     required_nodes=("gpu01", "gpu02", "gpu03", "gpu04"))
    nodes = [replace(n, state="DOWN") if n.name == "gpu01" else n for n in cluster()]
    client = FakeSlurm([pinned], nodes)
    report = run_pass(client)
    assert report.waiting == [51] and client.of(51) == []


# --- what Slurm would check (finding 6: a job was pinned to a node outside its partition) -----------

def partitioned() -> list[Node]:
    """gpu01 nearly full (best fit for one GPU), gpu03-04 the only nodes of partition `small`."""
    nodes = cluster(gpu01=3)
    return [replace(n, partitions=("gpu", "small") if n.name in ("gpu03", "gpu04") else ("gpu",)) for n in nodes]


def test_a_job_is_placed_only_on_nodes_of_its_partition() -> None:
    client = FakeSlurm([replace(job(50, 1), partition="small")], partitioned())
    run_pass(client)
    assert set(placed_nodes(client.only(50))) <= {"gpu03", "gpu04"}
    client = FakeSlurm([replace(job(51, 1), partition="gpu")], partitioned())
    run_pass(client)
    assert placed_nodes(client.only(51)) == {"gpu01": 1}      # best fit, inside its partition


def test_features_cpus_and_memory_rule_nodes_out() -> None:
    nodes = [replace(n, features=("nvlink",) if n.name == "gpu04" else ()) for n in cluster(gpu01=3)]
    client = FakeSlurm([replace(job(52, 1), features="nvlink")], nodes)
    run_pass(client)
    assert placed_nodes(client.only(52)) == {"gpu04": 1}
    # gpu01 has the GPU but not the CPUs for it (7 of 8 in use): 4 CPUs per GPU asked
    busy = [replace(n, cpus_alloc=7) if n.name == "gpu01" else n for n in cluster(gpu01=3)]
    client = FakeSlurm([replace(job(53, 1), cpus=4, mem_mib=1000)], busy)
    run_pass(client)
    assert "gpu01" not in placed_nodes(client.only(53))
    # memory: 20 GB for one GPU fits no node (16 GB each): the job waits, pinned nowhere
    client = FakeSlurm([replace(job(54, 1), mem_mib=20000)], cluster())
    report = run_pass(client)
    assert report.waiting == [54] and "ReqNodeList" not in str(client.updates)


def test_a_constraint_the_daemon_cannot_read_goes_to_slurm_unplaced() -> None:
    client = FakeSlurm([replace(job(55, 1), features="[rack1|rack2]*2")], cluster())
    report = run_pass(client)
    fields = client.only(55)
    assert "ReqNodeList" not in fields and report.released == [55]
    assert Tag.parse(fields["AdminComment"]).state == "released"


def test_a_placed_job_slurm_did_not_start_within_a_lease_is_unpinned() -> None:
    stuck = job(56, 4, admin=f"liquid/1 state=placed placed=gpu02:4 at={int(NOW - LEASE - 5)}", lease_left=-LEASE - 5)
    stuck = replace(stuck, required_nodes=("gpu02",))
    fresh = replace(job(57, 4, admin=f"liquid/1 state=placed placed=gpu03:4 at={int(NOW - 5)}", lease_left=-5),
                    required_nodes=("gpu03",))
    client = FakeSlurm([stuck, fresh], cluster())
    report = run_pass(client)
    fields = client.only(56)
    assert fields["ReqNodeList"] == "" and Tag.parse(fields["AdminComment"]).state == "released"
    assert "unpinned" in Record.parse(fields["Comment"]).get("note") and report.annotated == [56]
    assert client.of(57) == []


def test_a_resized_job_waiting_for_its_restart_is_not_unpinned() -> None:
    # Resized (the tag names the change) 5 s past the lease: Slurm restarts a requeued job only after
    # the old credential expires (the restart penalty, 150 s by default), and its nodes may wait for
    # another job's checkpoint (the capped grace, 300 s), so it stays pinned.
    ago = LEASE + 5
    resized = replace(job(58, 4, admin=f"liquid/1 state=placed placed=gpu02:4 at={int(NOW - ago)} change=3",
                          lease_left=-ago), required_nodes=("gpu02",))
    client = FakeSlurm([resized], cluster())
    run_pass(client)
    assert client.of(58) == []


# --- a job whose handling raises is skipped, counted, and not retried hot ----------------------------

def test_a_job_whose_handling_raises_is_skipped_and_the_others_are_placed(monkeypatch) -> None:
    from slurm_liquid.placement.slurm_rules import JobViews

    real = JobViews.view

    def poisoned(self, job, returned=None):
        if job.job_id == 60:
            raise ZeroDivisionError("poison")
        return real(self, job, returned)

    monkeypatch.setattr(JobViews, "view", poisoned)
    clock = [NOW]
    client = FakeSlurm([job(60, 1, age=9), job(61, 1, age=8)], cluster())
    admitter = Admitter(client, config(), now=lambda: clock[0])
    report = admitter.run_pass()
    assert list(report.failed) == [60] and "ZeroDivisionError" in report.failed[60] and 61 in report.placed
    report = admitter.run_pass()       # the next pass leaves it alone for a while
    assert 60 in report.skipped and report.failed == {}
    clock[0] += 31
    assert 60 in admitter.run_pass().failed   # then tries again, and backs off longer
    clock[0] += 31
    assert 60 in admitter.run_pass().skipped
