"""DL2's PS/worker action space on the paper replica: legal actions, teacher imitation, policy files."""

from dataclasses import replace

import numpy as np
import pytest

from slurm_liquid.errors import UsageError
from slurm_liquid.policy.dl2 import psworker as W
from slurm_liquid.policy.dl2 import psworker_train as T
from slurm_liquid.policy.dl2.io import save_policy
from slurm_liquid.policy.dl2.net import init_params
from slurm_liquid.sim import paper as P

TINY = replace(P.SETTINGS["dl2-paper-small"], name="tiny", nodes=6, jobs=8, window=50)


def tiny_run(seed: int = 0) -> P.PaperRun:
    return P.PaperRun(TINY, P.paper_trace(TINY, seed))


def test_rows_cover_three_roles_per_window_job_and_stop() -> None:
    jobs = P.paper_trace(TINY, 1)
    slot = P.Slot(TINY, 20, jobs)
    state = W.PSState(slot, window=3)
    assert state.rows() == 3 * 3 + 1 and state.beyond == len(jobs) - 3
    x = state.matrix()
    assert x.shape == (10, W.PS_FEATURES)
    assert x[-1, -1] == 1 and not x[:-1, -1].any()  # the stop flag
    assert (x[:-1, W.N_TYPES:W.N_TYPES + 3].sum(axis=1) == 1).all()  # one role per row
    valid = state.valid()
    assert valid[:-1].all() and not valid[-1]  # empty cluster: everything fits; stop only once a task is placed
    state.apply(2)  # a bundle for the first job
    assert state.jobs[0].ps == 1 and state.jobs[0].workers == 1 and state.placed == 1
    assert state.valid()[-1]


def test_actions_count_against_capacity_and_every_counted_task_is_placed() -> None:
    st = replace(TINY, nodes=1)  # 4 tasks, 2 GPU workers
    jobs = P.paper_trace(st, 0)[:2]
    slot = P.Slot(st, 5, jobs)
    state = W.PSState(slot, 10)
    while state.valid()[:-1].any():
        state.apply(int(np.flatnonzero(state.valid()[:-1])[0]))
    counted = [(j.ps, j.workers) for j in jobs]
    assert sum(p + w for p, w in counted) <= 4 and (slot.used == 0).all()  # nothing placed yet
    assert state.valid()[-1]  # only stop is left
    slot.finish()
    assert [(j.ps, j.workers) for j in jobs] == counted and (slot.used <= P.NODE_SLOTS).all()


@pytest.mark.parametrize("placement", P.PLACEMENTS)
@pytest.mark.parametrize("teacher, seed, roles", [
    (P.PaperDRF, 2, {2}),  # DRF adds bundles only
    (P.PaperHull, 5, {0, 1, 2}),  # hull's steps: workers, PS, and bundles where a step adds both
])
def test_imitating_a_teacher_reproduces_it_when_the_window_holds_every_job(teacher, seed, roles, placement) -> None:
    run = tiny_run(seed)
    run.placement = placement  # the teacher and its imitation under the same placement
    expected = run.run(teacher())
    steps: list = []
    imitated = run.run(T.Imitate(teacher(), TINY.window, steps))
    assert imitated.jcts == pytest.approx(expected.jcts)
    assert steps and all(s.valid[s.action] for s in steps)
    assert {s.action % 3 for s in steps if s.action != len(s.valid) - 1} == roles


