"""Drawn scaling curves (sim/curves.py): the table, its JSON, and a curve as a simulator application."""

import numpy as np
import pytest

from slurm_liquid.errors import LiquidError, UsageError
from slurm_liquid.policy import make_policy
from slurm_liquid.sim.apps import AppModel, load_app, register_app
from slurm_liquid.sim.curves import KINDS, Curve, CurveApp, draw_curve, shapes
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel, isolated_runtime
from slurm_liquid.sim.workload import JobSpec


def test_the_three_kinds_scale_as_their_names_say() -> None:
    rng = np.random.default_rng(0)
    linear, plateau, internode = (draw_curve(k, rng, max_gpus=8) for k in KINDS)
    speedup = lambda c, g, n: c.step_time(1, 1) / c.step_time(g, n)   # noqa: E731
    assert speedup(linear, 4, 1) > 3.5 and speedup(linear, 8, 2) > 6
    assert speedup(plateau, 2, 1) == pytest.approx(2)
    assert speedup(plateau, 4, 1) < 2 and speedup(plateau, 8, 2) < speedup(plateau, 4, 1)
    assert speedup(internode, 4, 1) == pytest.approx(4)
    assert speedup(internode, 8, 2) < speedup(internode, 4, 1)
    assert speedup(internode, 2, 2) < speedup(internode, 2, 1)


def test_the_table_covers_every_shape_of_4_gpu_nodes_and_round_trips_through_json() -> None:
    assert shapes(5) == [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2), (3, 3), (4, 1), (4, 2), (4, 3), (4, 4),
                         (5, 2), (5, 3), (5, 4), (5, 5)]
    curve = draw_curve("internode", np.random.default_rng(3), max_gpus=16)
    assert set(curve.step_s) == set(shapes(16))
    back = Curve.from_json(curve.to_json())
    assert back.kind == "internode" and back.max_gpus == 16
    assert back.step_time(8, 2) == pytest.approx(curve.step_time(8, 2), abs=1e-6)
    with pytest.raises(UsageError, match="no step time for 17 GPUs"):
        back.step_time(17, 5)


@pytest.mark.parametrize("obj, message", [
    ([], "non-empty"), ({"step_s": {}}, "non-empty"), ({"step_s": {"2x3": 1}}, "out of range"),
    ({"step_s": {"1x1": float("nan")}}, "out of range"), ({"step_s": {"a": 1}}, "keys are"),
    ({"step_s": {"1x1": 1}, "base_step_s": "x"}, "base_step_s"),
])
def test_bad_curves_are_refused_with_one_message(obj, message) -> None:
    with pytest.raises(UsageError, match=message):
        Curve.from_json(obj, "job7")


def test_a_registered_name_is_what_load_app_answers_and_trace_names_are_kept() -> None:
    app = CurveApp("curve-test-registry", Curve("t", 1.0, {(1, 1): 1.0}), steps=10, batch_size=8)
    register_app("curve-test-registry", app)
    assert load_app("curve-test-registry") is app
    assert isinstance(load_app("cifar10"), AppModel)
    with pytest.raises(LiquidError, match="measured application"):
        register_app("cifar10", app)


def curve_job(name: str, table: dict, steps: int, gpus: int, time: float = 0.0, max_gpus: int = 8) -> JobSpec:
    register_app(name, CurveApp(name, Curve("t", table[(1, 1)], table), steps, batch_size=64, max_gpus=max_gpus))
    return JobSpec(name, time, name, gpus, 64)


def test_a_curve_job_runs_its_steps_at_the_curves_step_time_in_the_simulator() -> None:
    table = {(1, 1): 1.0, (2, 1): 0.5, (4, 1): 0.3, (4, 2): 0.9, (8, 2): 0.2}
    spec = curve_job("curve-test-alone", table, steps=400, gpus=2)
    config = ClusterConfig(nodes=4, gpus_per_node=4, interval=1.0, restart_penalty=5.0, walltime_factor=0.0)
    result = Simulator([spec], config).run(make_policy("fifo"))
    assert result.jcts["curve-test-alone"] == pytest.approx(5.0 + 400 * 0.5, abs=1.0)
    app = load_app("curve-test-alone")
    assert isolated_runtime(app, 64, 2, 4) == pytest.approx(200, abs=1)
    # The oracle that Optimus and DL2 consult reads the curve, including the cross-node cost.
    oracle = OracleSpeedModel(4)
    view = Simulator([spec], config).view()
    assert oracle.iteration_time(view.jobs[0], 4) == pytest.approx(0.3)
    assert oracle.iteration_time(view.jobs[0], 8) == pytest.approx(0.2)


def test_an_elastic_policy_sees_the_curves_width_as_the_jobs_upper_bound() -> None:
    table = {(g, n): 1.0 / g for g, n in shapes(8)}
    spec = curve_job("curve-test-elastic", table, steps=600, gpus=1, max_gpus=4)
    config = ClusterConfig(nodes=4, gpus_per_node=4, interval=5.0, restart_penalty=0.0, walltime_factor=0.0)
    sim = Simulator([spec], config)
    assert sim.view().jobs[0].max_gpus == 4
    result = sim.run(make_policy("drf"))
    # DRF gives a lone elastic job all it may take: 4 GPUs, 600 steps of 0.25 s.
    assert result.jcts["curve-test-elastic"] == pytest.approx(150, abs=5)
