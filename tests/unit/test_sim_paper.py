"""The replica of the DL2 paper's setting: trace, speed table, the artifact's DRF and Optimus, the CLI."""

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_liquid.cli import main
from slurm_liquid.errors import UsageError
from slurm_liquid.sim import paper as P


def small(**kw) -> P.PaperSetting:
    return replace(P.SETTINGS["dl2-paper-small"], **kw)


def test_trace_follows_the_artifact_generator() -> None:
    st = P.SETTINGS["dl2-paper-small"]
    jobs = P.paper_trace(st, 3)
    assert len(jobs) == 60
    per_slot = np.bincount([j.arrival for j in jobs])
    assert per_slot.max() <= 3  # at most MAX_ARRVS_PER_TS
    for j in jobs:
        assert j.epochs == int(P.EPOCH_FRACTION[j.model] * 80_000)  # fixed length per type
    assert [(j.model, j.arrival) for j in P.paper_trace(st, 3)] == [(j.model, j.arrival) for j in jobs]
    assert [j.model for j in P.paper_trace(st, 4)] != [j.model for j in jobs]
    large = P.paper_trace(P.SETTINGS["dl2-paper-large"], 0)
    assert len(large) == 200 and np.bincount([j.arrival for j in large]).max() <= 10
    with pytest.raises(UsageError):
        P.paper_trace(st, -1)


def test_speed_table_interpolates_the_measured_points() -> None:
    resnet, vgg, seq2seq = 0, 1, 4
    # one-to-one splits peak near 5 pairs and fall after (the figures)
    assert P.samples_per_s(resnet, 5, 5) == pytest.approx(38.55, abs=0.01)
    assert P.samples_per_s(resnet, 8, 8) == pytest.approx(31.10, abs=0.01)
    assert P.samples_per_s(vgg, 12, 12) == pytest.approx(10.06, abs=0.01)
    assert P.samples_per_s(seq2seq, 11, 11) == pytest.approx(265.6, abs=0.1)
    # PS-heavy splits are faster at the same task count
    assert P.samples_per_s(resnet, 20, 2) > 1.5 * P.samples_per_s(resnet, 11, 11)
    assert P.samples_per_s(resnet, 0, 4) == 0 and P.samples_per_s(resnet, 3, 0) == 0
    assert P.samples_per_s(resnet, 7, 6) > 0  # between the points
    # every record of the artifact's file: vgg-16 slows from 4 to 5 PS on one worker (where Optimus' climb
    # stops), and a failed all-zero record is kept, as the artifact's interpolation keeps it
    assert P.samples_per_s(vgg, 4, 1) == pytest.approx(18.70, abs=0.01)
    assert P.samples_per_s(vgg, 5, 1) == pytest.approx(17.75, abs=0.01)
    assert P.samples_per_s(vgg, 4, 8) == pytest.approx(0.0, abs=1e-6)


def test_drf_hands_out_bundles_by_dominant_share_within_capacity() -> None:
    st = small(nodes=4)
    jobs = P.paper_trace(st, 0)[:5]
    slot = P.Slot(st, 10, jobs)
    P.PaperDRF().schedule(slot)
    assert (slot.used <= P.NODE_SLOTS).all()
    assert all(j.ps == j.workers for j in jobs)  # bundles only
    counts = sorted(j.workers for j in jobs)
    assert counts[-1] - counts[0] <= 1 or all(j.workers == st.max_tasks for j in jobs)
    assert sum(j.workers for j in jobs) >= 4  # a 4-node cluster takes at least one bundle per node


def test_best_split_keeps_drf_task_counts_and_is_at_least_as_fast() -> None:
    st = small(nodes=6)
    jobs = P.paper_trace(st, 1)[:4]
    slot = P.Slot(st, 5, jobs)
    P.PaperDRF().schedule(slot)
    drf = {j.id: (j.ps, j.workers, j.epochs_per_slot()) for j in jobs}
    slot = P.Slot(st, 5, jobs)
    P.PaperBestSplit().schedule(slot)
    for j in jobs:
        ps, w, speed = drf[j.id]
        assert j.ps + j.workers == ps + w and j.ps >= 1 and j.workers >= 1
        assert j.epochs_per_slot() >= speed


