"""The elastic slot: which jobs may change, what the policy asks, the limits, and shadow mode.

The cluster is the test cluster's shape: leaf1 over gpu01-02, leaf2 over gpu03-04, 4 H100s per
node (containers/slurm/topology.conf). Slurm is a mock with the client's own signatures; the clock
is fixed and the jobs report their checkpoint at once, so nothing sleeps.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from unittest.mock import create_autospec

import pytest

import slurm_liquid.policy
import slurm_liquid.speed
from slurm_liquid.config import Config, parse
from slurm_liquid.ledger.placed import format_placed, parse_placed
from slurm_liquid.daemon.elastic import Adjuster, SlotReport, elastic_jobs
from slurm_liquid.daemon.journal import Journal
from slurm_liquid.daemon.resize import Checkpointing
from slurm_liquid.views import ClusterView, Decision, JobView
from slurm_liquid.errors import LiquidError
from slurm_liquid.jobspec import parse_directives
from slurm_liquid.ledger import Record, Tag, TagState, TrustedSpec
from slurm_liquid.slurm import Job, Node, SlurmClient
from slurm_liquid.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = Topology.from_topology_conf((ROOT / "containers" / "slurm" / "topology.conf").read_text())
NOW = 1_700_000_000.0
CHANGES = ("signal", "requeue_hold", "resize", "update_job", "release")


def at(offset_s: float) -> datetime:
    return datetime.fromtimestamp(NOW + offset_s, tz=timezone.utc)


def running(job_id: int, placed: dict[str, int], spec: str = "model=resnet50 batch-size=256 elastic=1:8",
            *, tagged: bool = True, started_ago: float = 3600, submitted_ago: float = 7200, state: str = "RUNNING") -> Job:
    """A job this daemon placed on `placed` (GPUs per node) and started `started_ago` s ago."""
    where = format_placed(placed)
    return Job(job_id, f"job{job_id}", "alice", state, nodes=tuple(placed), num_nodes=len(placed),
               gpus=sum(placed.values()), gpus_per_node=max(placed.values()), gpu_type="h100",
               comment=f"liquid/1 placed={where} | {spec}", admin_comment=placed_tag(where, spec) if tagged else "",
               submit_time=at(-submitted_ago), start_time=at(-started_ago))


def placed_tag(where: str, spec: str) -> str:
    """The tag the daemon wrote when it placed the job: what it acts on later, copied from the spec."""
    try:
        trusted = TrustedSpec.of(parse_directives(spec), spec, max_grace_s=300, max_gpus=16)
    except LiquidError:
        trusted = None
    return Tag(TagState.PLACED, where, int(NOW - 3600), trusted).render()


def waiting(job_id: int, gpus: int, submitted_ago: float = 60) -> Job:
    """A rigid job pending for `gpus` GPUs."""
    return Job(job_id, f"job{job_id}", "bob", "PENDING", gpus=gpus, gpu_type="h100",
               comment="liquid/1 | model=bert-large", submit_time=at(-submitted_ago))


def cluster(jobs: list[Job]) -> list[Node]:
    """gpu01-04 with the GPUs the running `jobs` hold allocated."""
    used: dict[str, int] = {}
    for job in jobs:
        if job.is_running:
            for name in job.nodes:
                used[name] = used.get(name, 0) + job.gpus // len(job.nodes)
    return [Node(f"gpu0{i}", "MIXED" if used.get(f"gpu0{i}") else "IDLE", cpus=64, mem_mib=256000, gpus=4,
                 gpus_alloc=used.get(f"gpu0{i}", 0), gpu_type="h100") for i in range(1, 5)]


def config(policy: str = "drf", mode: str = "enforce", **elastic: int) -> Config:
    # Growth is weighed against its restart only where a test asks (payback): the slot's mechanics
    # are tested on their own.
    elastic.setdefault("payback", 0)
    extra = "".join(f"{k} = {v}\n" for k, v in elastic.items())
    return parse(f'[daemon]\nmode = "{mode}"\n[elastic]\npolicy = "{policy}"\n{extra}')


def slurm(jobs: list[Job]):
    client = create_autospec(SlurmClient, instance=True)
    client.jobs.return_value = jobs
    client.nodes.return_value = cluster(jobs)
    return client


def no_sleep(seconds: float) -> None:
    raise AssertionError("the slot slept: the checkpoint report was not seen")


def adjuster(client, cfg: Config, journal: Journal | None = None, progress: dict | None = None) -> Adjuster:
    report = {"checkpoint_time": NOW, **(progress or {})}
    return Adjuster(client, cfg, TOPOLOGY, journal or Journal(":memory:", now=lambda: NOW),
                    progress=lambda job: report, now=lambda: NOW)


def follow(client, jobs: list[Job]) -> None:
    """Slurm's side of a resize: requeuehold holds the job, release lets it go."""
    state = {j.job_id: j for j in jobs}
    client.job.side_effect = lambda job_id: state.get(job_id)
    client.requeue_hold.side_effect = lambda job_id: state.update(
        {job_id: replace(state[job_id], state="PENDING", held=True, nodes=())})
    client.release.side_effect = lambda job_id: state.update({job_id: replace(state[job_id], held=False)})


