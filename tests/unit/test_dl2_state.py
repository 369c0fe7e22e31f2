"""DL2's slot loop: legal actions, the beyond-window rule, and the teacher sequence reproducing DRF."""

import numpy as np

from slurm_liquid.policy import make_policy
from slurm_liquid.policy.base import ClusterView, JobView, NodeView
from slurm_liquid.policy.dl2.state import FEATURES, SlotState, target_sequence
from slurm_liquid.policy.dl2.train import ARTIFACT_PLACE, teacher_counts
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
