"""The engine: timing rules, restart penalty, cross-switch slowdown, step API, bad policies."""

import pytest

from slurm_liquid.loop import PlaceStage
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.errors import LiquidError
from slurm_liquid.policy import make_policy
from slurm_liquid.views import Action
from slurm_liquid.policy.tiresias import Tiresias
from slurm_liquid.sim.apps import load_app
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel
from slurm_liquid.sim.workload import JobSpec


def cifar(name="c0", time=53.0, gpus=6, batch=2048):
    return JobSpec(name, time, "cifar10", gpus, batch)


def test_lone_job_waits_for_tick_pays_penalty_then_runs() -> None:
    r = Simulator([cifar()]).run(Tiresias())
    assert r.jcts["c0"] == (60 - 53) + 30 + 910
    # The job alone on 6 of 64 GPUs until it completes at t = 1000.
    assert r.makespan_s == 1000
    assert r.gpu_utilisation == pytest.approx(6 * 940 / (64 * 1000))


@pytest.mark.parametrize("penalty", [0.0, 30.0, 150.0])
def test_restart_penalty_delays_the_start(penalty) -> None:
    r = Simulator([cifar()], ClusterConfig(restart_penalty=penalty)).run(Tiresias())
    assert r.jcts["c0"] == 7 + penalty + 910


def test_cross_switch_slowdown_only_hits_jobs_that_span_switches() -> None:
    # 6 GPUs need two 4-GPU nodes; with one node per switch the job spans two switches.
    base = Simulator([cifar()], ClusterConfig(nodes_per_switch=1)).run(Tiresias()).jcts["c0"]
    slow = Simulator([cifar()], ClusterConfig(nodes_per_switch=1, cross_switch_slowdown=0.2)).run(Tiresias()).jcts["c0"]
    same = Simulator([cifar()], ClusterConfig(nodes_per_switch=2, cross_switch_slowdown=0.2)).run(Tiresias()).jcts["c0"]
    assert base == same
    # A 20% slower rate stretches the 910 s run by about 1/0.8; epoch crossings round to whole seconds.
    assert 1.1 < (slow - 37) / 910 < 1.3


def test_step_api_matches_run_and_reports_progress() -> None:
    jobs = [cifar("a", 0), cifar("b", 100, 4, 1024), JobSpec("n", 5000, "ncf", 1, 32768)]
    sim = Simulator(jobs)
    expected = sim.run(Tiresias()).jcts
    policy = Tiresias()
    view = sim.reset()
    total = 0.0
    while view is not None:
        view = sim.step(PlaceStage(MostFreeGreedy()).place(view, policy.decide(view)))
        total += sim.last_progress
    assert sim.done
    assert sim.result("tiresias").jcts == expected
    assert total == pytest.approx(len(jobs))  # each job's normalised progress sums to 1


def test_idle_gaps_are_skipped_without_changing_results() -> None:
    far = [cifar("a", 0), cifar("b", 10 * 86400 + 7)]
    r = Simulator(far).run(Tiresias())
    assert r.jcts["b"] == 53 + 30 + 910
    assert len(r.times) < 60  # decisions only while jobs are active


def test_policy_that_overcommits_is_caught() -> None:
    sim = Simulator([cifar("a", 0, 4, 1024), cifar("b", 0, 4, 1024)])
    sim.reset()
    with pytest.raises(LiquidError, match="over-committed"):
        sim.step([Action("a", (("n00", 4),)), Action("b", (("n00", 4),))])


def test_policy_acting_on_unknown_job_is_caught() -> None:
    sim = Simulator([cifar("a", 0)])
    sim.reset()
    with pytest.raises(LiquidError, match="not an active job"):
        sim.step([Action("zzz", (("n00", 1),))])


@pytest.mark.parametrize("name", ["fifo", "drf", "tiresias", "optimus"])
def test_every_policy_finishes_every_job(name) -> None:
    jobs = [cifar(f"c{i}", 30.0 * i, g, 2048) for i, g in enumerate([6, 8, 12, 16, 6, 8])]
    jobs += [JobSpec(f"n{i}", 40.0 * i, "ncf", 1, 32768) for i in range(5)]
    r = Simulator(jobs, ClusterConfig(nodes=4)).run(make_policy(name, OracleSpeedModel(4)))
    assert len(r.jcts) == len(jobs)
    assert all(j > 0 for j in r.jcts.values())
    assert max(r.gpus_in_use) <= 16
    assert 0 < r.gpu_utilisation <= 1


