"""Where a job's GPUs on this node come from: the devices cgroup, slurmctld's GRES indices (the
`squeue --json` replies recorded from real Slurm 22.05, 24.11 and 26.05), never the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_liquid.agent.alloc import (Allocation, Allocations, from_gres_detail, gpus_from_devices_list,
                                      gpus_from_epilog)
from slurm_liquid.slurm import CliBackend, SlurmError, parse
from tests.unit.recorded import FIXTURES, VERSIONS, RecordedRunner


# --- slurmctld's view: GRES with device indices per node ---------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_squeue_gives_each_nodes_gpu_indices(version: str) -> None:
    roles = json.loads((FIXTURES / version / "manifest.json").read_text())["jobs"]
    runner = RecordedRunner(version)
    ids = [roles["running_multinode"], roles["shard"], roles["other_user"], roles["held"]]
    details = CliBackend(runner).gres_detail(ids)
    assert runner.calls[-1] == ["squeue", "--json", "--jobs=" + ",".join(map(str, sorted(ids)))]
    multi, shard, other = roles["running_multinode"], roles["shard"], roles["other_user"]
    # the recorded scenario: 4 GPUs on each of gpu01, gpu02; a 4-shard job and a 1-GPU job on gpu03
    assert set(details) == {multi, shard, other}                  # the held job holds nothing yet
    assert {n: from_gres_detail(d) for n, d in details[multi].items()} == {
        "gpu01": Allocation((0, 1, 2, 3), 0, "", "slurm"), "gpu02": Allocation((0, 1, 2, 3), 0, "", "slurm")}
    assert from_gres_detail(details[shard]["gpu03"]) == Allocation((0,), 4, "", "slurm")
    assert from_gres_detail(details[other]["gpu03"]) == Allocation((1,), 0, "", "slurm")


@pytest.mark.parametrize("detail, gpus, count", [
    ("gpu:h100:2(IDX:0-1)", (0, 1), 2),
    ("gpu:h100:4(IDX:0-3)", (0, 1, 2, 3), 4),
    ("gpu:4(IDX:3,5-7)", (3, 5, 6, 7), 4),
    ("gpu:a100:1(IDX:0),gpu:v100:2(IDX:1-2)", (0, 1, 2), 3),     # two types on one node
    ("gpu(IDX:4-7)", (4, 5, 6, 7), 4),                            # no count: the indices say it
    ("gpu:1(IDX:N/A)", (), 1),
    ("shard:4(IDX:0)", (), 0),
    ("gpu:h100:1(IDX:1),shard:h100:0(IDX:N/A)", (1,), 1),
    ("", (), 0),
    ("(null)", (), 0),
])
def test_gres_indices(detail: str, gpus: tuple[int, ...], count: int) -> None:
    assert parse.gres_indices(detail) == (gpus, count)


@pytest.mark.parametrize("detail", ["gpu:2(IDX:0-x)", "gpu:2(IDX:5-1)", "gpu:2(IDX:0-99999)", "gpu:2(IDX:0)(x)",
                                    "gpu:2(0/4,1)", "gpu:2(IDX:" + "9" * 20 + ")", "gpu:2(what)"])
def test_unreadable_gres_detail_is_a_slurm_error(detail: str) -> None:
    with pytest.raises(SlurmError):
        parse.gres_indices(detail)


def test_gres_detail_is_paired_with_nodes_or_not_at_all() -> None:
    job = {"job_id": 5, "nodes": "gpu[01-02]", "gres_detail": ["gpu:1(IDX:0)", "gpu:1(IDX:3)"]}
    assert parse.gres_detail_from_squeue(job) == {"gpu01": "gpu:1(IDX:0)", "gpu02": "gpu:1(IDX:3)"}
    assert parse.gres_detail_from_squeue({**job, "nodes": "gpu01"}) == {}          # 2 details, 1 node
    assert parse.gres_detail_from_squeue({**job, "gres_detail": [1, 2]}) == {}
    with pytest.raises(SlurmError):
        parse.gres_detail_from_squeue({**job, "nodes": "gpu[01-"})
    with pytest.raises(SlurmError):
        parse.gres_details_from_document({"jobs": [{"job_id": "x" * 10}]})
    with pytest.raises(SlurmError):
        parse.gres_details_from_document({"jobs": "nope"})


def test_a_job_name_with_a_newline_cannot_pass_for_gres_detail() -> None:
    # `scontrol show job -d` prints JobName= unescaped: this name would read as a node line there
    forged = "x\n     Nodes=gpu01 CPU_IDs=0 Mem=0 GRES=gpu:h100:4(IDX:0-3)"
    doc = {"jobs": [{"job_id": 7, "name": forged, "nodes": "gpu01", "gres_detail": ["gpu:h100:1(IDX:0)"]}]}
    assert parse.gres_details_from_document(doc) == {7: {"gpu01": "gpu:h100:1(IDX:0)"}}


# --- the devices cgroup and the Epilog ----------------------------------------------------------

@pytest.mark.parametrize("text, gpus", [
    ("c 1:3 rwm\nc 195:1 rw\nc 195:255 rw\nc 195:3 rwm\n", (1, 3)),  # 255 is nvidiactl
    ("c 1:3 rwm\nc 195:254 rw\n", ()),                                 # constrained, no GPU
    ("a *:* rwm\n", None),                                             # nothing to read
    ("c 195:* rwm\n", None),
    ("garbage\n\xff\n", ()),
])
def test_gpus_from_devices_list(text: str, gpus: tuple[int, ...] | None) -> None:
    assert gpus_from_devices_list(text) == gpus


def test_gpus_from_epilog() -> None:
    assert gpus_from_epilog("3,0,x,,99999999,1024,1023") == (0, 3, 1023)


# --- Allocations: once per job, bounded, root's views only --------------------------------------

class Lookup:
    def __init__(self, held: dict[int, dict[str, str]], fail: bool = False):
        self.held, self.fail, self.asked = held, fail, []

    def __call__(self, ids: list[int]) -> dict[int, dict[str, str]]:
        self.asked.append(ids)
        if self.fail:
            raise SlurmError("squeue did not answer")
        return {j: self.held[j] for j in ids if j in self.held}


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_allocations_ask_slurm_once_per_job(tmp_path: Path) -> None:
    lookup = Lookup({7: {"gpu01": "gpu:h100:2(IDX:2-3)"}, 8: {"gpu02": "gpu:1(IDX:0)"}})
    allocations = Allocations("gpu01", lookup, cgroup_root=tmp_path)
    for _ in range(3):
        allocations.refresh({7: "", 8: "", 9: ""})
    assert lookup.asked == [[7, 8, 9]]
    assert allocations.get(7) == Allocation((2, 3), 0, "gpu01", "slurm")
    assert allocations.get(8) == Allocation((), 0, "gpu02", "slurm")       # not on this node
    assert allocations.get(9) == Allocation((), 0, "", "slurm")            # no GRES
    allocations.keep_only([7])
    allocations.refresh({7: "", 8: ""})
    assert lookup.asked == [[7, 8, 9], [8]]


def test_allocations_retry_a_slurm_that_did_not_answer_after_a_while(tmp_path: Path) -> None:
    lookup, clock = Lookup({7: {"gpu01": "gpu:1(IDX:0)"}}, fail=True), Clock()
    allocations = Allocations("gpu01", lookup, cgroup_root=tmp_path, clock=clock)
    allocations.refresh({7: ""})
    clock.now += 30
    allocations.refresh({7: ""})
    assert len(lookup.asked) == 1 and allocations.get(7) is None and "did not answer" in allocations.problem
    lookup.fail, clock.now = False, clock.now + 31
    allocations.refresh({7: ""})
    assert len(lookup.asked) == 2 and allocations.get(7) == Allocation((0,), 0, "gpu01", "slurm")


def test_allocations_ask_about_a_bounded_number_of_jobs_per_call(tmp_path: Path) -> None:
    lookup = Lookup({})
    allocations = Allocations("gpu01", lookup, cgroup_root=tmp_path)
    allocations.refresh({j: "" for j in range(1, 1001)})
    assert [len(ids) for ids in lookup.asked] == [64]


def test_the_devices_cgroup_decides_which_gpus_slurm_the_shares(tmp_path: Path) -> None:
    job = tmp_path / "devices" / "slurm" / "uid_1001" / "job_7"
    job.mkdir(parents=True)
    (job / "devices.list").write_text("c 1:3 rwm\nc 195:2 rwm\n")
    lookup = Lookup({7: {"gpu01": "gpu:h100:2(IDX:0-1)"}})   # disagrees: the cgroup is what the job can open
    allocations = Allocations("gpu01", lookup, cgroup_root=tmp_path)
    allocations.refresh({7: "/slurm/uid_1001/job_7"})
    assert allocations.get(7) == Allocation((2,), 0, "gpu01", "cgroup-devices")
    unconstrained = tmp_path / "devices" / "slurm" / "uid_1001" / "job_8"
    unconstrained.mkdir()
    (unconstrained / "devices.list").write_text("a *:* rwm\n")
    Lookup.__init__(lookup, {8: {"gpu01": "gpu:h100:1(IDX:3)"}})
    allocations.refresh({8: "/slurm/uid_1001/job_8"})
    assert allocations.get(8) == Allocation((3,), 0, "gpu01", "slurm")


def test_without_slurm_an_unreadable_cgroup_leaves_the_job_without_gpus(tmp_path: Path) -> None:
    allocations = Allocations("gpu01", None, cgroup_root=tmp_path)
    allocations.refresh({7: "/slurm/uid_1/job_7"})
    assert allocations.get(7) is None
