"""DL2's slot loop: legal actions, the beyond-window rule, and the teacher sequence reproducing DRF."""

import numpy as np
import pytest

from slurm_liquid.policy import make_policy
from slurm_liquid.views import ClusterView, JobView, NodeView
from slurm_liquid.policy.dl2.state import FEATURES, SlotState, target_sequence
from slurm_liquid.loop import PlaceStage
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy.dl2.train import teacher_counts

ARTIFACT_PLACE = PlaceStage(MostFreeGreedy())
from slurm_liquid.sim.engine import Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel

from .dl2_fixtures import CONFIG, small_workload


def _view(n_jobs, held=(), gpus=8, rigid=()):
    nodes = (NodeView("n0", gpus // 2), NodeView("n1", gpus // 2))
    jobs = []
    for i in range(n_jobs):
        alloc = (("n0", held[i]),) if i < len(held) and held[i] else ()
        jobs.append(JobView(f"j{i}", float(i), 2 if i in rigid else 1, allocation=alloc,
                            max_gpus=None if i in rigid else 4, app="cifar10", batch_size=256))
    return ClusterView(100.0, nodes, tuple(jobs))


def test_stop_is_illegal_until_some_job_holds_gpus_and_rigid_jobs_take_their_request():
    state = SlotState(_view(3, rigid=(1,)), window=4)
    assert state.matrix().shape == (4, FEATURES)
    valid = state.valid()
    assert valid[:3].all() and not valid[3]
    state.apply(1)
    assert state.assigned[1] == 2 and state.free == 6  # the rigid job starts at its whole request
    assert state.valid()[3]
    assert not state.valid()[1]  # rigid: at its upper bound


def test_no_legal_action_once_the_gpus_are_gone():
    state = SlotState(_view(2), window=4)
    for _ in range(8):
        state.apply(int(np.flatnonzero(state.valid()[:-1])[0]))
    assert not state.valid().any()
    assert state.counts() == [4, 4]


def test_jobs_beyond_the_window_keep_what_they_hold_if_it_fits():
    state = SlotState(_view(4, held=(0, 0, 3, 1)), window=2)
    state.apply(0)
    state.apply(1)
    assert state.counts() == [1, 1, 3, 1]
    full = SlotState(_view(4, held=(0, 0, 3, 1)), window=2)
    for _ in range(7):
        full.apply(0 if full.assigned[0] < 4 else 1)
    assert full.counts() == [4, 3, 1, 0]  # one GPU left: the third job falls back to its minimum


def test_the_window_takes_the_least_served_jobs_and_counts_come_back_in_arrival_order():
    view = _view(4, held=(2, 0, 0, 1))
    jobs = list(view.jobs)
    jobs[0] = JobView("j0", 0.0, 1, allocation=(("n0", 2),), max_gpus=4, app="cifar10", batch_size=256,
                      attained_gpu_seconds=7200.0)
    view = ClusterView(100.0, view.nodes, tuple(jobs))
    state = SlotState(view, window=3)
    assert [j.id for j in state.jobs] == ["j1", "j2", "j3"] and [j.id for j in state.beyond] == ["j0"]
    state.apply(0)
    state.apply(2)
    assert state.counts() == [2, 1, 0, 1]  # j0, beyond the window, keeps its 2 GPUs
    arrival = SlotState(view, window=3, order="arrival")
    assert [j.id for j in arrival.jobs] == ["j0", "j1", "j2"]


def test_teacher_sequence_reproduces_drf_counts():
    sim = Simulator(small_workload(3, jobs=12, gap=30), CONFIG)
    drf = make_policy("drf")
    view = sim.reset()
    checked = 0
    while view is not None and checked < 40:
        actions = ARTIFACT_PLACE.place(view, drf.decide(view))
        target = teacher_counts(view, actions)
        state = SlotState(view, window=32, speed=OracleSpeedModel(4))  # least-service order
        while True:
            valid = state.valid()
            if not valid.any():
                break
            a = target_sequence(state.assigned, state.window_targets(target), valid, state.index)
            if a == len(state.jobs):
                break
            state.apply(a)
        assert state.counts() == target
        checked += 1
        view = sim.step(actions)
    assert checked == 40


class _Speed:
    """Step time = base / gpus up to `flat`, then flat; remaining steps per job id."""

    def __init__(self, remaining: dict[str, float], flat: int = 4) -> None:
        self.remaining, self.flat = remaining, flat

    def iteration_time(self, job, gpus):
        return 1.0 / min(gpus, self.flat)

    def remaining_iterations(self, job):
        return self.remaining[job.id]


def test_ranking_columns_place_each_job_among_all_active_ones():
    from slurm_liquid.policy.dl2.state import ASKED, ASKED_AHEAD, GAIN, OVER_ASK, SRTF_RANK

    view = _view(3, rigid=(1,))  # j1 asks for 2 GPUs, the others for 1
    speed = _Speed({"j0": 3600.0, "j1": 7200.0, "j2": 360.0})  # run times at the ask: 3600, 3600, 360 s
    state = SlotState(view, window=4, speed=speed)
    x = state.matrix()
    assert list(state.srtf_rank) == [1, 2, 0]  # ties (j0, j1) by arrival
    assert np.allclose(x[:3, SRTF_RANK], [1 / 4, 2 / 4, 0.0])
    assert np.allclose(x[:3, ASKED_AHEAD], [1 / 8, 2 / 8, 0.0])  # GPUs asked by the shorter jobs / 8 GPUs
    assert np.allclose(x[:3, ASKED], [1 / 16, 2 / 16, 1 / 16])
    assert np.allclose(x[:3, OVER_ASK], [-1 / 4, -2 / 4, -1 / 4])
    assert x[2, GAIN] == np.log1p(0.5 * 360 / 3600)  # 1 -> 2 GPUs halves 360 steps of 1 s
    assert x[3, SRTF_RANK] == 0 and x[3, GAIN] == 0  # the stop row
    state.apply(2)
    state.apply(2)
    x = state.matrix()
    assert x[2, OVER_ASK] == 1 / 4
    assert x[2, GAIN] == np.log1p((1 / 2 - 1 / 3) * 360 / 3600)
    assert not SlotState(view, window=4).matrix()[:3, SRTF_RANK].any()  # no speed model: no ranking


def test_target_sequence_with_a_priority_fills_the_first_job_before_the_next():
    valid = np.array([True, True, True, True])
    assert target_sequence([0, 0, 0], [2, 1, 0], valid) == 0  # least served, first row
    assert target_sequence([1, 0, 0], [2, 1, 0], valid) == 1
    assert target_sequence([1, 0, 0], [2, 1, 0], valid, priority=[(0, 1.0), (0, 0.0), (0, 2.0)]) == 1
    assert target_sequence([1, 1, 0], [2, 1, 0], valid, priority=[(0, 1.0), (1, 0.0), (0, 2.0)]) == 0
    assert target_sequence([2, 1, 0], [2, 1, 0], valid, priority=[(0, 1.0), (1, 0.0), (0, 2.0)]) == 3  # stop


def test_shortest_first_imitation_reproduces_srtf_counts_in_its_own_order():
    from slurm_liquid.policy.dl2.train import imitation_steps

    sim = Simulator(small_workload(5, jobs=14, gap=20), CONFIG)
    speed = OracleSpeedModel(4)
    srtf = make_policy("srtf", speed)
    view = sim.reset()
    checked = 0
    while view is not None and checked < 30:
        actions = ARTIFACT_PLACE.place(view, srtf.decide(view))
        target = teacher_counts(view, actions)
        steps = imitation_steps(view, target, window=32, speed=speed, shortest_first=True)
        state = SlotState(view, window=32, speed=speed)
        window_target = state.window_targets(target)
        asks = [j.gpus for j in state.jobs]
        first_extra = None
        for k, step in enumerate(steps):
            if step.action == len(state.jobs):
                break
            i = step.action
            if state.assigned[i] >= min(asks[i], window_target[i]):
                first_extra = k if first_extra is None else first_extra
            else:  # every ask comes before every GPU beyond an ask, shortest job first
                assert first_extra is None
                shorter = [r for r in range(len(state.jobs)) if state.srtf_rank[r] < state.srtf_rank[i]]
                assert all(state.assigned[r] >= min(asks[r], window_target[r]) for r in shorter)
            state.apply(i)
        assert state.counts() == target
        checked += 1
        view = sim.step(actions)
    assert checked == 30


def test_the_restart_aware_ranking_puts_a_waiting_job_behind_a_running_one_it_barely_beats():
    view = _view(2, held=(1, 0))  # j0 runs on 1 GPU, j1 waits; both ask for 1
    speed = _Speed({"j0": 1000.0, "j1": 900.0})  # run times 1000 s and 900 s
    assert list(SlotState(view, window=4, speed=speed).srtf_rank) == [1, 0]
    assert list(SlotState(view, window=4, speed=speed, start_margin_s=300.0).srtf_rank) == [0, 1]  # 900 + 300 s


def test_restart_aware_imitation_gives_a_running_job_back_what_it_holds_before_the_spare_gpus():
    from slurm_liquid.policy.dl2.train import imitation_steps

    view = _view(2, held=(3, 0))  # j0 holds 3 (asked 1), j1 waits
    speed = _Speed({"j0": 100.0, "j1": 50_000.0})  # j1 gains far more from a spare GPU than j0
    target = [3, 4]
    plain = [s.action for s in imitation_steps(view, target, window=4, speed=speed, shortest_first=True)]
    keep = [s.action for s in imitation_steps(view, target, window=4, speed=speed, shortest_first=True, keep_held=True)]
    assert plain[:2] == [0, 1] and plain[2:5] == [1, 1, 1]  # the asks, then the spare GPUs where they save most
    assert keep[:4] == [0, 1, 0, 0]  # the asks, then j0 back to the 3 it holds, then the rest
    for actions in (plain, keep):
        assert sorted(actions[:-1]) == [0, 0, 0, 1, 1, 1, 1] and actions[-1] == 2  # same counts, then stop


def test_rate_imitation_follows_the_completion_rate_plan_and_reproduces_its_counts():
    from slurm_liquid.policy.dl2.train import imitation_steps
    from slurm_liquid.training.episodes import teacher_slot
    from slurm_liquid.policy.rate import counts_of

    sim = Simulator(small_workload(5, jobs=14, gap=20), CONFIG)
    speed = OracleSpeedModel(4)
    teacher = make_policy("completion-rate", speed)
    margin = 8 * CONFIG.restart_penalty
    view = sim.reset()
    checked = in_order = 0
    while view is not None and checked < 30:
        actions, plan = teacher_slot(view, teacher)
        target = teacher_counts(view, actions)
        steps = imitation_steps(view, target, window=32, speed=speed, start_margin_s=margin, plan=plan)
        state = SlotState(view, window=32, speed=speed, start_margin_s=margin, rate=True)
        if target == counts_of(plan, len(view.jobs)):  # all placed: the actions are the plan's GPUs in its order
            expected = []
            for i, size in plan:
                row = state.index.index(i)
                first = not any(j == i for j, _ in plan[:plan.index((i, size))])
                expected += [row] * (size - view.jobs[i].least + 1 if first else size)
            assert [s.action for s in steps if s.action < len(state.jobs)] == expected
            in_order += len(plan) > 1
        for step in steps:
            if step.action < len(state.jobs):
                state.apply(step.action)
        assert state.counts() == target
        checked += 1
        view = sim.step(actions)
    assert checked == 30 and in_order >= 10


def test_the_rate_column_is_the_teachers_price_of_each_jobs_next_step_and_zero_without_it():
    import math

    from slurm_liquid.policy.dl2.state import RATE
    from slurm_liquid.policy.rate import best_step, rates

    view = ClusterView(100.0, (NodeView("n0", 4), NodeView("n1", 4)),
                       (JobView("j0", 0.0, 1, allocation=(("n0", 2),), max_gpus=4, app="cifar10", batch_size=256),
                        JobView("j1", 1.0, 2, max_gpus=4, app="cifar10", batch_size=256)), restart_penalty_s=150.0)
    speed = _Speed({"j0": 1000.0, "j1": 20_000.0})
    assert not SlotState(view, window=4, speed=speed, start_margin_s=1200.0).matrix()[:, RATE].any()
    state = SlotState(view, window=4, speed=speed, start_margin_s=1200.0, rate=True)
    x = state.matrix()
    for row, job in enumerate(state.jobs):
        gain, _ = best_step(rates(job, speed, 150.0, 8.0, 8.0), 0, 1, 4)
        assert x[row, RATE] == pytest.approx((math.log(gain) + 30) / 10)
    assert x[-1, RATE] == 0  # the stop row
    held = state.jobs.index(view.jobs[0])
    for _ in range(2):
        state.apply(held)
    assert state.rate_gain(held) == 0  # j0 is back at what it holds: any change costs more than it gains
