"""DL2 training: the warm-up imitates DRF on held-out states, RL is deterministic and resumable."""

import argparse
import dataclasses

import numpy as np
import pytest

from slurm_liquid.policy import make_policy
from slurm_liquid.policy.dl2.agent import DL2Policy
from slurm_liquid.policy.dl2.net import Adam
from slurm_liquid.loop import PlaceStage
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy.dl2.train import (RLConfig, TrainState, agreement, new_params, policy_weights, returns,
                                           supervised, teacher_counts)
from slurm_liquid.sim.engine import Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel
from slurm_liquid.sim.world import World
from slurm_liquid.training.episodes import collect_on_policy, collect_teacher, rollout, train_rl

from .dl2_fixtures import CONFIG, small_workload

SPEED = OracleSpeedModel(4)
ARTIFACT_PLACE = PlaceStage(MostFreeGreedy())


def world(specs) -> World:
    return World.pollux(specs, CONFIG)


@pytest.fixture(scope="module")
def warm():
    drf = make_policy("drf")
    train = [s for seed in range(3) for s in collect_teacher(world(small_workload(seed)), drf, 32, SPEED, max_slots=60)]
    held = [s for seed in (100, 101) for s in collect_teacher(world(small_workload(seed)), drf, 32, SPEED, max_slots=60)]
    params = new_params(32, 2, seed=0)
    before = agreement(params, held)
    result = supervised(params, train, held, epochs=12, lr=3e-3, batch_size=64, seed=0)
    return result, before, held


def test_warmup_reaches_high_agreement_with_drf_on_held_out_states(warm):
    result, before, held = warm
    assert len(held) > 200
    assert result.curve[-1]["held_out_agreement"] >= 0.95
    assert result.curve[-1]["held_out_agreement"] > before


def test_warm_policy_schedules_like_drf_on_an_unseen_workload(warm):
    result, _, _ = warm
    specs = small_workload(200)
    dl2 = Simulator(specs, CONFIG).run(DL2Policy(result.params, window=32, speed=SPEED))
    drf = Simulator(specs, CONFIG).run(make_policy("drf"))
    assert len(dl2.jcts) == len(specs)
    assert abs(dl2.avg_jct_s - drf.avg_jct_s) / drf.avg_jct_s < 0.1


def test_returns_share_the_slot_return_and_discount_across_slots():
    from slurm_liquid.policy.dl2.agent import Slot, Step

    step = Step(np.zeros((1, 1)), np.ones(1, bool), 0)
    slots = [Slot([step, step], reward=1.0), Slot([step], reward=2.0)]
    assert [g for _, g, _ in returns(slots, 0.5, bootstrap=4.0)] == [1 + 0.5 * (2 + 0.5 * 4)] * 2 + [2 + 0.5 * 4]
    # With the critic's values: TD errors 1 + 0.5*3 - 2 = 0.5 and 2 + 0.5*4 - 3 = 1, summed with gamma*lambda.
    gae = returns(slots, 0.5, bootstrap=4.0, values=[2.0, 3.0], lam=0.5)
    assert [a for _, _, a in gae] == [0.5 + 0.25 * 1.0] * 2 + [1.0]
    assert [t for _, t, _ in gae] == [2.75, 2.75, 4.0]


def test_explored_actions_carry_their_behaviour_probability():
    params = new_params(8, 2, seed=3)
    policy = DL2Policy(params, window=8, speed=SPEED, sample=True, explore=1.0, seed=2)
    policy.record = []
    Simulator(small_workload(11, jobs=4), CONFIG).run(policy)
    steps = [s for slot in policy.record for s in slot.steps]
    assert steps and all(0 < s.behaviour <= 1 for s in steps)
    # always exploring: every action is a uniform pick among the jobs that can take a GPU
    assert all(s.behaviour == pytest.approx(1 / s.valid[:-1].sum()) for s in steps)


def _rl(episodes, state=None, **kw):
    kw.setdefault("critic_warmup", 0)
    cfg = RLConfig(episodes=episodes, jobs=6, pool=2, max_slots=40, updates=2, batch_size=64, window=8, **kw)
    if state is None:
        params = new_params(8, 2, seed=1)
        state = TrainState(params, Adam(params, lr=cfg.lr))
    validation = {"v": world(small_workload(300, jobs=4))}
    pool = [world(small_workload(10_000 + cfg.seed * 1000 + k, jobs=cfg.jobs)) for k in range(cfg.pool)]
    return train_rl(state, cfg, pool, lambda: SPEED, validation, eval_every=2)


