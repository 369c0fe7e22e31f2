"""The daemon's rules as data (slurm_liquid/loop/rules.py): one world for the daemon, the simulator and
DL2's training, and the simulator's live-workload arms (slurm_liquid/sim/live.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurm_liquid.config import Config, parse
from slurm_liquid.loop import Loop, Rules, Shape, SlotPolicy
from slurm_liquid.loop.rules import narrower_counts, wider_start
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy import make_policy
from slurm_liquid.sim.live import load_live, run_live
from slurm_liquid.sim.livegen import draw, smoke
from slurm_liquid.views import ClusterView, Decision, JobView, NodeView

LIVE = Path(__file__).resolve().parents[2] / "benchmarks" / "live"


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


def daemon_rules(**elastic) -> Rules:
    return Rules.daemon(replace(Config().elastic, **elastic))


def test_the_daemon_rules_come_from_the_elastic_section() -> None:
    cfg = parse("[elastic]\nslot_s = 15\nmin_change_interval_s = 20\nmax_changes_per_hour = 3\nstart_wider = false\n"
                "restart_penalty_s = 45\npayback = 1.5\n").elastic
    rules = Rules.daemon(cfg)
    assert (rules.shape, rules.suspends, rules.weigh_placed, rules.starts_by_pass) == (Shape.SUBMITTED, False, True, True)
    assert (rules.slot_s, rules.min_change_interval_s, rules.max_changes_per_hour) == (15, 20, 3)
    assert (rules.start_wider, rules.restart_penalty_s, rules.payback) == (False, 45, 1.5)
    assert Rules.named("daemon", cfg) == rules
    reference = Rules.named("reference")
    assert (reference.shape, reference.suspends, reference.payback, reference.slot_s) == (Shape.FREE, True, 0.0, None)


def test_the_guard_belongs_to_the_policy_and_the_config_overrides_it() -> None:
    speed = object()
    shipped = Rules.daemon(Config().elastic)
    assert Config().elastic.payback is None
    assert shipped.guard(make_policy("drf")) == 2.0
    assert shipped.guard(make_policy("optimus", speed)) == 2.0
    assert shipped.guard(make_policy("dl2", speed)) == 0.0     # DL2 prices restarts itself
    assert daemon_rules(payback=0.5).guard(make_policy("drf")) == 0.5
    assert Rules.reference().guard(make_policy("drf")) == 0.0  # the artifact's policies as published
    assert parse("[elastic]\npayback = 3\n").elastic.payback == 3.0


@pytest.mark.parametrize("changes, started, now, refused", [
    ((), 0.0, 100.0, None),
    ((), 50.0, 100.0, "started too recently"),
    ((90.0,), 0.0, 100.0, "changed too recently"),
    ((10.0, 200.0, 400.0), 0.0, 1000.0, "hourly change limit"),
    ((10.0, 200.0, 400.0), 0.0, 3800.0, None),                    # two are over an hour old
])
def test_the_change_limits(changes, started, now, refused) -> None:
    rules = daemon_rules(min_change_interval_s=60, max_changes_per_hour=2)
    job = JobView("a", 0.0, 2, allocation=(("n0", 2),), max_gpus=8, started_at=started, changes=changes)
    assert rules.change_refused(job, now) == refused


def test_the_start_counts_of_the_placement_pass() -> None:
    assert list(narrower_counts(4, 1, 3)) == [3, 2, 1]
    assert list(narrower_counts(4, 2, 9)) == [3, 2]
    assert wider_start(1, 8, 4, 4) == 4 and wider_start(1, 2, 4, 4) == 2
    assert wider_start(4, 8, 4, 4) is None and wider_start(2, 8, 4, 2) is None


def test_the_slot_policy_starts_waiting_jobs_every_round_and_resizes_on_the_rules() -> None:
    rules = daemon_rules(slot_s=15, min_change_interval_s=20, max_changes_per_hour=30, start_wider=False)
    loop = Loop.under(rules, Wants({"a": 8, "b": 5}), MostFreeGreedy())
    a = JobView("a", 0.0, 2, max_gpus=8)
    b = JobView("b", 0.0, 1, max_gpus=8)
    first = loop.decide(view(1.0, a, b)).actions                  # the placement pass: asked sizes
    assert {x.job: x.gpus for x in first} == {"a": 2, "b": 1}
    alloc = {x.job: x.allocation for x in first}
    a, b = (JobView(j.id, 0.0, j.gpus, allocation=alloc[j.id], max_gpus=8, started_at=1.0) for j in (a, b))
    held = loop.decide(view(16.0, a, b))                          # a slot, but both started 15 s ago
    assert held.actions == [] and held.kept == {"a": "started too recently", "b": "started too recently"}
    assert held.held_back == {"a": 8, "b": 5}
    changed = {x.job: x.gpus for x in loop.decide(view(31.0, a, b)).actions}
    # a grows to 8 (two nodes of 4); b's 5 GPUs have no Slurm shape on four nodes: it gets 4.
    assert changed == {"a": 8, "b": 4}
    assert loop.decide(view(32.0, a, b)).actions == []            # no slot until 45 s


def test_an_elastic_job_alone_in_the_queue_starts_on_a_whole_node() -> None:
    # the pass, not the slot's policy, starts jobs: a policy that decides by speed does not bound it
    class BySpeed(Wants):
        speed = object()

    from slurm_liquid.speed import MeasuredSpeedModel

    for wider, alone, both in ((True, 4, (1, 2)), (False, 1, (1, 2))):
        loop = Loop.under(daemon_rules(start_wider=wider), BySpeed({}), MostFreeGreedy(), MeasuredSpeedModel(4))
        busy = JobView("x", 0.0, 4, allocation=(("n0", 4),))
        placed = loop.decide(view(1.0, busy, JobView("a", 0.0, 1, max_gpus=8))).actions
        assert [(x.job, x.gpus, len(x.allocation)) for x in placed] == [("a", alone, 1)]
        placed = loop.decide(view(2.0, busy, JobView("a", 0.0, 1, max_gpus=8), JobView("b", 0.0, 2, max_gpus=8))).actions
        assert tuple(x.gpus for x in sorted(placed, key=lambda x: x.job)) == both
        assert [x.gpus for x in loop.decide(view(3.0, busy, JobView("r", 0.0, 1))).actions] == [1]


def test_every_arm_runs_a_live_workload_and_plain_never_resizes() -> None:
    workload = smoke(json.loads((LIVE / "workload-seed0.json").read_text()))
    rules = daemon_rules(slot_s=15, min_change_interval_s=20)
    for arm in ("plain", "static", "drf", "optimus", "dl2"):
        result = run_live(workload, arm, rules, restart_cost=20.0, start_cost=1.0)
        assert len(result.jcts) == len(workload["jobs"]) and result.avg_jct_s > 0, arm
        if arm in ("plain", "static"):
            assert result.restarts == 0


def test_drf_needs_its_guard_and_dl2_runs_without_one() -> None:
    # Without its guard DRF requeues its jobs many times more on the seed-0 workload.
    workload = json.loads((LIVE / "workload-seed0.json").read_text())
    guarded = daemon_rules(slot_s=15, min_change_interval_s=20, max_changes_per_hour=30)
    bare = replace(guarded, payback=0.0)
    restarts = {r.payback: run_live(workload, "drf", r).restarts for r in (guarded, bare)}
    assert restarts[0.0] > 4 * max(restarts[None], 1)


def test_a_live_workload_file_is_checked(tmp_path) -> None:
    from slurm_liquid.errors import UsageError

    bad = tmp_path / "w.json"
    bad.write_text(json.dumps({"cluster": {"nodes": 4, "gpus_per_node": 4}, "jobs": [{"name": "x"}]}))
    with pytest.raises(UsageError, match="not a live workload file"):
        load_live(bad)
    good = tmp_path / "g.json"
    good.write_text(json.dumps(draw(7, 4, 60.0)))
    assert len(load_live(good)["jobs"]) == 4


def _jobs(draws) -> tuple[JobView, ...]:
    """Random jobs on 4 nodes x 4 GPUs: running ones hold one node's GPUs each, the rest wait."""
    jobs, free = [], {f"gpu0{i}": 4 for i in range(1, 5)}
    for i, (gpus, high, hold, age, changed) in enumerate(draws):
        allocation = ()
        node = next((n for n, f in free.items() if f >= gpus), None) if hold else None
        if node is not None:
            free[node] -= gpus
            allocation = ((node, gpus),)
        jobs.append(JobView(str(100 + i), float(i), gpus, allocation=allocation, max_gpus=max(high, gpus),
                            app="cifar10", batch_size=128, started_at=1000.0 - age if allocation else None,
                            changes=(1000.0 - changed,) if allocation and changed < age else ()))
    return tuple(jobs)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 8), st.booleans(), st.floats(0, 2000), st.floats(0, 2000)),
                min_size=1, max_size=8),
       st.sampled_from(["drf", "dl2", "optimus"]))