def slot(jobs: list[Job], cfg: Config | None = None, journal: Journal | None = None) -> tuple[SlotReport, object]:
    """One slot, then the loop's next turn (the jobs reported their checkpoints at once)."""
    client = slurm(jobs)
    follow(client, jobs)
    work = adjuster(client, cfg or config(), journal)
    report = work.run_slot()
    for change in work.resizer.step():
        if change.phase == "done":
            report.resized[change.job_id] = f"{change.old}->{change.new}"
    return report, client


def changed_jobs(client) -> set[int]:
    """Jobs any changing Slurm call named."""
    return {c.args[0] for name, c in ((n, getattr(client, n)) for n in CHANGES) for c in c.call_args_list}


def resized_to(client) -> dict[str, int]:
    """The placement the one resize asked of Slurm."""
    client.resize.assert_called_once()
    args, kwargs = client.resize.call_args
    _, per_node = args
    assert kwargs["num_nodes"] == len(kwargs["nodes"])
    return {name: per_node for name in kwargs["nodes"]}


# ---------------------------------------------------------------- who is elastic

def test_elastic_jobs_are_running_tagged_and_opted_in() -> None:
    ok = running(1, {"gpu01": 2}, "model=resnet50 elastic=2:6 signal=USR2@30")
    others = [
        running(2, {"gpu02": 2}, state="PENDING"),                       # not running
        running(3, {"gpu03": 2}, tagged=False),                          # record forged by the user, no tag
        running(4, {"gpu03": 1}, "model=resnet50 min-gpus=1 max-gpus=8"),  # a range, but no opt-in
        running(5, {"gpu04": 1}, "model=resnet50 elastic=banana"),       # spec that does not parse
        replace(running(6, {"gpu04": 1}), admin_comment="liquid/1 state=shadowed"),   # not placed by us
    ]
    found = elastic_jobs([ok, *others])
    assert list(found) == [1]
    item = found[1]
    assert (item.low, item.high, item.checkpointing) == (2, 6, Checkpointing("USR2", 30.0))
    assert item.job is ok and item.trusted.model == "resnet50"


def test_an_edited_comment_changes_nothing_the_daemon_does() -> None:
    """Finding: a 1-GPU job whose owner edited its Comment to `elastic=4:4` after placement got a root
    `scontrol update TresPerNode=gres/gpu:4`. The range comes from the tag copied at placement."""
    rigid = running(1, {"gpu01": 1}, "model=resnet50 batch-size=256")
    edited = replace(rigid, comment="liquid/1 placed=gpu01:1 | model=resnet50 batch-size=256 elastic=4:4")
    assert elastic_jobs([edited]) == {}
    report, client = slot([edited], config("drf"))
    assert changed_jobs(client) == set() and report.decided == {}
    # and a job placed elastic 1:2 whose Comment now says 1:8 is never grown past 2
    small = running(2, {"gpu01": 1}, "model=resnet50 batch-size=256 elastic=1:2")
    widened = replace(small, comment=small.comment.replace("elastic=1:2", "elastic=1:8 signal=USR1@86400"))
    (item,) = elastic_jobs([widened]).values()
    assert (item.low, item.high, item.checkpointing.grace_s) == (1, 2, 60.0)
    report, client = slot([widened], config("drf"))
    assert report.decided == {2: 2} and sum(resized_to(client).values()) == 2