def test_interference_slows_distributed_jobs_sharing_nodes() -> None:
    # Two 6-GPU jobs on 3 nodes must share a node; each is distributed.
    jobs = [cifar("a", 0), cifar("b", 0)]
    plain = Simulator(jobs, ClusterConfig(nodes=3)).run(Tiresias()).avg_jct_s
    hit = Simulator(jobs, ClusterConfig(nodes=3, interference=0.5)).run(Tiresias()).avg_jct_s
    assert hit > plain * 1.5


def test_gpus_per_node_beyond_traces_is_refused() -> None:
    with pytest.raises(LiquidError, match="up to 4 GPUs per node"):
        ClusterConfig(gpus_per_node=8)


def test_liquid_placement_keeps_jobs_inside_one_switch() -> None:
    pytest.importorskip("slurm_liquid.placement.liquid")
    from slurm_liquid.sim.runner import make_placer

    config, placer = make_placer("liquid", ClusterConfig(nodes=8, nodes_per_switch=2, cross_switch_slowdown=0.5))
    jobs = [cifar(f"c{i}", 0, 6, 2048) for i in range(3)]
    sim = Simulator(jobs, config)
    view = sim.reset()
    actions = PlaceStage(placer).place(view, Tiresias().decide(view))
    switch = {n.name: n.switch for n in view.nodes}
    for a in actions:
        assert len({switch[n] for n, _ in a.allocation}) == 1
    sim.step(actions)
    assert all(j.slowdown == 0 for j in sim.jobs)


def test_jobs_that_scale_their_batch_finish_sooner() -> None:
    jobs = [cifar("a", 0, 8, 2048), cifar("b", 600, 6, 2048), JobSpec("y", 300, "yolov3", 4, 64)]
    fixed = Simulator(jobs, ClusterConfig(nodes=4)).run(make_policy("drf"))
    scaled = Simulator(jobs, ClusterConfig(nodes=4, batch_scaling=True)).run(make_policy("drf"))
    assert all(scaled.jcts[j] < fixed.jcts[j] for j in fixed.jcts)


def test_batch_scaling_lets_elastic_jobs_grow_past_their_declared_batch() -> None:
    # yolov3 at batch 64 may use 64 / 4 = 16 GPUs; scaling its batch up to 512 lifts that to the
    # cluster's 32, which DRF then hands it.
    sim = Simulator([JobSpec("y", 0, "yolov3", 4, 64)], ClusterConfig(nodes=8, batch_scaling=True))
    assert sim.jobs[0].max_gpus == 32
    assert max(sim.run(make_policy("drf")).gpus_in_use) == 32


def test_oracle_speed_model_answers_for_jobs_that_scale_their_batch() -> None:
    view = Simulator([JobSpec("y", 0, "yolov3", 4, 64)], ClusterConfig(nodes=8, batch_scaling=True)).view()
    job = view.jobs[0]
    with pytest.raises(LiquidError):  # 32 GPUs cannot split the declared batch of 64
        OracleSpeedModel(4).iteration_time(job, 32)
    scaling = OracleSpeedModel(4, batch_scaling=True)
    # Seconds per unit of progress; early in training a larger batch buys little, so 4 GPUs
    # (batch >= 16) may well be slower per unit than 1 GPU (batch 8): no order is asserted.
    assert all(0 < scaling.iteration_time(job, g) < 10 for g in (1, 4, 16, 32))
    assert scaling.remaining_iterations(job) == load_app("yolov3").target_progress


@pytest.mark.parametrize("name", ["optimus", "dl2"])
def test_speed_aware_policies_run_jobs_that_scale_their_batch(name) -> None:
    jobs = [JobSpec("y", 0, "yolov3", 4, 64), cifar("c", 120, 8, 2048), JobSpec("b", 200, "bert", 6, 384)]
    r = Simulator(jobs, ClusterConfig(nodes=8, batch_scaling=True)).run(
        make_policy(name, OracleSpeedModel(4, batch_scaling=True)))
    assert len(r.jcts) == 3


def test_a_policy_that_restarts_jobs_every_slot_stops_at_the_horizon_with_one_message():
    """A restart longer than a slot and a change every slot: no job ever runs. The run must end."""
    from slurm_liquid.views import Decision

    class Flip:
        name = "flip"

        def __init__(self):
            self.k = 0

        def reset(self):
            self.k = 0

        def decide(self, view):
            self.k += 1
            return Decision.resize(view, [1 + (self.k + i) % 2 for i in range(len(view.jobs))])

    config = ClusterConfig(nodes=1, gpus_per_node=4, restart_penalty=150.0, horizon_s=3600.0)
    sim = Simulator([JobSpec("c-0", 0.0, "cifar10", 1, 128)], config, "flip-test")
    with pytest.raises(LiquidError, match=r"policy flip left 1 of 1 jobs of flip-test unfinished 0.0416667 simulated days"):
        sim.run(Flip())