def test_rl_is_deterministic_given_its_seed():
    a, b = _rl(2), _rl(2)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert [r.get("reward_per_slot") for r in a.curve] == [r.get("reward_per_slot") for r in b.curve]
    assert a.curve[0]["episode"] == 0 and a.best is not None  # the starting point is validated too
    assert "validation_avg_jct_s" in a.curve[-1]
    c = _rl(2, seed=5)
    assert not np.array_equal(a.params["W0"], c.params["W0"])


def test_rl_resumes_from_its_state_and_ablations_run():
    half = _rl(1)
    resumed = _rl(2, state=dataclasses.replace(half))
    assert resumed.episode == 2 and [r["episode"] for r in resumed.curve] == [0, 1, 2]
    for kw in ({"critic": False}, {"replay": False}, {"job_aware": False}, {"ppo_clip": 0.2}):
        assert _rl(1, **kw).episode == 1


def test_ppo_clip_stops_a_decision_once_the_policy_moved_past_the_bound():
    adv = np.array([1.0, 1.0, -1.0, -1.0, 1.0])
    ratio = np.array([1.1, 1.5, 0.9, 0.5, 0.5])
    assert np.allclose(policy_weights(adv, ratio), [1.0, 1.0, -0.9, -0.5, 0.5])  # truncated IS
    # clip 0.2: ratio 1.5 with A > 0 and 0.5 with A < 0 are past their bound; below-bound ratios still pull
    assert np.allclose(policy_weights(adv, ratio, 0.2), [1.1, 0.0, -0.9, 0.0, 0.5])


def test_critic_warmup_fits_the_value_head_and_leaves_the_policy_alone():
    start = new_params(8, 2, seed=1)
    trained = _rl(2, critic_warmup=2)
    assert all(np.array_equal(trained.params[k], start[k]) for k in start if k not in ("wv", "bv"))
    assert not np.array_equal(trained.params["wv"], start["wv"])


def test_greedy_policy_is_deterministic():
    params = new_params(8, 2, seed=2)
    specs = small_workload(7, jobs=5)
    runs = [Simulator(specs, CONFIG).run(DL2Policy(params, window=8, speed=SPEED)).jcts for _ in range(2)]
    assert runs[0] == runs[1]


def test_jct_reward_is_minus_active_jobs_and_restart_delay():
    specs = small_workload(11, jobs=4)
    policy = DL2Policy(new_params(8, 2, seed=3), window=8, speed=SPEED, sample=True, seed=1)
    slots, last, _ = rollout(policy, world(specs), weight=1.0, max_slots=20, reward="jct", speed=SPEED)
    assert len(slots) == 20 and last is not None
    for slot in slots:
        active_part = -slot.reward - slot.restarts * CONFIG.restart_penalty / CONFIG.interval
        assert active_part == pytest.approx(round(active_part)) and 1 <= round(active_part) <= 4


def test_shipped_policies_load_and_match_the_restart_penalty():
    from slurm_liquid.policy.dl2.io import SHIPPED, load_policy, shipped_for

    assert shipped_for(30) == SHIPPED[30.0] and shipped_for(200) == SHIPPED[150.0]
    for path in SHIPPED.values():
        params, meta = load_policy(path)
        assert path.stat().st_size < 2_000_000
        assert "Philly" in meta["training"]["workloads"] and meta["restart_penalty"] in (30.0, 150.0)


def test_dagger_labels_the_states_the_student_reaches_with_the_teachers_counts():
    from slurm_liquid.policy.dl2.state import SlotState

    specs = small_workload(7, jobs=12, gap=30)
    srtf = make_policy("srtf", SPEED)
    student = DL2Policy(new_params(32, 1, seed=3), window=32, speed=SPEED)  # untrained: far from the teacher
    steps = collect_on_policy(world(specs), student, srtf, 32, SPEED, max_slots=30)
    own = collect_teacher(world(specs), srtf, 32, SPEED, max_slots=30)
    assert steps and own
    assert any(a.x.shape != b.x.shape or not np.array_equal(a.x, b.x) for a, b in zip(steps, own))  # the student's states
    # each slot's labels lead to the teacher's counts for the student's view: replay the first slot
    sim = Simulator(specs, CONFIG)
    view = sim.reset()
    target = teacher_counts(view, ARTIFACT_PLACE.place(view, srtf.decide(view)))
    state = SlotState(view, 32, SPEED)
    for step in steps:
        if step.action == len(state.jobs):
            break
        state.apply(step.action)
    assert state.counts() == target