def test_the_checkpoint_grace_is_capped_by_the_site() -> None:
    job = running(3, {"gpu01": 1}, "model=resnet50 elastic=1:4 signal=USR1@86400")
    (item,) = elastic_jobs([job]).values()
    assert item.checkpointing.grace_s == 300.0


@pytest.mark.parametrize("report", [
    {"epoch": "x", "total": 10, "step": 1}, {"total": 1e400, "step": 1}, {"total": 10 ** 400, "step": 5},
    {"checkpoint_time": 10 ** 400}, {"step": float("nan")}, {"epoch": -1}, {"total": True}, [], "x", None,
])
def test_a_poisoned_progress_report_never_breaks_the_slot(report) -> None:
    """Finding: `"epoch": "x"`, `1e400`, or a 400-digit `total` crashed the elastic slot."""
    jobs = [running(7, {"gpu01": 2}, "model=resnet50 batch-size=256 elastic=1:8")]
    client = slurm(jobs)
    follow(client, jobs)
    work = Adjuster(client, config("drf"), TOPOLOGY, Journal(":memory:", now=lambda: NOW),
                    progress=lambda job: report, now=lambda: NOW)
    result = work.run_slot()
    assert result.failed == {} and result.decided == {7: 8}


def test_a_forged_record_without_the_tag_is_never_resized() -> None:
    forged = running(7, {"gpu01": 2}, tagged=False)
    report, client = slot([forged])
    assert report.decided == {} and changed_jobs(client) == set()


# ---------------------------------------------------------------- the policy's answer, applied

def test_static_policy_changes_nothing() -> None:
    report, client = slot([running(7, {"gpu01": 2}), waiting(8, 16)], config("static"))
    assert report.decided == {} and changed_jobs(client) == set()


def test_drf_grows_a_lone_elastic_job_to_its_maximum_the_same_on_every_node() -> None:
    report, client = slot([running(7, {"gpu01": 4})])
    assert report.decided == {7: 8}     # the whole cluster is free, 8 is the job's maximum (one step from 4)
    new = resized_to(client)
    assert sum(new.values()) == 8 and max(new.values()) <= 4
    assert len({TOPOLOGY.leaf_of(n) for n in new}) == 1   # 2 x 4 fits under one leaf: no spread
    assert report.resized == {7: f"gpu01:4->{format_placed(new)}"}
    record = Record.parse(client.update_job.call_args.kwargs["Comment"])
    assert parse_placed(record.get("placed")) == new and record.get("resized") == "4to8"
    assert record.get("note") == "drf-slot/speed:trace:imagenet"   # no report yet: resnet50's prior
    client.release.assert_called_once_with(7)


def test_drf_shrinks_an_elastic_job_to_its_minimum_when_rigid_jobs_want_the_cluster() -> None:
    # DRF: the elastic job (first) gets its minimum 1, then the rigid 8 and 7 fill the other 15.
    report, client = slot([running(7, {"gpu01": 4, "gpu02": 4}), waiting(8, 8), waiting(9, 7)])
    assert report.decided == {7: 1}
    new = resized_to(client)
    assert sum(new.values()) == 1
    assert changed_jobs(client) == {7}


class FixedPolicy:
    """Asks for `gpus` GPUs for job 7, whatever the cluster (to test the clamp, not a policy)."""

    name = "fixed"
    speed = None

    def __init__(self, gpus: int):
        self.gpus = gpus

    def reset(self) -> None:
        pass

    def decide(self, view: ClusterView) -> Decision:
        return Decision((("7", self.gpus),))