def test_optimus_starts_every_job_with_a_worker_and_a_ps() -> None:
    st = small(nodes=20)
    jobs = P.paper_trace(st, 2)[:6]
    slot = P.Slot(st, 0, jobs)
    P.PaperOptimus().schedule(slot)
    assert all(j.ps >= 1 and j.workers >= 1 for j in jobs)
    assert all(j.ps <= st.max_tasks and j.workers <= st.max_tasks for j in jobs)
    assert (slot.used <= P.NODE_SLOTS).all()


@settings(max_examples=200, deadline=None)
@given(nodes=st.integers(1, 8), jobs=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 12), st.integers(1, 12)),
                                             min_size=1, max_size=14))
def test_cpu_first_placement_places_any_counts_within_capacity(nodes, jobs) -> None:
    setting = small(nodes=nodes)
    trace = [P.PaperJob(f"j{i}", i, model, 0, 100.0) for i, (model, _, _) in enumerate(jobs)]
    tasks_left, gpu_left = P.capacity(setting)
    targets = {}
    for job, (_, ps, workers) in zip(trace, jobs):
        gpus = workers * P.uses_gpu(job)
        if ps + workers <= tasks_left and gpus <= gpu_left:
            targets[job.id] = (ps, workers)
            tasks_left, gpu_left = tasks_left - ps - workers, gpu_left - gpus
    slot = P.Slot(setting, 0, trace)
    P.place_cpu_first(slot, targets)
    assert {j.id: (j.ps, j.workers) for j in trace if j.id in targets} == targets
    assert (slot.used <= P.NODE_SLOTS).all()


def test_next_step_adds_tasks_only_while_they_speed_the_job_up() -> None:
    resnet, cap = 0, 32
    assert P.next_step(resnet, cap, 1, 1)[:2] == (3, 1)  # 2 more PS at once: 3 PS, 1 worker is 3x one of each
    ps, workers, speed = 1, 1, 0.0
    while (step := P.next_step(resnet, cap, ps, workers)) is not None:
        assert step[0] >= ps and step[1] >= workers and step[2] > speed
        ps, workers, speed = step
    assert speed == pytest.approx(P.peak_speed(resnet, cap))


def test_hull_fills_the_cluster_within_caps_and_beats_the_artifact_baselines() -> None:
    setting = P.SETTINGS["dl2-paper-small"]
    jobs = P.paper_trace(setting, 10_000)[:40]
    slot = P.Slot(setting, 20, jobs, "cpu-first")
    P.PaperHull().schedule(slot)
    assert (slot.used == 0).all()  # counted, not yet placed
    slot.finish()
    assert all(1 <= j.ps <= setting.max_tasks and 1 <= j.workers <= setting.max_tasks for j in jobs)
    assert (slot.used <= P.NODE_SLOTS).all() and slot.used[:, 0].sum() == setting.nodes * P.NODE_SLOTS  # every CPU
    res = P.run_paper("dl2-paper-small", 10_000, ["optimus", "drf-best-split", "hull"])
    assert res["hull"].avg_jct_s < 0.9 * res["optimus"].avg_jct_s


@pytest.mark.parametrize("placement", P.PLACEMENTS)
def test_every_policy_runs_under_either_placement_within_the_nodes(placement) -> None:
    setting = small(nodes=8, jobs=12)
    seen: list = []

    class Watch:
        def __init__(self, policy) -> None:
            self.policy, self.name = policy, policy.name

        def reset(self) -> None:
            self.policy.reset()

        def schedule(self, slot: P.Slot) -> None:
            self.policy.schedule(slot)
            counts = [(j.ps, j.workers) for j in slot.jobs]
            slot.finish()  # the run finishes it again: under cpu-first a second placement of the same counts
            assert [(j.ps, j.workers) for j in slot.jobs] == counts  # nothing counted is lost
            assert (slot.used <= P.NODE_SLOTS).all()
            tasks = sum(p + w for p, w in counts)
            if placement == "artifact" or self.name != "drf-best-split":
                assert slot.used[:, 0].sum() == 2 * tasks  # every task is on a node (2 CPU slots each)
            seen.append(tasks)

        def __getattr__(self, name):
            return getattr(self.policy, name)

    for name in ("drf", "optimus", "drf-best-split", "hull"):
        run = P.PaperRun(setting, P.paper_trace(setting, 2), placement=placement)
        res = run.run(Watch(P.make_paper_policy(name)))
        assert len(res.jcts) == setting.jobs
    assert max(seen) > 0


