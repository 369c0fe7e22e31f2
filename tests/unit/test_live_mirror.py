"""The live replay's simulator mirror (benchmarks/live/simulate.py): the daemon's rules around a policy,
run through the one loop with Slurm's shapes."""

import importlib.util
import sys
from pathlib import Path

import pytest

from slurm_liquid.loop import Loop, PlaceStage, Shape
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy.base import ClusterView, Decision, JobView, NodeView

LIVE = Path(__file__).resolve().parents[2] / "benchmarks" / "live"


@pytest.fixture(scope="module")
def mirror():
    spec = importlib.util.spec_from_file_location("live_simulate", LIVE / "simulate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path[:] = [p for p in sys.path if p != str(LIVE)]


class Wants:
    """A policy that wants fixed GPU counts."""
    name = "wants"
    speed = None

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def reset(self) -> None:
        pass

    def decide(self, view):
        return Decision(tuple((j.id, self.counts[j.id]) for j in view.jobs if j.id in self.counts))


def view(now: float, *jobs: JobView) -> ClusterView:
    return ClusterView(now, tuple(NodeView(f"n{i}", 4) for i in range(4)), jobs)


def test_the_daemon_mirror_places_waiting_jobs_and_resizes_only_on_its_rules(mirror) -> None:
    daemon = mirror.DaemonMirror(Wants({"a": 8, "b": 5}), 15.0, 20.0, 30)
    loop = Loop(daemon, PlaceStage(MostFreeGreedy(), Shape.UNIFORM), suspends=False)
    a = JobView("a", 0.0, 2, max_gpus=8)
    b = JobView("b", 0.0, 1, max_gpus=8)
    first = loop.decide(view(1.0, a, b)).actions                  # the placement pass: asked sizes
    assert {x.job: x.gpus for x in first} == {"a": 2, "b": 1}
    alloc = {x.job: x.allocation for x in first}
    a, b = (JobView(j.id, 0.0, j.gpus, allocation=alloc[j.id], max_gpus=8) for j in (a, b))
    assert loop.decide(view(16.0, a, b)).actions == []            # a slot, but both started 15 s ago
    changed = {x.job: x.gpus for x in loop.decide(view(31.0, a, b)).actions}
    # a grows to 8 (two nodes of 4); b's 5 GPUs have no Slurm shape on four nodes: it gets 4.
    assert changed == {"a": 8, "b": 4}
    assert loop.decide(view(32.0, a, b)).actions == []            # no slot until 45 s


def test_the_mirror_starts_an_elastic_job_alone_in_the_queue_on_a_whole_node(mirror) -> None:
    # Admitter._wider: alone, an elastic job asking 1 starts on a node's 4 free GPUs even under a policy
    # that decides by speed (the pass, not the slot's policy, starts jobs); with a second job waiting,
    # each starts as asked; a rigid job always does.
    class BySpeed(Wants):
        speed = object()
    for wider, alone, both in ((True, 4, (1, 2)), (False, 1, (1, 2))):
        daemon = mirror.DaemonMirror(BySpeed({}), 15.0, 20.0, 30, start_wider=wider)
        loop = mirror.MirrorLoop(daemon, PlaceStage(MostFreeGreedy(), Shape.UNIFORM), mirror.MeasuredSpeedModel(4),
                                 suspends=False)   # the speed room would bound an unmeasured job at its ask
        busy = JobView("x", 0.0, 4, allocation=(("n0", 4),))
        placed = loop.decide(view(1.0, busy, JobView("a", 0.0, 1, max_gpus=8))).actions
        assert [(x.job, x.gpus, len(x.allocation)) for x in placed] == [("a", alone, 1)]
        placed = loop.decide(view(2.0, busy, JobView("a", 0.0, 1, max_gpus=8), JobView("b", 0.0, 2, max_gpus=8))).actions
        assert tuple(x.gpus for x in sorted(placed, key=lambda x: x.job)) == both
        assert [x.gpus for x in loop.decide(view(3.0, busy, JobView("r", 0.0, 1))).actions] == [1]


def test_the_mirror_runs_the_smoke_workload_in_every_arm(mirror) -> None:
    import json

    workload = mirror.smoke(json.loads((LIVE / "workload-seed0.json").read_text()))
    for arm in mirror.ARMS:
        result = mirror.simulate(workload, arm, restart_cost=30.0, speed_kind="measured", start_cost=1.0)
        assert result["jobs"] == len(workload["jobs"]) and result["avg_jct_s"] > 0, arm
        if arm in ("plain", "liquid"):
            assert result["restarts"] == 0


def test_the_mirror_runs_the_payback_each_live_arm_had(mirror, tmp_path) -> None:
    import json

    shipped = mirror.Config().elastic.payback
    assert mirror.recorded_payback(tmp_path, "drf") == shipped                # no result: the shipped one
    (tmp_path / "drf.json").write_text(json.dumps({"arm": "drf"}))           # written before run.py --payback
    (tmp_path / "dl2.json").write_text(json.dumps({"arm": "dl2", "payback": 0}))
    assert mirror.recorded_payback(tmp_path, "drf") == shipped
    assert mirror.recorded_payback(tmp_path, "dl2") == 0.0
    # The guard is what keeps DRF from resizing at every slot: without it, DRF requeues its jobs many
    # times more on the seed-0 workload (the DL2 policy prices restarts itself).
    workload = json.loads((LIVE / "workload-seed0.json").read_text())
    restarts = {}
    for payback in (0.0, shipped):
        result = mirror.simulate(workload, "drf", restart_cost=20.0, speed_kind="measured", start_cost=1.0,
                                 payback=payback)
        assert result["payback"] == payback
        restarts[payback] = result["restarts"]
    assert restarts[0.0] > 4 * max(restarts[shipped], 1)


def test_the_sweep_moves_arrivals_by_at_most_the_jitter_and_keeps_their_order() -> None:
    spec = importlib.util.spec_from_file_location("live_sweep", LIVE / "sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(sweep)
    finally:
        sys.path[:] = [p for p in sys.path if p != str(LIVE)]
    workload = {"seed": 0, "jobs": [{"name": f"j{i}", "arrival_s": 10.0 * i} for i in range(6)]}
    assert sweep.jittered(workload, 0.0, 1, 0) == [workload]
    draws = sweep.jittered(workload, 2.0, 3, 7)
    assert len(draws) == 3 and draws == sweep.jittered(workload, 2.0, 3, 7)        # seeded
    assert draws[0] != draws[1]
    asked = {j["name"]: j["arrival_s"] for j in workload["jobs"]}
    for draw in draws:
        arrivals = [j["arrival_s"] for j in draw["jobs"]]
        assert arrivals == sorted(arrivals) and min(arrivals) >= 0.0
        assert all(abs(j["arrival_s"] - asked[j["name"]]) <= 2.0 for j in draw["jobs"])
    assert workload["jobs"][1]["arrival_s"] == 10.0                                  # the original is kept