@pytest.mark.parametrize("asked, decided, shape", [
    (16, 6, {"gpu01": 3, "gpu02": 3}),   # above the range: 6, as 2 x 3 (6 GPUs are not 4 + 2 in Slurm)
    (0, 2, None),                        # a suspension is not a resize: the range's minimum
    (3, 3, None),                        # inside the range: as asked
])
def test_decisions_are_clamped_to_the_elastic_range(monkeypatch, asked: int, decided: int, shape) -> None:
    monkeypatch.setattr(slurm_liquid.policy, "make_policy", lambda *args, **kw: FixedPolicy(asked))
    # 4 GPUs held: one step of the unmeasured job's reach is 8, so the range (2:6) is what clamps.
    report, client = slot([running(7, {"gpu01": 4}, "model=resnet50 elastic=2:6")])
    assert report.decided == {7: decided}
    new = resized_to(client)
    assert sum(new.values()) == decided and len(set(new.values())) == 1
    if shape:
        assert new == shape


def test_a_rigid_running_job_is_never_touched() -> None:
    rigid = running(5, {"gpu03": 4}, "model=bert-large")
    report, client = slot([running(7, {"gpu01": 4}, submitted_ago=9000), rigid])
    assert report.decided == {7: 8}
    assert "gpu03" not in resized_to(client)
    assert changed_jobs(client) == {7}


def test_the_job_is_skipped_with_a_reason_when_no_even_placement_exists() -> None:
    # Three rigid jobs hold 3 GPUs on each of gpu02-04: DRF gives the elastic job 1 + 6 = 7 GPUs,
    # and 7 (a prime) is only 7 nodes x 1 GPU in Slurm's terms: there are 4 nodes.
    rigid = [running(i, {f"gpu0{i}": 3}, "model=bert-large") for i in (2, 3, 4)]
    report, client = slot([running(7, {"gpu01": 4}, submitted_ago=9000), *rigid])
    assert report.decided == {7: 7}
    assert "cannot be placed" in report.skipped[7]
    assert changed_jobs(client) == set()


def test_two_jobs_resized_in_one_slot_never_ask_for_the_same_gpus() -> None:
    # Both grow to 8 = 2 x 4; leaf1 is half taken by the two jobs themselves, so the first goes to leaf2
    # and the second fits only where the first left (leaf1), not on leaf2 again.
    report, client = slot([running(7, {"gpu01": 4}), running(6, {"gpu02": 4}, submitted_ago=8000)])
    assert report.decided == {6: 8, 7: 8}
    asked: dict[str, int] = {}
    for (_, per_node), kwargs in client.resize.call_args_list:
        for name in kwargs["nodes"]:
            asked[name] = asked.get(name, 0) + per_node
    assert max(asked.values()) <= 4


# ---------------------------------------------------------------- limits

def history(*changes: tuple[float, str]) -> Journal:
    """A journal of job 7's earlier changes: (seconds ago, final phase)."""
    clock = [NOW]
    journal = Journal(":memory:", now=lambda: clock[0])
    for ago, phase in changes:
        clock[0] = NOW - ago
        journal.advance(journal.begin(7, "gpu01:1", "gpu01:2"), phase)
    clock[0] = NOW
    return journal


@pytest.mark.parametrize("changes, limits, started_ago, skipped", [
    ([(5, "done")], {}, 3600, "changed too recently"),
    ([(5, "failed"), (5, "rolled-back")], {}, 3600, None),          # only changes that happened count
    ([(400, "done")], {}, 3600, None),                              # past min_change_interval_s = 300
    ([], {}, 10, "started too recently"),
    ([(1800, "done"), (900, "done")], {"max_changes_per_hour": 2, "min_change_interval_s": 60}, 3600,
     "hourly change limit"),
    ([(3700, "done"), (900, "done")], {"max_changes_per_hour": 2, "min_change_interval_s": 60}, 3600, None),
])
def test_limits_hold_a_change_back(changes, limits, started_ago: float, skipped: str | None) -> None:
    report, client = slot([running(7, {"gpu01": 2}, started_ago=started_ago)], config(**limits), history(*changes))
    assert report.decided == {7: 8}
    if skipped:
        assert report.skipped == {7: skipped} and changed_jobs(client) == set()
    else:
        assert report.resized and changed_jobs(client) == {7}