def test_the_daemon_and_the_simulator_decide_alike_on_the_same_view(draws, name) -> None:
    """The daemon's slot (`Adjuster.loop`, from the shipped config) and the simulator under `--rules daemon`
    (`Loop.under(Rules.named("daemon"))`, the policy paced by `SlotPolicy`) resize the same running elastic
    jobs to the same GPUs on the same view."""
    from slurm_liquid.daemon.elastic import Adjuster
    from slurm_liquid.placement.factory import make_placer
    from slurm_liquid.speed import MeasuredSpeedModel
    from slurm_liquid.topology import Topology
    from slurm_liquid.topology.parse import SwitchSpec

    topology = Topology.from_switches([SwitchSpec("leaf0", ("gpu01", "gpu02")), SwitchSpec("leaf1", ("gpu03", "gpu04")),
                                       SwitchSpec("spine", switches=("leaf0", "leaf1"))])
    config = Config()
    config = replace(config, elastic=replace(config.elastic, policy=name))
    jobs = _jobs(draws)
    seen = ClusterView(1000.0, tuple(NodeView(f"gpu0{i}", 4, f"leaf{(i - 1) // 2}") for i in range(1, 5)), jobs,
                       config.elastic.restart_penalty_s)
    running = {j.id for j in jobs if j.allocation}

    adjuster = Adjuster(None, config, topology, journal=None, speed=MeasuredSpeedModel(4))
    adjuster._elastic = {int(j): None for j in running}         # the running jobs are this daemon's elastic ones
    daemon = adjuster.loop.decide(seen)
    speed = MeasuredSpeedModel(4)
    sim_loop = Loop.under(Rules.named("daemon", config.elastic), make_policy(name, speed, world="daemon"),
                          make_placer("liquid", topology), speed)
    assert isinstance(sim_loop.policy, SlotPolicy)
    simulated = sim_loop.decide(seen)
    resized = lambda r: {a.job: a.allocation for a in r.actions if a.job in running}  # noqa: E731
    assert resized(daemon) == resized(simulated)
    assert {k: v for k, v in simulated.kept.items() if k in running} == daemon.kept
