"""The live replay's simulator mirror (benchmarks/live/simulate.py): Slurm's shapes and the daemon's rules."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from slurm_liquid.placement.base import ClusterState, NodeState, PlacementRequest
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy.base import Action, ClusterView, JobView, NodeView

LIVE = Path(__file__).resolve().parents[2] / "benchmarks" / "live"


@pytest.fixture(scope="module")
def mirror():
    spec = importlib.util.spec_from_file_location("live_simulate", LIVE / "simulate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path[:] = [p for p in sys.path if p != str(LIVE)]


def state(*free: int) -> ClusterState:
    return ClusterState({f"n{i}": NodeState(f"n{i}", 4, f) for i, f in enumerate(free)})


def test_slurm_shapes_give_the_same_gpus_on_every_node(mirror) -> None:
    shapes = mirror.SlurmShapes(MostFreeGreedy(), 4)
    six = shapes.place(PlacementRequest("a", 6), state(4, 4, 4, 4))
    assert sorted(six.nodes.values()) == [3, 3]
    # 5 GPUs fit only as 5 x 1: with 4 nodes there is no such shape, although 16 GPUs are free.
    assert not shapes.place(PlacementRequest("b", 5), state(4, 4, 4, 4)).placed
    assert sorted(shapes.place(PlacementRequest("c", 4), state(2, 2, 1, 0)).nodes.values()) == [2, 2]


class Wants:
    """A policy that wants fixed GPU counts (its own placement: one node, as far as it goes)."""
    name = "wants"

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def reset(self) -> None:
        pass

    def decide(self, view):
        return [Action(j.id, (("n0", n),) if n else ()) for j, n in ((j, self.counts.get(j.id)) for j in view.jobs)
                if n is not None]


def view(now: float, *jobs: JobView) -> ClusterView:
    return ClusterView(now, tuple(NodeView(f"n{i}", 4) for i in range(4)), jobs)


def test_the_daemon_mirror_places_waiting_jobs_and_resizes_only_on_its_rules(mirror) -> None:
    daemon = mirror.DaemonMirror(Wants({"a": 8, "b": 5}), mirror.SlurmShapes(MostFreeGreedy(), 4), 15.0, 20.0, 30)
    a = JobView("a", 0.0, 2, max_gpus=8)
    b = JobView("b", 0.0, 1, max_gpus=8)
    first = daemon.decide(view(1.0, a, b))                       # the placement pass: asked sizes
    assert {x.job: x.gpus for x in first} == {"a": 2, "b": 1}
    alloc = {x.job: x.allocation for x in first}
    a, b = (JobView(j.id, 0.0, j.gpus, allocation=alloc[j.id], max_gpus=8) for j in (a, b))
    assert daemon.decide(view(16.0, a, b)) == []                  # a slot, but both started 15 s ago
    changed = {x.job: x.gpus for x in daemon.decide(view(31.0, a, b))}
    # a grows to 8 (two nodes of 4); b's 5 GPUs have no Slurm shape: it keeps its 1, is not suspended.
    assert changed == {"a": 8}
    assert daemon.decide(view(32.0, a, b)) == []                  # no slot until 45 s