def test_dagger_on_the_command_line_records_its_rounds_and_refuses_bad_loads(tmp_path, capsys):
    from slurm_liquid.cli import main
    from slurm_liquid.policy.dl2.io import load_policy

    out = tmp_path / "d.npz"
    base = ["policy", "train", "--supervised", "--teacher", "srtf", "--out", str(out), "--jobs", "10",
            "--warmup-workloads", "1", "--warmup-epochs", "2", "--hidden", "8"]
    assert main(base + ["--dagger", "1", "--dagger-loads", "0.1"]) == 0
    meta = load_policy(out)[1]
    assert meta["training"]["dagger"]["rounds"] == 1 and meta["training"]["dagger"]["loads"] == [0.1]
    assert meta["stages"][-1] == "1 DAgger rounds on srtf"
    out.unlink()
    assert main(base + ["--dagger", "1", "--dagger-loads", "x"]) == 2
    assert "--dagger-loads 'x'" in capsys.readouterr().err
    assert main(["policy", "train", "--supervised", "--teacher", "sacct", "--history", "h.json", "--dagger", "1",
                 "--out", str(out)]) == 2
    assert not out.exists()


def test_a_file_taught_by_the_restart_aware_teacher_ranks_waiting_jobs_as_it_did(tmp_path):
    from slurm_liquid.cli import main
    from slurm_liquid.policy.dl2 import make_dl2
    from slurm_liquid.policy.dl2.io import load_policy

    out, init = tmp_path / "r.npz", tmp_path / "plain.npz"
    common = ["--jobs", "10", "--warmup-workloads", "1", "--warmup-epochs", "1", "--hidden", "8", "--restart-penalty", "150"]
    assert main(["policy", "train", "--supervised", "--teacher", "srtf-restart", "--out", str(out)] + common) == 0
    assert load_policy(out)[1]["start_margin"] == 8.0
    assert make_dl2(out, SPEED).start_margin == 8.0
    assert main(["policy", "train", "--supervised", "--teacher", "srtf", "--out", str(init)] + common) == 0
    assert make_dl2(init, SPEED).start_margin == 0.0
    # RL from a file keeps the ranking it was taught with
    rl = tmp_path / "rl.npz"
    assert main(["policy", "train", "--rl", "--init", str(out), "--out", str(rl), "--episodes", "1", "--jobs", "6",
                 "--validation-workloads", "1", "--validation-jobs", "6", "--hidden", "8", "--restart-penalty", "150"]) == 0
    assert load_policy(rl)[1]["start_margin"] == 8.0
    # imitation again from a file, with jobs that scale their batch (how the shipped 150 s file was made):
    # the stages say so, and the init file's own imitation record is kept
    tuned = tmp_path / "tuned.npz"
    assert main(["policy", "train", "--supervised", "--teacher", "srtf-restart", "--init", str(out), "--batch-scaling",
                 "--out", str(tuned)] + common) == 0
    meta = load_policy(tuned)[1]
    assert meta["stages"][-2:] == ["init from r.npz", "supervised on srtf-restart (jobs scale their batch)"]
    assert meta["batch_scaling"] is True and meta["start_margin"] == 8.0
    assert meta["training"]["earlier"][0]["warmup"]["teacher"] == "srtf-restart"
    assert meta["training"]["warmup"]["teacher"] == "srtf-restart"


@pytest.mark.parametrize("bad", ["8", -1.0, float("nan"), 1e9, True])
def test_a_policy_file_with_a_bad_start_margin_is_refused_with_a_message(tmp_path, bad):
    from slurm_liquid.errors import UsageError
    from slurm_liquid.policy.dl2 import make_dl2
    from slurm_liquid.policy.dl2.io import SHIPPED, load_policy, save_policy

    params, meta = load_policy(SHIPPED[30.0])
    path = save_policy(tmp_path / "bad.npz", params, {**meta, "start_margin": bad})
    with pytest.raises(UsageError, match="start_margin"):
        make_dl2(path, SPEED)


