"""The artifact's most-free-node placer."""

from hypothesis import given, strategies as st

from slurm_liquid.placement.base import ClusterState, NodeState, PlacementRequest
from slurm_liquid.placement.greedy import MostFreeGreedy


def state(free):
    return ClusterState({f"n{i}": NodeState(f"n{i}", 4, f) for i, f in enumerate(free)})


def test_picks_most_free_first_ties_to_earliest() -> None:
    p = MostFreeGreedy().place(PlacementRequest("j", 6), state([2, 4, 3, 4]))
    assert list(p.nodes.items()) == [("n1", 4), ("n3", 2)]


def test_not_enough_gpus_gives_a_reason() -> None:
    p = MostFreeGreedy().place(PlacementRequest("j", 9), state([2, 4, 2]))
    assert not p.placed and "8 free" in p.reason


@given(st.lists(st.integers(0, 4), min_size=1, max_size=12), st.lists(st.integers(1, 8), min_size=1, max_size=6))
def test_never_overcommits_and_gives_exactly_what_is_asked(free, asks) -> None:
    s = state(free)
    placements = MostFreeGreedy().place_all([PlacementRequest(f"j{i}", g) for i, g in enumerate(asks)], s)
    left = sum(free)
    for p, g in zip(placements, asks):
        if g <= left:
            assert p.placed and sum(p.nodes.values()) == g
            left -= g
        else:
            assert not p.placed
