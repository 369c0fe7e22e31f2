"""SRTF on a speed model's estimate: asks shortest first while they fit, then the leftover GPUs where one
more saves the most time (the teacher of DL2's warm-up and the oracle reference of the DL2 benchmark)."""

from slurm_liquid.errors import UsageError
from slurm_liquid.policy import make_policy
from slurm_liquid.views import ClusterView, JobView, NodeView

import pytest


class _Speed:
    def __init__(self, remaining, flat=None):
        self.remaining, self.flat = remaining, flat or {}

    def iteration_time(self, job, gpus):
        return 1.0 / min(gpus, self.flat.get(job.id, 64))

    def remaining_iterations(self, job):
        return self.remaining[job.id]


def _view(asks, total=8):
    nodes = (NodeView("n0", total // 2), NodeView("n1", total // 2))
    jobs = tuple(JobView(f"j{i}", float(i), g, max_gpus=8, app="cifar10", batch_size=256) for i, g in enumerate(asks))
    return ClusterView(0.0, nodes, jobs)


def test_the_shortest_jobs_get_their_ask_and_a_longer_one_that_does_not_fit_waits():
    speed = _Speed({"j0": 1000.0, "j1": 100.0, "j2": 500.0, "j3": 50.0}, flat={"j0": 1, "j1": 1, "j2": 1, "j3": 1})
    counts = make_policy("srtf", speed).allocate(_view([4, 4, 6, 1]))
    # run times at the ask: j3 50, j1 100, j2 500, j0 1000: j3 (1) and j1 (4) fit, j2 (6) does not, j0 (4)
    # does not either (3 left); no job gains from more GPUs (flat), so 3 stay free
    assert counts == [0, 4, 0, 1]


def test_leftover_gpus_go_where_one_more_saves_the_most_time():
    speed = _Speed({"j0": 400.0, "j1": 100.0}, flat={"j0": 8, "j1": 1})
    counts = make_policy("srtf", speed).allocate(_view([2, 2]))
    assert counts == [6, 2]  # j1 stopped scaling; every spare GPU saves j0 time


def test_srtf_needs_a_speed_model():
    with pytest.raises(UsageError, match="srtf needs a speed model"):
        make_policy("srtf")


def _running(asks, held, total=8, penalty=150.0):
    """Jobs asking `asks`, job i holding `held[i]` GPUs on n0 (0: waiting), at a `penalty` s restart."""
    nodes = (NodeView("n0", total // 2), NodeView("n1", total // 2))
    jobs = tuple(JobView(f"j{i}", float(i), g, allocation=(("n0", h),) if h else (), max_gpus=8, app="cifar10",
                         batch_size=256) for i, (g, h) in enumerate(zip(asks, held)))
    return ClusterView(0.0, nodes, jobs, restart_penalty_s=penalty)


@pytest.mark.parametrize("remaining, restart_aware_count", [(1000.0, 2), (100_000.0, 8)])
def test_the_restart_aware_teacher_resizes_a_running_job_only_when_that_saves_more_than_its_margin(
        remaining, restart_aware_count):
    speed = _Speed({"j0": remaining})  # linear: 2 -> 8 GPUs saves 3/4 of the run time at 2
    view = _running([2], [2])
    assert make_policy("srtf", speed).allocate(view) == [8]  # blind to the 150 s restart
    # 1000 steps: 500 s at 2 GPUs, 125 s at 8: saves 375 s, less than 8 restarts (1200 s); 100,000 steps: 37,500 s
    assert make_policy("srtf-restart", speed).allocate(view) == [restart_aware_count]


@pytest.mark.parametrize("waiting, preempts", [(900.0, False), (700.0, True)])
def test_a_waiting_job_preempts_a_running_one_only_when_shorter_by_more_than_the_start_margin(waiting, preempts):
    speed = _Speed({"j0": 2000.0, "j1": waiting}, flat={"j0": 1, "j1": 1})  # run times 2000 s and `waiting`
    view = _running([4, 4], [4, 0], total=4)
    assert make_policy("srtf", speed).allocate(view) == [0, 4]
    # the waiting job ranks at its run time + 8 x 150 s: 2100 s (after the running one) or 1900 s (before it)
    assert make_policy("srtf-restart", speed).allocate(view) == ([0, 4] if preempts else [4, 0])


def test_a_running_job_keeps_gpus_beyond_its_ask_while_no_admitted_jobs_ask_needs_them():
    speed = _Speed({"j0": 1000.0, "j1": 400.0}, flat={"j0": 1, "j1": 1})  # neither gains from more GPUs
    view = _running([2, 2], [6, 0])  # j0 holds 6, asked for 2; j1 (waiting, 400 + 1200 s) ranks after j0
    assert make_policy("srtf", speed).allocate(view) == [2, 2]  # j0 shrinks to its ask: a restart for nothing
    assert make_policy("srtf-restart", speed).allocate(view) == [6, 2]
    # j1 asks for 4: j0 must give up 4 of its 6 and restarts anyway, so it goes back to its ask
    assert make_policy("srtf-restart", speed).allocate(_running([2, 4], [6, 0])) == [2, 4]
