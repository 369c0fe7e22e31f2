"""The completion-rate teacher: GPUs go, a step at a time, where they raise the sum of 1/T most."""

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_liquid.errors import UsageError
from slurm_liquid.policy import make_policy
from slurm_liquid.views import ClusterView, JobView, NodeView
from slurm_liquid.policy.rate import best_step, counts_of
from tests.unit.test_policy_srtf import _Speed  # linear up to flat[job] GPUs, remaining steps of 1 s

import pytest


def _view(asks, held=None, total=8, penalty=150.0, app="cifar10", rigid=()):
    nodes = (NodeView("n0", total // 2), NodeView("n1", total // 2))
    held = held or [0] * len(asks)
    jobs = tuple(JobView(f"j{i}", float(i), g, allocation=(("n0", h),) if h else (),
                         max_gpus=None if i in rigid else 8, app=app, batch_size=256)
                 for i, (g, h) in enumerate(zip(asks, held)))
    return ClusterView(0.0, nodes, jobs, restart_penalty_s=penalty)


def test_with_linear_speed_up_it_is_shortest_remaining_time_first():
    speed = _Speed({"j0": 90_000.0, "j1": 30_000.0, "j2": 60_000.0})
    assert make_policy("completion-rate", speed).allocate(_view([4, 4, 4])) == [0, 8, 0]


def test_a_job_that_stops_scaling_keeps_only_the_gpus_that_pay_and_the_rest_go_to_a_longer_one():
    speed = _Speed({"j0": 8_000.0, "j1": 80_000.0}, flat={"j0": 2})
    # SRTF would give j0 its ask of 8 first; past 2 GPUs j0 gains nothing, j1 everything
    assert make_policy("completion-rate", speed).allocate(_view([8, 8])) == [2, 6]
    assert make_policy("srtf", speed).allocate(_view([8, 8])) == [8, 0]


@pytest.mark.parametrize("remaining, count", [(2_000.0, 2), (200_000.0, 8)])
def test_a_running_job_changes_only_when_that_is_worth_its_restart_margin(remaining, count):
    speed = _Speed({"j0": remaining})  # 2 -> 8 GPUs cuts 1000 s to 250 s, or 100,000 s to 25,000 s
    assert make_policy("completion-rate", speed).allocate(_view([2], held=[2])) == [count]


def test_the_plan_adds_up_to_the_counts_and_ncf_and_rigid_jobs_keep_their_shapes():
    speed = _Speed({"j0": 1_000.0, "j1": 5_000.0, "j2": 9_000.0})
    view = _view([1, 3, 2], rigid=(1,))
    policy = make_policy("completion-rate", speed)
    plan = policy.plan(view)
    assert counts_of(plan, 3) == policy.allocate(view)
    assert [size for i, size in plan if i == 1] in ([], [3])  # rigid: all three at once or none
    ncf = _view([4, 4], app="ncf")
    assert make_policy("completion-rate", _Speed({"j0": 10.0, "j1": 20.0})).allocate(ncf) == [1, 1]


def test_best_step_takes_the_run_with_the_best_gain_per_gpu():
    rate = {0: 0.0, 1: 1.0, 2: 1.1, 3: 4.0}.__getitem__  # a peak at 3 (what the job holds)
    assert best_step(rate, 0, 1, 3) == (pytest.approx(4 / 3), 3)
    assert best_step(rate, 1, 1, 3) == (pytest.approx(1.5), 2)
    assert best_step(rate, 3, 1, 3) == (0.0, 0)
    assert best_step(rate, 0, 2, 2) == (pytest.approx(0.55), 2)  # a job at 0 steps to at least its least


def test_completion_rate_needs_a_speed_model():
    with pytest.raises(UsageError, match="completion-rate needs a speed model"):
        make_policy("completion-rate")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 4), st.floats(10.0, 1e6), st.integers(1, 8)),
                min_size=1, max_size=12),
       st.sampled_from([30.0, 150.0]))
def test_counts_stay_within_the_cluster_and_each_jobs_bounds(jobs, penalty):
    held = [h for _, h, _, _ in jobs]
    if sum(held) > 8:
        held = [0] * len(jobs)
    speed = _Speed({f"j{i}": r for i, (_, _, r, _) in enumerate(jobs)}, {f"j{i}": f for i, (*_, f) in enumerate(jobs)})
    view = _view([a for a, *_ in jobs], held=held, penalty=penalty, rigid=(0,))
    counts = make_policy("completion-rate", speed).allocate(view)
    assert sum(counts) <= 8
    for job, n in zip(view.jobs, counts):
        assert n == 0 or job.least <= n <= job.upper
