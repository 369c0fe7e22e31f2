"""The grouping GA (batch mode): valid plans, never worse than immediate mode, reproducible."""

from slurm_liquid.placement.base import ClusterState, NodeState, PlacementRequest
from slurm_liquid.placement.ga import GroupingGA
from slurm_liquid.placement.liquid import LiquidBestFit
from slurm_liquid.topology import Topology

TREE = Topology.tree([2, 4, 4])  # 32 nodes


def busy_state(seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    return ClusterState({n: NodeState(n, 8, int(rng.integers(0, 9))) for n in TREE.nodes})


def batch(seed, n=12):
    import numpy as np
    rng = np.random.default_rng(seed)
    return [PlacementRequest(f"j{i}", int(g)) for i, g in enumerate(rng.choice([1, 2, 3, 4, 8, 12, 16], size=n))]


def plan_cost(ga, state, jobs, placements):
    snap = ga.tree.snapshot(state)
    groups = [None if p.nodes is None else ga.tree.allocation_of(p.nodes) for p in placements]
    for group in groups:
        snap.take(group or {})
    return ga.cost(ga.tree.snapshot(state), jobs, groups, snap.free)


def check_batch(state, jobs, placements):
    current = state
    for request, placement in zip(jobs, placements):
        assert placement.job == request.job
        if placement.nodes is not None:
            assert sum(placement.nodes.values()) == request.gpus
        current = current.take(placement)  # raises on over-commit


def test_busy_cluster_batch_improves_or_matches_and_repeats_with_a_seed():
    state, jobs = busy_state(1), batch(2)
    runs = [GroupingGA(TREE, seed=7, time_budget_s=None, generations=8).place_all(jobs, state) for _ in range(2)]
    assert runs[0] == runs[1]
    check_batch(state, jobs, runs[0])
    ga = GroupingGA(TREE, seed=7, time_budget_s=None, generations=8)
    immediate = LiquidBestFit(TREE).place_all(jobs, state)
    assert plan_cost(ga, state, jobs, runs[0]) <= plan_cost(ga, state, jobs, immediate)


def test_jobs_that_do_not_fit_after_the_batch_say_so():
    state = ClusterState({n: NodeState(n, 8, 8 if i < 2 else 0) for i, n in enumerate(TREE.nodes)})
    jobs = [PlacementRequest("a", 8), PlacementRequest("b", 8), PlacementRequest("c", 8)]
    out = GroupingGA(TREE, seed=0, time_budget_s=None, generations=3).place_all(jobs, state)
    assert sum(p.placed for p in out) == 2
    (left,) = [p for p in out if not p.placed]
    assert "after the rest of the batch" in left.reason


def test_time_budget_stops_the_search():
    ga = GroupingGA(TREE, seed=0, time_budget_s=0.05)
    ga.place_all(batch(3, n=20), busy_state(3))
    assert ga.last_generations < 1000


def test_options_are_checked():
    import pytest
    with pytest.raises(ValueError):
        GroupingGA(TREE, time_budget_s=None, generations=None)
    with pytest.raises(ValueError):
        GroupingGA(TREE, population=2)