def test_a_done_change_is_journalled_and_counts_for_the_next_slot() -> None:
    journal = history()
    jobs = [running(7, {"gpu01": 2})]
    first, _ = slot(jobs, journal=journal)
    assert 7 in first.resized and journal.count_since(NOW - 1) == 1
    second, client = slot(jobs, journal=journal)      # Slurm not updated yet in this fake: same view
    assert second.skipped == {7: "changed too recently"} and changed_jobs(client) == set()


# ---------------------------------------------------------------- shadow mode and reconcile

def test_shadow_mode_only_notes_what_it_would_do() -> None:
    journal = history()
    report, client = slot([running(7, {"gpu01": 2})], config(mode="shadow"), journal)
    assert [name for name, _, _ in client.mock_calls if name in CHANGES] == ["update_job"]
    (job_id,), fields = client.update_job.call_args
    assert job_id == 7 and set(fields) == {"Comment"}
    record = Record.parse(fields["Comment"])
    assert record.get("would_resize") == "2to8" and record.get("placed") == "gpu01:2"
    assert report.skipped[7].startswith("shadow: would resize gpu01:2->") and not report.resized
    assert journal.count_since(0) == 0 and journal.unfinished() == []


def test_a_slot_first_finishes_what_a_killed_daemon_left() -> None:
    journal = history()
    journal.advance(journal.begin(7, "gpu01:2", "gpu[01-02]:4"), "updated")
    held = Job(7, "job7", "alice", "PENDING", held=True, gpus=8)
    client = slurm([])
    client.job.return_value = held
    report = adjuster(client, config("static"), journal).run_slot()
    assert report.reconciled == [7]
    client.release.assert_called_once_with(7)
    assert journal.unfinished() == []


# ---------------------------------------------------------------- the speed the policies see

class Recorder(FixedPolicy):
    """Keeps the speed model it is given, as Optimus and DL2 do, and asks for nothing."""

    def __init__(self, speed):
        super().__init__(0)
        self.speed = speed

    def decide(self, view: ClusterView) -> Decision:
        return Decision()


def test_every_slot_gives_the_policy_the_jobs_fresh_progress(monkeypatch) -> None:
    made = []
    monkeypatch.setattr(slurm_liquid.policy, "make_policy",
                        lambda name, speed, path, world=None: made.append(Recorder(speed)) or made[-1])
    client = slurm([running(7, {"gpu01": 2})])
    work = adjuster(client, config(), progress={"total": 1000, "step": 100, "samples_per_s": 500.0,
                                                 "gpus": 2, "nodes": 1, "time": NOW})
    work.run_slot()
    view = JobView("7", 0.0, 2, allocation=(("gpu01", 2),), batch_size=256, max_gpus=8)
    assert made[0].speed.remaining_iterations(view) == 900
    work.report_of = lambda job: {"total": 1000, "step": 600, "samples_per_s": 500.0, "gpus": 2, "nodes": 1,
                                  "time": NOW}
    work.run_slot()
    assert len(made) == 1 and made[0].speed.remaining_iterations(view) == 400
    assert "measured" in made[0].speed.source("7")
    assert changed_jobs(client) == set()      # no action: the job keeps what it holds


def test_an_unmeasured_job_grows_one_step_at_a_time() -> None:
    # No samples/s reported: Optimus's prior says the lone job gains up to its maximum (8), but a width
    # the speed room has never seen is tried one step past what the job holds. DRF, which does not
    # decide by speed, is not bounded.
    report, client = slot([running(7, {"gpu01": 2})], config("optimus"))
    assert report.bounded == {7: 4} and report.decided == {7: 4}
    assert sum(resized_to(client).values()) == 4
    report, _ = slot([running(7, {"gpu01": 2})], config("drf"))
    assert report.bounded == {} and report.decided == {7: 8}