def test_the_artifacts_placement_refuses_a_task_the_pooled_totals_take() -> None:
    setting = small(nodes=2)  # 8 tasks, 4 GPU workers in total
    slots = {}
    for placement in P.PLACEMENTS:
        dssm, resnet = P.PaperJob("dssm", 0, P.MODELS.index("dssm"), 0, 100.0), P.PaperJob("resnet", 1, 0, 0, 100.0)
        slot = slots[placement] = P.Slot(setting, 0, [dssm, resnet], placement)
        assert slot.add(resnet, "worker")  # node 0: (2 CPU, 4 GPU), 6 used
        assert slot.add(dssm, "bundle") and slot.add(dssm, "bundle")  # node 1: (8 CPU, 0 GPU), 8 used
        assert slot.add(resnet, "worker")  # node 0: (4, 8), 12 used
        # node 1 now ranks least used but has no CPU left: the artifact's rule refuses the PS that
        # node 0 has room for; the totals (6 of 8 tasks) take it
        assert slot.add(resnet, "ps") == (placement == "cpu-first")
        slot.finish()
        assert (slot.used <= P.NODE_SLOTS).all() and slot.used.sum() == 2 * 6 + 4 * 2 + 2 * (placement == "cpu-first")
        assert (resnet.ps, resnet.workers) == ((1, 2) if placement == "cpu-first" else (0, 2))
    with pytest.raises(UsageError, match="unknown placement"):
        P.Slot(setting, 0, [], "best-fit")


def test_lone_job_jct_is_its_fractional_run_time() -> None:
    st = small(nodes=2, jobs=1)
    job = P.PaperJob("r", 0, 0, 0, 1000.0)
    run = P.PaperRun(st, [job])
    res = run.run(P.PaperDRF())
    # 2 nodes take 4 bundles (CPU: 8 slots / (2 + 2) per bundle per node, x 2 nodes)
    per_slot = P.samples_per_s(0, 4, 4) * P.SLOT_S / P.EPOCH_SIZE[0]
    assert res.jcts["r"] == pytest.approx(1000.0 / per_slot * P.SLOT_S)
    assert res.avg_jct_s == res.jcts["r"]


def test_replica_reproduces_the_direction_of_the_paper() -> None:
    res = P.run_paper("dl2-paper-small", 10_000, ["drf", "optimus", "drf-best-split"], placement="artifact")
    drf = res["drf"].avg_jct_s
    assert res["optimus"].avg_jct_s < drf and res["drf-best-split"].avg_jct_s < 0.85 * drf


def test_cli_output_has_the_shape_of_the_other_workloads(capsys) -> None:
    assert main(["simulate", "--workload", "dl2-paper-small", "--seed", "10001",
                 "--policy", "drf,optimus", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["policy"] for o in out] == ["drf", "optimus"]
    for o in out:
        assert {"policy", "workload", "avg_jct_s", "makespan_s", "gpu_utilisation", "restarts", "jobs"} <= set(o)
        assert o["jobs"] == 60 and o["workload"] == "dl2-paper-small-seed10001"


def test_cli_rejects_policies_of_the_other_simulator(capsys) -> None:
    assert main(["simulate", "--workload", "dl2-paper-large", "--policy", "tiresias"]) == 2
    assert "not a policy for dl2-paper-large" in capsys.readouterr().err