def test_under_the_artifacts_placement_a_refused_action_ends_the_slot() -> None:
    st = replace(TINY, nodes=2)
    jobs = [P.PaperJob("dssm", 0, P.MODELS.index("dssm"), 0, 100.0), P.PaperJob("resnet", 1, 0, 0, 100.0)]
    slot = P.Slot(st, 0, jobs, "artifact")
    P.assign_bundles(slot)  # dssm's bundle on node 0 (4 CPU), resnet's on node 1 (4 CPU, 4 GPU)
    state = W.PSState(slot, 10)
    assert state.apply(state.action_of(jobs[0], "bundle"))  # node 0: 8 CPU used, 8 used in all
    # node 0 and node 1 (8 used) tie and node 0, with no CPU left, ranks first: the totals (2 of 8
    # tasks left, 1 GPU worker) allow a resnet worker, the artifact's rule refuses it and the slot ends
    worker = state.action_of(jobs[1], "worker")
    assert state.valid()[worker] and not state.apply(worker)
    assert (jobs[1].ps, jobs[1].workers) == (1, 1) and state.placed == 1
    pooled = P.Slot(st, 0, jobs, "cpu-first")
    P.assign_bundles(pooled)
    state = W.PSState(pooled, 10)
    assert state.apply(state.action_of(jobs[0], "bundle")) and state.apply(state.action_of(jobs[1], "worker"))


def test_imitating_the_best_split_uses_ps_and_worker_actions() -> None:
    steps = T.teacher_steps([tiny_run(3)], P.PaperBestSplit(), TINY.window)
    roles = {s.action % 3 for s in steps if s.action != len(s.valid) - 1}
    assert 1 in roles  # some extra PS


def test_greedy_policy_runs_a_trace_and_round_trips_through_a_file(tmp_path) -> None:
    params = init_params(W.PS_FEATURES, 16, 2, seed=1)
    run = tiny_run(4)
    res = run.run(W.PSWorkerDL2(params, TINY.window))
    assert len(res.jcts) == TINY.jobs
    path = save_policy(tmp_path / "ps.npz", params, {"window": TINY.window, "hidden": 16, "layers": 2,
                                                     "action_space": "ps-worker"}, features=W.PS_FEATURES)
    again = run.run(W.make_psworker_dl2(path))
    assert again.jcts == res.jcts


def test_files_of_the_other_action_space_are_refused(tmp_path) -> None:
    from slurm_liquid.policy.dl2.state import FEATURES

    pollux = save_policy(tmp_path / "pollux.npz", init_params(FEATURES, 8, 1), {"window": 64, "hidden": 8, "layers": 1})
    with pytest.raises(UsageError, match="not a PS/worker"):
        W.make_psworker_dl2(pollux)
    from slurm_liquid.policy.dl2 import make_dl2

    ps = save_policy(tmp_path / "ps.npz", init_params(W.PS_FEATURES, 8, 1),
                     {"window": 4, "hidden": 8, "layers": 1, "action_space": "ps-worker"}, features=W.PS_FEATURES)
    with pytest.raises(UsageError, match="PS/worker"):
        make_dl2(ps)  # and the GPU-count DL2 refuses the PS/worker file
    wrong = save_policy(tmp_path / "w.npz", init_params(W.PS_FEATURES, 8, 1), {"window": 4, "hidden": 8, "layers": 1},
                        features=W.PS_FEATURES)
    with pytest.raises(UsageError, match="not a PS/worker"):
        W.make_psworker_dl2(wrong)


@pytest.mark.parametrize("name", ["dl2-paper-small", "dl2-paper-large"])
def test_the_shipped_policy_of_each_setting_loads_for_it(name, monkeypatch, tmp_path) -> None:
    st = replace(P.SETTINGS[name], nodes=6, jobs=8)  # same name: the shipped file is chosen by it
    res = P.PaperRun(st, P.paper_trace(st, 0)).run(P.make_paper_policy("dl2"))
    assert len(res.jcts) == 8
    monkeypatch.setattr(W, "TRAINED_DIR", tmp_path)  # a setting with no file installed: one clear error
    with pytest.raises(UsageError, match=f"no DL2 policy trained for {name}"):
        P.PaperRun(st, P.paper_trace(st, 0)).run(P.make_paper_policy("dl2"))