def per_job_speed(curves: dict[int, dict[int, float]]):
    """Each job reports the samples/s its curve gives on the GPUs it holds now."""
    def report_of(job: Job) -> dict:
        return {"checkpoint_time": NOW, "step": 100, "total": 100_000, "gpus": job.gpus, "nodes": len(job.nodes),
                "time": NOW, "samples_per_s": curves[job.job_id][job.gpus]}
    return report_of


def test_optimus_gives_gpus_where_the_measured_speed_grows_not_where_it_stops() -> None:
    """Two jobs of the same model: 7 stops scaling past 2 GPUs, 6 scales linearly. After both were
    measured at 1, 2 and 4 GPUs, Optimus gives the free GPUs to 6, and 7 holds at most 3."""
    flat = {1: 100.0, 2: 190.0, 4: 180.0, 8: 170.0}
    linear = {1: 100.0, 2: 200.0, 4: 400.0, 8: 800.0}
    work = None
    for width in (1, 2, 4):
        jobs = [running(7, {"gpu01": width}), running(6, {"gpu03": width}, submitted_ago=8000)]
        client = slurm(jobs)
        if work is None:
            work = Adjuster(client, config("optimus", mode="shadow"), TOPOLOGY, Journal(":memory:", now=lambda: NOW),
                            progress=per_job_speed({7: flat, 6: linear}), now=lambda: NOW)
        work.client = client
        report = work.run_slot()
    assert report.decided[7] <= 3 and report.decided[6] == 8, report
# ---------------------------------------------------------------- the learned policy

def test_dl2_runs_on_the_live_view_and_stays_within_the_range() -> None:
    jobs = [running(7, {"gpu01": 2}, "model=resnet50 batch-size=256 elastic=2:6"),
            running(6, {"gpu03": 4}, "model=bert-base batch-size=64 elastic=1:8", submitted_ago=8000),
            waiting(8, 4)]
    report, client = slot(jobs, config("dl2", min_change_interval_s=0))
    assert set(report.decided) == {6, 7}
    assert 2 <= report.decided[7] <= 6 and 1 <= report.decided[6] <= 8
    assert changed_jobs(client) <= {6, 7}


def test_a_report_written_before_the_resize_says_nothing_of_the_new_width() -> None:
    # The job now holds 2 GPUs (started an hour ago); its report still speaks of 1 GPU, or of 2 GPUs but
    # from before it started on them: neither is a measurement of its speed on 2.
    for stale in ({"gpus": 1, "nodes": 1, "time": NOW}, {"gpus": 2, "nodes": 1, "time": NOW - 7200}):
        work = adjuster(slurm([running(7, {"gpu01": 2})]), config("drf"))
        work.report_of = lambda job, stale=stale: {"step": 10, "total": 100, "samples_per_s": 999.0, **stale}
        assert work.loop.observe(work) is not None
        assert not work.speed.source("7").startswith("measured")


def test_a_job_requeued_for_its_resize_keeps_what_was_measured() -> None:
    measured = {"step": 10, "total": 100, "samples_per_s": 500.0, "gpus": 2, "nodes": 1, "time": NOW}
    work = adjuster(slurm([running(7, {"gpu01": 2}), running(6, {"gpu03": 1})]), config("drf"), progress=measured)
    work.run_slot()
    assert work.speed.source("7").startswith("measured")
    pending = replace(running(7, {"gpu01": 2}), state="PENDING", nodes=())     # requeued by its resize
    work.client = slurm([pending, running(6, {"gpu03": 1})])
    work.run_slot()
    assert work.speed.source("7").startswith("measured")
    work.client = slurm([running(6, {"gpu03": 1})])                              # 7 has ended
    work.run_slot()
    assert not work.speed.source("7").startswith("measured")