def test_a_file_taught_by_the_completion_rate_teacher_reads_the_rate_column(tmp_path):
    from slurm_liquid.cli import main
    from slurm_liquid.policy.dl2 import make_dl2
    from slurm_liquid.policy.dl2.io import load_policy

    out, tuned = tmp_path / "rate.npz", tmp_path / "tuned.npz"
    common = ["--jobs", "10", "--warmup-workloads", "1", "--warmup-epochs", "1", "--hidden", "8", "--restart-penalty", "150"]
    assert main(["policy", "train", "--supervised", "--teacher", "completion-rate", "--dagger", "1", "--dagger-loads", "1",
                 "--out", str(out)] + common) == 0
    meta = load_policy(out)[1]
    assert meta["rate_column"] is True and meta["start_margin"] == 8.0
    assert make_dl2(out, SPEED).rate
    # fine-tuned from it (as the shipped files are), it keeps the column
    assert main(["policy", "train", "--supervised", "--teacher", "completion-rate", "--init", str(out), "--batch-scaling",
                 "--out", str(tuned)] + common) == 0
    assert load_policy(tuned)[1]["rate_column"] is True


def test_the_teacher_margin_is_the_teachers_and_the_files_and_is_checked(tmp_path, capsys):
    from slurm_liquid.cli import main
    from slurm_liquid.policy.dl2 import make_dl2
    from slurm_liquid.training.cli import make_teacher
    from slurm_liquid.policy.dl2.io import load_policy

    out = tmp_path / "m1.npz"
    common = ["--jobs", "10", "--warmup-workloads", "1", "--warmup-epochs", "1", "--hidden", "8", "--out", str(out)]
    assert main(["policy", "train", "--supervised", "--teacher", "completion-rate", "--teacher-margin", "1",
                 "--dagger", "1", "--dagger-loads", "1"] + common) == 0
    meta = load_policy(out)[1]
    assert meta["start_margin"] == 1.0 and meta["rate_column"] is True
    assert meta["stages"] == ["supervised on completion-rate (margin 1)", "1 DAgger rounds on completion-rate (margin 1)"]
    assert make_dl2(out, SPEED).start_margin == 1.0    # the RATE column prices a change as the teacher did
    args = argparse.Namespace(teacher="srtf-restart", teacher_margin=0.5)
    teacher = make_teacher(args, SPEED)
    assert (teacher.start_margin, teacher.resize_margin) == (0.5, 0.5)
    assert make_teacher(argparse.Namespace(teacher="completion-rate", teacher_margin=None), SPEED).resize_margin == 8.0
    out.unlink()
    for bad, says in ((["--teacher", "drf", "--teacher-margin", "1"], "teachers that count restarts"),
                      (["--teacher", "completion-rate", "--teacher-margin", "-1"], "--teacher-margin -1"),
                      (["--teacher", "completion-rate", "--teacher-margin", "nan"], "--teacher-margin nan")):
        assert main(["policy", "train", "--supervised"] + bad + common) == 2, bad
        assert says in capsys.readouterr().err, bad
        assert not out.exists()


def test_a_file_from_before_the_rate_column_reads_it_with_a_zero_weight_and_decides_as_before(tmp_path):
    import numpy as np

    from slurm_liquid.errors import UsageError
    from slurm_liquid.policy.dl2 import make_dl2
    from slurm_liquid.policy.dl2.io import SHIPPED, load_policy, save_policy
    from slurm_liquid.policy.dl2.state import FEATURES, RATE

    params, meta = load_policy(SHIPPED[30.0])
    meta = {k: v for k, v in meta.items() if k != "rate_column"}
    before = save_policy(tmp_path / "before.npz", {**params, "W0": params["W0"][:RATE]}, meta, features=RATE)
    loaded, loaded_meta = load_policy(before)
    assert loaded["W0"].shape[0] == FEATURES and loaded_meta["features"] == FEATURES
    assert np.array_equal(loaded["W0"][:RATE], params["W0"][:RATE]) and not loaded["W0"][RATE].any()
    zeroed = save_policy(tmp_path / "zeroed.npz", loaded, meta)
    sim = Simulator(small_workload(3, jobs=8), CONFIG)
    assert sim.run(make_dl2(before, SPEED)).jcts == Simulator(small_workload(3, jobs=8), CONFIG).run(make_dl2(zeroed, SPEED)).jcts
    short = save_policy(tmp_path / "short.npz", {**params, "W0": params["W0"][:RATE - 1]}, meta, features=RATE - 1)
    with pytest.raises(UsageError, match="features"):
        load_policy(short)
