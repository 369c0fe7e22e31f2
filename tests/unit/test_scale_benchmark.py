"""The scale benchmark's inputs (benchmarks/scale): generated Slurm answers that the real parser reads
whole, and a fake Slurm whose recorded writes are what the daemon's pass and slot did, so that the
benchmark cannot drift into measuring something else."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slurm_liquid.config import parse as parse_config
from slurm_liquid.daemon.admit import Admitter
from slurm_liquid.daemon.elastic import Adjuster
from slurm_liquid.daemon.journal import Journal
from slurm_liquid.ledger import Record, Tag, TagState
from slurm_liquid.ledger.placed import parse_placed
from slurm_liquid.slurm import parse
from slurm_liquid.topology import Topology

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "scale"))
from fakeslurm import client as fake_client  # noqa: E402
from generate import NOW, generate  # noqa: E402


@pytest.fixture(scope="module")
def scenario():
    return generate(64, 400, seed=1)


def test_generated_answers_are_read_whole_by_the_real_parser(scenario) -> None:
    skipped: list[str] = []
    jobs = parse.jobs_from_document(json.loads(scenario.squeue_text), "squeue", skipped)
    assert parse.jobs_from_output(scenario.squeue_text, "squeue", skipped) == jobs
    nodes = parse.nodes_from_output(scenario.nodes_text, "scontrol show nodes", skipped)
    assert skipped == [] and len(jobs) == 400 and len(nodes) == 64
    assert parse.document_version(json.loads(scenario.squeue_text)) == parse.document_version(
        json.loads((Path(parse.__file__).parents[2] / "tests/fixtures/slurm/24.11/squeue.json").read_text()))
    # the mix the benchmark promises: a quarter held by the daemon, a tenth elastic where it placed them
    tags = {j.job_id: Tag.parse(j.admin_comment) for j in jobs}
    held = [j for j in jobs if tags[j.job_id] and tags[j.job_id].state == TagState.HELD]
    elastic = [j for j in jobs if tags[j.job_id] and tags[j.job_id].state == TagState.PLACED and j.is_running]
    assert len(held) == 100 and all(j.is_pending for j in held)
    assert 20 <= len(elastic) <= 40 and all(tags[j.job_id].trusted.elastic for j in elastic)
    assert sum(label == "elastic" for label in scenario.kinds.values()) == len(elastic)
    for job in elastic:   # the tag names the nodes Slurm runs the job on
        assert set(parse_placed(tags[job.job_id].placed)) == set(job.nodes)
    assert all(Record.parse(j.comment) or j.comment.startswith("liquid:") for j in held)
    # nodes carry what the running jobs took
    by_name = {n.name: n for n in nodes}
    used: dict[str, int] = {}
    for job in jobs:
        if job.is_running:
            for name in job.nodes:
                used[name] = used.get(name, 0) + (job.gpus_per_node or job.gpus)
    assert all(by_name[name].gpus_alloc == gpus for name, gpus in used.items())
    assert 0.5 < sum(used.values()) / sum(n.gpus for n in nodes) <= 1.0
    # both topology texts describe the same tree: leaves of 32 nodes
    conf, shown = Topology.from_topology_conf(scenario.topology_conf), Topology.from_scontrol(scenario.scontrol_topology)
    assert conf.nodes == shown.nodes == [n.name for n in nodes]
    assert {len(shown.nodes_under(s)) for s in shown.switches if shown.level(s) == 0} == {32}


def test_the_fake_records_what_the_pass_and_the_slot_did(scenario, tmp_path) -> None:
    slurm, runner = fake_client(scenario)
    config = parse_config('[daemon]\nmode = "enforce"\n[elastic]\npolicy = "drf"\n')
    report = Admitter(slurm, config, slurm.topology(), now=lambda: NOW).run_pass()
    assert report.placed and report.renewed and not report.failed
    by_job: dict[int, list[dict]] = {}
    for job_id, fields in runner.updates:
        by_job.setdefault(job_id, []).append(fields)
    assert set(by_job) == set(report.placed) | set(report.renewed) | set(report.released) | set(report.annotated)
    for job_id, placed in report.placed.items():
        # an elastic job started below its ask has its count set first (Admitter._narrower)
        *counted, fields = by_job[job_id]
        assert Tag.parse(fields["AdminComment"]).placed == placed and fields["StartTime"] == "now"
        assert len(counted) <= 1 and all(set(c) == {"TresPerNode", "NumNodes", "ReqNodeList"} for c in counted)
        assert all(c["ReqNodeList"] == fields["ReqNodeList"] for c in counted)
    for job_id in report.renewed:
        assert by_job[job_id] == [{"StartTime": by_job[job_id][0]["StartTime"]}]
        assert by_job[job_id][0]["StartTime"].startswith("now+")
    # the slot: a checkpoint signal for every resize it started, nothing applied to the answers
    slurm, runner = fake_client(scenario)
    adjuster = Adjuster(slurm, config, slurm.topology(), Journal(str(tmp_path / "journal.sqlite")), now=lambda: NOW)
    slot = adjuster.run_slot()
    assert slot.decided and slot.started and sorted(j for _, j in runner.actions) == sorted(slot.started)
    assert {a for a, _ in runner.actions} <= {"signal"}
    assert parse.jobs_from_output(scenario.squeue_text, "squeue") == slurm.jobs()