def test_a_job_grows_only_on_nodes_of_its_partition() -> None:
    # Partition "small" is gpu03-04 (as on the test cluster): the job grows to 8 there, never onto
    # gpu01-02 although they are free.
    job = replace(running(7, {"gpu03": 2}), partition="small")
    client = slurm([job])
    client.nodes.return_value = [replace(n, partitions=("gpu", "small") if n.name in ("gpu03", "gpu04") else ("gpu",))
                                 for n in cluster([job])]
    follow(client, [job])
    work = adjuster(client, config())
    report = work.run_slot()
    work.resizer.step()
    assert report.decided == {7: 8}
    assert set(resized_to(client)) == {"gpu03", "gpu04"}


def test_a_job_about_to_finish_is_not_grown() -> None:
    # Reported 10 steps from its end: doubling saves seconds, the requeue costs 150 s (the default
    # restart penalty): DRF wants 8, the loop keeps it at 2. Far from its end, it grows.
    for step, grows in ((99_990, False), (1_000, True)):
        report_of = {"step": step, "total": 100_000, "samples_per_s": 500.0, "gpus": 2, "nodes": 1, "time": NOW,
                     "checkpoint_time": NOW}
        client = slurm([running(7, {"gpu01": 2})])
        work = Adjuster(client, config(payback=1), TOPOLOGY, Journal(":memory:", now=lambda: NOW),
                        progress=lambda job, r=report_of: r, now=lambda: NOW)
        report = work.run_slot()
        assert (report.decided[7] > 2) is grows, (step, report)


def requeued(job_id: int, placed: dict[str, int], ago: float, spec: str = "model=resnet50 batch-size=256 elastic=1:2"
             ) -> Job:
    """A job this daemon resized `ago` s ago: requeued, pinned to its new nodes, not started yet."""
    where = format_placed(placed)
    trusted = TrustedSpec.of(parse_directives(spec), spec, max_grace_s=300, max_gpus=16)
    tag = Tag(TagState.PLACED, where, int(NOW - ago), trusted, {"change": "1"})
    return Job(job_id, f"job{job_id}", "alice", "PENDING", gpus=sum(placed.values()),
               gpus_per_node=max(placed.values()), gpu_type="h100", required_nodes=tuple(placed),
               comment=f"liquid/1 placed={where} | {spec}", admin_comment=tag.render(), submit_time=at(-600))


@pytest.mark.parametrize("ago, gpu01_free", [(40, False), (10_000, False)])
def test_a_resize_never_takes_the_gpus_a_requeued_job_is_pinned_to(ago: float, gpu01_free: bool) -> None:
    # Job 9 was resized onto gpu01:2 and waits for Slurm to restart it there (after its old credential
    # expires); gpu01 looks idle to `scontrol show nodes`. Job 7 growing to 8 must not count on it, or
    # one of the two waits behind the other. A pin older than its window (daemon/pins.py) promises nothing,
    # but job 9 still waits: the slot places it first, as the placement pass will start it (`Loop.allocate`),
    # so job 7 grows on whole nodes elsewhere either way.
    jobs = [running(7, {"gpu03": 4}), running(8, {"gpu04": 4}, spec="model=bert-large"),
            requeued(9, {"gpu01": 2}, ago)]
    report, client = slot(jobs)
    new = resized_to(client)
    assert report.decided.get(7) == 8, report
    assert ("gpu01" in new) is gpu01_free, new
    assert sum(new.values()) == 8


# ---------------------------------------------------------------- one journal transaction per half of the slot

def on_disk(path: Path) -> list[tuple[int, str]]:
    """(job, phase) of every change as another process would read the journal file now."""
    import sqlite3

    db = sqlite3.connect(str(path))
    try:
        return db.execute("SELECT job_id, phase FROM changes ORDER BY id").fetchall()
    finally:
        db.close()