def test_a_placement_uses_its_own_shipped_file_where_one_was_chosen(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(W, "TRAINED_DIR", tmp_path)
    (tmp_path / "dl2-paper-small.npz").write_bytes(b"")
    assert W.shipped_file("dl2-paper-small", "artifact") == tmp_path / "dl2-paper-small.npz"
    (tmp_path / "dl2-paper-small-artifact.npz").write_bytes(b"")
    assert W.shipped_file("dl2-paper-small", "artifact") == tmp_path / "dl2-paper-small-artifact.npz"
    assert W.shipped_file("dl2-paper-small", "cpu-first") == tmp_path / "dl2-paper-small.npz"
    assert W.shipped_file("dl2-paper-small") == tmp_path / "dl2-paper-small.npz"


def test_dagger_rounds_add_the_teachers_labels_of_the_students_slots() -> None:
    _, plain = T.warmup(TINY, P.PaperHull(), range(2), epochs=1, hidden=8, window=TINY.window)
    params, meta = T.warmup(TINY, P.PaperHull(), range(2), epochs=1, hidden=8, window=TINY.window, dagger=1)
    assert meta["training"]["dagger_rounds"] == 1 and meta["stages"][-1].startswith("DAgger round 1 on traces 2, 3")
    assert meta["training"]["decisions"] > plain["training"]["decisions"]  # the student's slots, labelled
    assert [row["dagger_round"] for row in meta["curve"] if "dagger_round" in row] == [1, 1, 1]
    assert len(P.PaperRun(TINY, P.paper_trace(TINY, 9)).run(W.PSWorkerDL2(params, TINY.window)).jcts) == TINY.jobs


ROOMY = replace(TINY, name="roomy", nodes=200)  # room for every job at its peak: hull = the bound


def test_a_sliding_window_lets_a_small_window_reach_every_job_where_a_fixed_one_cannot() -> None:
    run = P.PaperRun(ROOMY, P.paper_trace(ROOMY, 5))
    expected = run.run(P.PaperHull())
    fixed = run.run(T.Imitate(P.PaperHull(), 2, []))
    steps: list = []
    sliding = run.run(T.Imitate(P.PaperHull(), 2, steps, slide=True))
    assert sliding.jcts == pytest.approx(expected.jcts)
    assert fixed.avg_jct_s > expected.avg_jct_s * 1.05  # the later jobs keep their bundle
    assert steps and all(s.valid[s.action] for s in steps) and max(len(s.valid) for s in steps) == 3 * 2 + 1


def test_a_job_at_its_peak_leaves_a_sliding_window_and_the_next_one_enters() -> None:
    jobs = P.paper_trace(ROOMY, 1)
    slot = P.Slot(ROOMY, 20, jobs)
    P.assign_bundles(slot)
    state = W.PSState(slot, window=2, slide=True)
    first, waiting = state.jobs[0], len(state.waiting)
    assert waiting == len(jobs) - 2 and state.beyond == waiting
    while first in state.jobs:  # walk the first job up its hull to its peak
        ps, workers, _ = P.next_step(first.model, ROOMY.max_tasks, first.ps, first.workers)
        role = "bundle" if first.ps < ps and first.workers < workers else "ps" if first.ps < ps else "worker"
        state.apply(state.action_of(first, role))
    assert P.next_step(first.model, ROOMY.max_tasks, first.ps, first.workers) is None
    assert len(state.jobs) == 2 and state.beyond == waiting - 1 and state.rows() == 7
    assert state.matrix()[:-1, W.N_TYPES:W.N_TYPES + 3].sum() == 6  # rows rebuilt for the two window jobs
    fixed = W.PSState(P.Slot(ROOMY, 20, jobs), window=2)
    assert fixed.jobs == sorted(fixed.jobs, key=lambda j: j.arrival) and fixed.beyond == len(jobs) - 2


def test_a_file_trained_with_a_sliding_window_says_so_and_slides_when_loaded(tmp_path) -> None:
    params, meta = T.warmup(ROOMY, P.PaperHull(), range(2), epochs=1, hidden=8, window=2, slide=True)
    assert meta["window_slides"] is True
    path = save_policy(tmp_path / "s.npz", params, meta, features=W.PS_FEATURES)
    assert W.make_psworker_dl2(path).slide
    old = save_policy(tmp_path / "o.npz", params, {k: v for k, v in meta.items() if k != "window_slides"},
                      features=W.PS_FEATURES)
    assert not W.make_psworker_dl2(old).slide  # files from before the option keep the artifact's window
