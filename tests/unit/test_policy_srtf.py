"""SRTF on a speed model's estimate: asks shortest first while they fit, then the leftover GPUs where one
more saves the most time (the teacher of DL2's warm-up and the oracle reference of the DL2 benchmark)."""

from slurm_liquid.errors import UsageError
from slurm_liquid.policy import make_policy
from slurm_liquid.policy.base import ClusterView, JobView, NodeView

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