@pytest.mark.parametrize("grace", ["", " signal=USR1@0"])
def test_every_resize_of_a_slot_is_on_disk_before_its_first_signal(tmp_path: Path, grace: str) -> None:
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, now=lambda: NOW)
    jobs = [running(7, {"gpu01": 4}, f"model=resnet50 batch-size=256 elastic=1:8{grace}"),
            running(6, {"gpu02": 4}, f"model=resnet50 batch-size=256 elastic=1:8{grace}", submitted_ago=8000)]
    client = slurm(jobs)
    follow(client, jobs)
    seen: list[list[tuple[int, str]]] = []
    client.signal.side_effect = lambda job_id, signal: seen.append(on_disk(path))
    work = adjuster(client, config(), journal)
    report = work.run_slot()
    assert client.signal.call_count == 2
    # at the first signal both resizes are journaled (planned), none is marked yet
    assert sorted(seen[0]) == [(6, "planned"), (7, "planned")]
    if grace:   # no grace: the requeue follows its signal, the mark on disk before it
        assert report.resized.keys() == {6, 7} and [p for _, p in on_disk(path)] == ["done", "done"]
        assert (seen[0][0][0], "done") in seen[1]
    else:
        assert report.started.keys() == {6, 7} and [p for _, p in on_disk(path)] == ["signalled", "signalled"]
        assert seen[1] == seen[0]            # the marks go in one transaction, after the signals
        assert journal.batches == 2


def test_a_daemon_killed_between_the_two_transactions_closes_the_planned_resizes_as_failed(tmp_path: Path) -> None:
    class Killed(BaseException):
        """The daemon dies at its first signal: nothing after it runs."""

    path = tmp_path / "journal.sqlite"
    jobs = [running(7, {"gpu01": 4}), running(6, {"gpu02": 4}, submitted_ago=8000)]
    client = slurm(jobs)
    follow(client, jobs)
    client.signal.side_effect = Killed()
    with pytest.raises(Killed):
        adjuster(client, config(), Journal(path, now=lambda: NOW)).run_slot()
    assert sorted(on_disk(path)) == [(6, "planned"), (7, "planned")]
    # the restarted daemon's first step: a planned change was never signalled as far as it knows
    restarted = slurm(jobs)
    follow(restarted, jobs)
    report = adjuster(restarted, config("static"), Journal(path, now=lambda: NOW)).run_slot()
    assert sorted(report.reconciled) == [6, 7]
    assert [p for _, p in on_disk(path)] == ["failed", "failed"]
    assert changed_jobs(restarted) == set()


class CrossNode(slurm_liquid.speed.MeasuredSpeedModel):
    """Linear in GPUs on one node; `sync` x slower on every step once a job spans nodes."""

    def __init__(self, sync: float):
        super().__init__(4)
        self.sync = sync

    def placed_iteration_time(self, job, placement):
        used = [g for g in placement if g > 0]
        return (self.sync if len(used) > 1 else 1.0) / sum(used)


@pytest.mark.parametrize("sync, grows", [(3.0, False), (1.2, True)])
def test_a_growth_is_weighed_on_the_nodes_it_was_placed_on(monkeypatch, sync: float, grows: bool) -> None:
    # Job 7 holds 2 GPUs of gpu01; every node has 2 GPUs free, so 4 GPUs can only be 2 + 2 on two nodes.
    # Where a cross-node sync makes 2 + 2 slower than the 2 it has, the growth is not made, and the
    # slot says why; where 2 + 2 is still faster, it is.
    monkeypatch.setattr(slurm_liquid.policy, "make_policy", lambda *args, **kw: FixedPolicy(4))
    rigid = [running(i, {f"gpu0{i}": 2}, "model=bert-large") for i in (2, 3, 4)] + [running(5, {"gpu01": 2}, "model=bert-large")]
    jobs = [running(7, {"gpu01": 2}), *rigid]
    client = slurm(jobs)
    follow(client, jobs)
    work = Adjuster(client, config(), TOPOLOGY, Journal(":memory:", now=lambda: NOW),
                    progress=lambda job: {"checkpoint_time": NOW}, now=lambda: NOW, speed=CrossNode(sync))
    report = work.run_slot()
    work.resizer.step()
    if grows:
        assert sorted(resized_to(client).values()) == [2, 2] and 7 not in report.skipped
    else:
        assert report.skipped[7] == "4 GPUs on 2 nodes run no faster than 2 on 1 now"
        assert changed_jobs(client) == set()
