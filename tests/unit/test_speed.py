"""The speed room: Pollux's throughput model fitted from each job's own reports, with a prior."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import least_squares

from slurm_liquid.views import JobView
from slurm_liquid.speed import MeasuredSpeedModel, Observation, Prior, ThroughputParams, check
from slurm_liquid.speed.fit import PARAM_WEIGHT, solve
from slurm_liquid.speed.params import Widths, bounds, jacobian, predict_log

TRUE = ThroughputParams(alpha_c=0.02, beta_c=0.004, alpha_r=0.05, beta_r=0.004, alpha_n=0.15, beta_n=0.01, gamma=2.0)
WIDTHS = [(1, 1), (2, 1), (4, 1), (8, 2), (16, 4)]


def job(job_id: str = "1", app: str | None = None, batch: int | None = 64, gpus: int = 1, upper: int | None = 64,
        allocation=(), min_gpus: int = 1) -> JobView:
    return JobView(job_id, 0.0, gpus, allocation=allocation, min_gpus=min_gpus, max_gpus=upper, app=app,
                   batch_size=batch)


def feed(model: MeasuredSpeedModel, job_id: str, times: dict[int, float], batch: int = 64, gpn: int = 4,
         repeat: int = 1) -> None:
    for _ in range(repeat):
        for gpus, step in times.items():
            assert model.observe(Observation(job_id, gpus, -(-gpus // gpn), batch, batch / step, 1.0))


def curve(model: MeasuredSpeedModel, view: JobView, widths=(1, 2, 4, 8, 16)) -> list[float]:
    return [model.iteration_time(view, g) for g in widths]


# -- the throughput model ----------------------------------------------------------------------------

def test_step_time_is_pollux_formula():
    p = TRUE
    assert p.step_time(1, 1, 64) == pytest.approx(0.02 + 0.004 * 64)       # one GPU: compute only
    compute, network = 0.02 + 0.004 * 16, 0.05 + 0.004 * 2
    assert p.step_time(4, 1, 64) == pytest.approx((compute ** 2 + network ** 2) ** 0.5)
    network_n = 0.15 + 0.01 * 6
    assert p.step_time(8, 2, 64) == pytest.approx(((0.02 + 0.004 * 8) ** 2 + network_n ** 2) ** 0.5)
    assert p.scaled(3.0).step_time(8, 2, 64) == pytest.approx(3 * p.step_time(8, 2, 64))
    assert ThroughputParams.from_vector(p.to_vector()).step_time(16, 4, 256) == pytest.approx(p.step_time(16, 4, 256))


def test_vectorised_prediction_and_jacobian_match_the_scalar_model():
    x = TRUE.to_vector()
    w = Widths.of([1, 2, 4, 8, 16], [1, 1, 1, 2, 4], [64, 64, 128, 256, 256])
    expected = [TRUE.step_time(g, n, b) for g, n, b in [(1, 1, 64), (2, 1, 64), (4, 1, 128), (8, 2, 256), (16, 4, 256)]]
    assert np.exp(predict_log(x, w)) == pytest.approx(expected, rel=1e-9)
    eps = 1e-6
    numeric = np.stack([(predict_log(x + eps * e, w) - predict_log(x - eps * e, w)) / (2 * eps) for e in np.eye(7)], 1)
    assert np.abs(jacobian(x, w) - numeric).max() < 1e-6
    batch = Widths(np.stack([w.gpus] * 2), np.stack([w.nodes] * 2), np.stack([w.local] * 2))
    assert np.allclose(jacobian(np.stack([x, x]), batch)[1], jacobian(x, w))


def test_batched_solver_reaches_scipys_optimum():
    rng = np.random.default_rng(7)
    lo, hi = bounds()
    for _ in range(12):
        x_true = np.clip(TRUE.to_vector() + rng.normal(0, 0.7, 7), lo + 0.1, hi - 0.1)
        x_true[6] = rng.uniform(1, 5)
        gpus = np.array([1, 2, 4, 8.0])
        w = Widths.of(gpus, [1, 1, 1, 2], [64] * 4)
        target = predict_log(x_true, w) + rng.normal(0, 0.05, 4)
        sw = np.full(4, 0.8)
        x_prior = TRUE.to_vector()
        reg = math.sqrt(PARAM_WEIGHT)

        def residuals(x):
            return np.concatenate([sw * (predict_log(x, w) - target), reg * (x - x_prior)])

        ref = least_squares(residuals, x_prior, bounds=(lo, hi))
        x, cost = solve(x_prior[None, :], x_prior[None, :], Widths(w.gpus[None], w.nodes[None], w.local[None]),
                        target[None], sw[None])
        assert cost[0] <= ref.cost * (1 + 1e-3) + 1e-9


# -- fitting -----------------------------------------------------------------------------------------

def test_fit_recovers_known_params_from_synthetic_observations():
    model = MeasuredSpeedModel(4)
    rng = np.random.default_rng(3)
    for batch in (64, 256):
        for gpus, nodes in WIDTHS:
            for _ in range(4):
                noisy = TRUE.step_time(gpus, nodes, batch) * math.exp(rng.normal(0, 0.02))
                assert model.observe(Observation("7", gpus, nodes, batch, batch / noisy, 1.0))
    view = job("7", batch=128)   # a batch between the measured ones
    for gpus in (1, 2, 3, 4, 8, 12, 16, 32):
        assert model.iteration_time(view, gpus) == pytest.approx(TRUE.step_time(gpus, -(-gpus // 4), 128), rel=0.06)


@pytest.mark.parametrize("app", [None, "bert", "resnet50"])
@pytest.mark.parametrize("gpn", [4, 8])
def test_saturating_job_predicts_flat_or_worse_and_linear_job_near_linear(app, gpn):
    model = MeasuredSpeedModel(gpn)
    feed(model, "sat", {1: 1.0, 2: 0.55, 4: 0.55}, gpn=gpn, repeat=3)
    feed(model, "lin", {1: 1.0, 2: 0.5, 4: 0.25}, gpn=gpn, repeat=3)
    sat = curve(model, job("sat", app))
    lin = curve(model, job("lin", app))
    # measured widths reproduced
    assert sat[:3] == pytest.approx([1.0, 0.55, 0.55], rel=0.12)
    assert lin[:3] == pytest.approx([1.0, 0.5, 0.25], rel=0.06)
    # past the measurements: the saturating job gains nothing, the linear one keeps scaling
    assert sat[3] >= 0.95 * sat[2] and sat[4] >= 0.95 * sat[2]
    assert lin[3] <= 0.7 * lin[2]
    assert model.source("sat") == "measured (9 obs, widths 1,2,4)"


def test_across_nodes_optimistic_by_default_or_the_priors_ratio():
    views = {}
    for ratio in (1.1, None):
        model = MeasuredSpeedModel(4, across_nodes=ratio)
        feed(model, "lin", {1: 1.0, 2: 0.5, 4: 0.25}, repeat=2)
        views[ratio] = curve(model, job("lin", "bert"), (4, 8))
        feed(model, "lin", {8: 0.25})                       # measured across nodes: the data decides
        assert model.iteration_time(job("lin", "bert"), 8) == pytest.approx(0.25, rel=0.1)
    assert views[1.1][1] < 0.7 * views[1.1][0]               # optimistic: one node more looks worth trying
    assert views[None][1] > 0.9 * views[None][0]             # the trace's cross-node sync (4.6x in-node)


def test_measurements_override_a_wrong_prior():
    """resnet50's trace scales well on one node; a job named resnet50 that does not is believed."""
    model = MeasuredSpeedModel(8)
    view = job("r", "resnet50", batch=256)
    prior = curve(model, view, (1, 4))
    assert prior[1] < 0.4 * prior[0]                      # the trace's curve
    feed(model, "r", {1: 2.0, 2: 1.9, 4: 1.9}, batch=256, gpn=8, repeat=2)
    measured = curve(model, view, (1, 4, 8))
    assert measured[0] == pytest.approx(2.0, rel=0.1)
    assert measured[1] > 0.85 * measured[0] and measured[2] > 0.85 * measured[0]


def test_one_width_keeps_the_priors_shape_scaled_to_the_job():
    model = MeasuredSpeedModel(4)
    view = job("s", "bert", batch=64)
    prior = curve(model, view)
    assert model.source("s") == "trace:bert"
    feed(model, "s", {4: 3 * prior[2]}, repeat=2)   # this job runs 3x slower than the trace's hardware
    fitted = curve(model, view)
    assert fitted == pytest.approx([3 * t for t in prior], rel=0.02)


def test_prior_only_answers():
    prior = Prior.default()
    for name in ("resnet50", "ResNet-50", "imagenet", "torchvision/resnet_50"):
        assert prior.params(name, 256)[1] == "trace:imagenet"
    assert prior.params("resnet18", 128)[1] == "trace:cifar10"
    assert prior.params("bert-base-uncased", 12)[1] == "trace:bert"
    assert {prior.params(n, 8)[1] for n in ("deepspeech2", "ncf", "yolov3")} == \
        {"trace:deepspeech2", "trace:ncf", "trace:yolov3"}
    assert prior.params("gpt2", 8)[1] == "family:transformer"
    assert prior.params("vgg16", 8)[1] == "family:cnn"
    params, label = prior.params("no-such-model-xyz", 32)
    assert label == "linear"
    assert params.step_time(1, 1, 32) == pytest.approx(1.0)        # the old model's 1 s/step on one GPU
    assert params.step_time(8, 1, 32) < 0.15                       # and close to linear
    model = MeasuredSpeedModel(4)
    view = job("p", "resnet50", batch=256)
    assert model.iteration_time(view, 8) == pytest.approx(prior.params("resnet50", 256)[0].step_time(8, 2, 256))
    assert model.source("p") == "trace:imagenet" and model.source("never-seen") == "linear"


def test_a_malformed_prior_table_is_one_clear_error(tmp_path):
    from slurm_liquid.errors import LiquidError

    with pytest.raises(LiquidError, match="malformed"):
        Prior({"traces": {}})
    with pytest.raises(LiquidError, match="does not hold: imagenet"):
        Prior({"traces": {}, "linear": TRUE.as_dict(), "families": {"cnn": "imagenet"}})
    bad = dict(TRUE.as_dict(), gamma=float("nan"))
    with pytest.raises(LiquidError, match="malformed"):
        Prior({"traces": {"x": {"params": bad}}, "linear": TRUE.as_dict()})
    (tmp_path / "p.json").write_text("[1]")
    with pytest.raises(LiquidError, match="JSON object"):
        Prior.load(tmp_path / "p.json")
    with pytest.raises(LiquidError, match="cannot read"):
        Prior.load(tmp_path / "missing.json")


def test_shipped_prior_fits_the_traces():
    from slurm_liquid.sim.apps import TRACE_DIR

    prior = Prior.default()
    for app in ("cifar10", "imagenet", "bert", "deepspeech2", "ncf", "yolov3"):
        params, _ = prior.params(app, None)
        errors = []
        with (TRACE_DIR / app / "placements.csv").open(newline="") as fh:
            for row in csv.DictReader(fh):
                per_node = [int(c) for c in row["placement"]]
                gpus = sum(per_node)
                predicted = params.step_time(gpus, len(per_node), float(row["local_bsz"]) * gpus)
                errors.append(abs(math.log(predicted / float(row["step_time"]))))
        assert np.median(errors) < 0.10, app


def test_remaining_iterations():
    from slurm_liquid.sim.oracle import OracleSpeedModel

    model = MeasuredSpeedModel(4)
    view = job("r", "resnet18", batch=128)
    oracle = OracleSpeedModel(4).remaining_iterations(JobView("r", 0.0, 1, app="cifar10", batch_size=128))
    assert model.remaining_iterations(view) == pytest.approx(oracle, rel=0.02)   # prior: the trace's steps
    assert model.remaining_iterations(job("u", "no-such-model")) == 1000.0
    assert model.observe(Observation("r", 1, 1, 128, 500.0, 1.0), step=40, total=100)
    assert model.remaining_iterations(view) == 60.0
    assert model.record_progress("r", 99, 100)
    assert model.remaining_iterations(view) == 1.0
    assert model.record_progress("r", 150, None) and model.remaining_iterations(view) == 1.0


# -- reach and source -----------------------------------------------------------------------------

def test_reach():
    model = MeasuredSpeedModel(8)
    assert model.reach(job("a", gpus=2)) == 2                                     # pending, unmeasured
    assert model.reach(job("a", gpus=2, allocation=(("n1", 4),))) == 8            # running, unmeasured: one step
    assert model.reach(job("a", gpus=1, min_gpus=3)) == 3
    feed(model, "a", {1: 1.0, 2: 0.5}, gpn=8)
    assert model.reach(job("a")) == 4
    feed(model, "a", {8: 0.2}, gpn=8)
    assert model.reach(job("a")) == 16                                             # doubling = one node more
    feed(model, "a", {16: 0.1}, gpn=8)
    assert model.reach(job("a")) == 24                                             # at most one node more
    assert model.reach(job("a", upper=20)) == 20
    assert model.reach(job("a", allocation=(("n1", 8),) * 4)) == 40                # one step past what it holds
    assert model.source("a") == "measured (4 obs, widths 1,2,8,16)"
    model.forget("a")
    assert model.reach(job("a", gpus=1)) == 1 and model.source("a") == "linear"


# -- claims ------------------------------------------------------------------------------------------

HOSTILE = [
    Observation("1", 1, 1, 64, float("nan"), 0.0),
    Observation("1", 1, 1, 64, float("inf"), 0.0),
    Observation("1", 1, 1, 64, -5.0, 0.0),
    Observation("1", 1, 1, 64, 0.0, 0.0),
    Observation("1", 1, 1, 64, 2e7, 0.0),
    Observation("1", 1, 1, 64, 1e-9, 0.0),             # a step of 2 years
    Observation("1", 0, 1, 64, 100.0, 0.0),
    Observation("1", 5000, 1250, 64, 100.0, 0.0),
    Observation("1", True, 1, 64, 100.0, 0.0),          # type: ignore[arg-type]
    Observation("1", 2.0, 1, 64, 100.0, 0.0),           # type: ignore[arg-type]
    Observation("1", 2, 3, 64, 100.0, 0.0),              # more nodes than GPUs
    Observation("1", 16, 1, 64, 100.0, 0.0),             # 16 GPUs on one 4-GPU node
    Observation("1", 1, 1, 0, 100.0, 0.0),
    Observation("1", 1, 1, 10 ** 400, 100.0, 0.0),
    Observation("1", 1, 1, 64, "100", 0.0),              # type: ignore[arg-type]
    Observation("1", 1, 1, 64, 100.0, float("nan")),
    Observation("", 1, 1, 64, 100.0, 0.0),
    Observation("x" * 500, 1, 1, 64, 100.0, 0.0),
    Observation("a\nb", 1, 1, 64, 100.0, 0.0),
    Observation(None, 1, 1, 64, 100.0, 0.0),             # type: ignore[arg-type]
]


@pytest.mark.parametrize("obs", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_observations_are_refused_and_leave_nothing(obs, tmp_path):
    path = tmp_path / "speed.jsonl"
    model = MeasuredSpeedModel(4, journal=path)
    assert check(obs, 4) is not None
    assert model.observe(obs) is False
    assert model.source("1") == "linear" and not path.exists()


@pytest.mark.parametrize("step,total", [(-1, 10), (True, 10), (1.5, 10), (1, 0), (1, 10 ** 400), ("1", 10)])
def test_hostile_progress_refuses_the_whole_claim(step, total):
    model = MeasuredSpeedModel(4)
    assert model.observe(Observation("1", 1, 1, 64, 100.0, 0.0), step=step, total=total) is False
    assert model.source("1") == "linear"
    assert model.record_progress("1", step, total) is False


def test_a_chatty_job_does_not_dominate_and_storage_is_bounded():
    model = MeasuredSpeedModel(4, max_observations=3)
    feed(model, "c", {1: 1.0, 2: 0.5})
    feed(model, "c", {4: 0.25}, repeat=500)        # one width reported 500 times
    view = job("c")
    assert curve(model, view, (1, 2, 4)) == pytest.approx([1.0, 0.5, 0.25], rel=0.06)
    feed(model, "c", {8: 0.13})
    assert model.source("c") == "measured (502 obs, widths 2,4,8)"    # the stalest width went


def test_refits_only_when_averages_move_and_in_one_batch():
    model = MeasuredSpeedModel(4)
    for i in range(20):
        feed(model, str(i), {1: 1.0, 2: 0.6})
    model.iteration_time(job("0"), 2)
    assert model.fits == 20                         # the first question fitted every pending job
    for i in range(20):
        feed(model, str(i), {2: 0.601})             # the same speed again
    for i in range(20):
        model.iteration_time(job(str(i)), 4)
    assert model.fits == 20
    feed(model, "3", {4: 0.5})                      # a new width
    assert model.prepare([job(str(i)) for i in range(20)]) == 1 and model.fits == 21


# -- the journal ------------------------------------------------------------------------------------

def test_journal_round_trip(tmp_path):
    path = tmp_path / "speed.jsonl"
    model = MeasuredSpeedModel(4, journal=path)
    feed(model, "a", {1: 1.0, 2: 0.55, 4: 0.55})
    assert model.observe(Observation("b", 2, 1, 32, 100.0, 5.0), step=10, total=50, model="resnet50")
    before = curve(model, job("a"))
    model.close()
    again = MeasuredSpeedModel(4, journal=path)
    assert curve(again, job("a")) == pytest.approx(before, rel=1e-9)
    assert again.source("a") == "measured (3 obs, widths 1,2,4)"
    assert again.remaining_iterations(job("b")) == 40.0
    assert again.params(job("b", app=None, batch=None)) == again.params(job("b", "resnet50", batch=32))
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_journal_skips_corrupt_lines_with_one_warning(tmp_path, caplog):
    path = tmp_path / "speed.jsonl"
    model = MeasuredSpeedModel(4, journal=path)
    feed(model, "a", {1: 1.0, 2: 0.5})
    model.close()
    with open(path, "ab") as fh:
        fh.write(b"not json\n[1,2]\n" + b'{"j": "a", "g": 1, "n": 1, "b": 64, "s": NaN, "t": 0}\n'
                 + b"\xff\xfe\n" + b'{"j":"a","g":4,"n":1,"b":64,"s":256.0,"t":2.0}\n' + b'{"j": "a", "g": 8')
    with caplog.at_level(logging.WARNING, logger="slurm_liquid.speed"):
        again = MeasuredSpeedModel(4, journal=path)
    warnings = [r for r in caplog.records if "corrupt" in r.getMessage()]
    assert len(warnings) == 1 and "4 corrupt" in warnings[0].getMessage()
    assert again.source("a") == "measured (3 obs, widths 1,2,4)"   # the NaN line was read but not believed


def test_journal_refuses_a_symlink(tmp_path, caplog):
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    path = tmp_path / "speed.jsonl"
    path.symlink_to(target)
    with caplog.at_level(logging.WARNING, logger="slurm_liquid.speed"):
        model = MeasuredSpeedModel(4, journal=path)
        feed(model, "a", {1: 1.0, 2: 0.5})
    assert target.read_text() == "keep me\n"
    assert model.journal.broken and any("memory" in r.getMessage() for r in caplog.records)
    assert model.source("a") == "measured (2 obs, widths 1,2)"     # the model goes on in memory


def test_journal_refuses_a_fifo_and_a_hard_link(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    model = MeasuredSpeedModel(4, journal=fifo)     # must not hang
    feed(model, "a", {1: 1.0})
    assert model.journal.broken
    other = tmp_path / "other"
    other.write_text("")
    linked = tmp_path / "linked"
    os.link(other, linked)
    model = MeasuredSpeedModel(4, journal=linked)
    feed(model, "a", {1: 1.0})
    assert model.journal.broken and other.read_text() == ""


def test_journal_compaction_drops_finished_jobs_and_keeps_the_state(tmp_path):
    path = tmp_path / "speed.jsonl"
    model = MeasuredSpeedModel(4, journal=path, compact_after=200)
    feed(model, "done", {1: 1.0, 2: 0.5}, repeat=20)
    model.forget("done")
    for i in range(300):
        assert model.observe(Observation("live", 1 + i % 4, 1, 64, 64.0 * (1 + i % 4) * (1 + 0.001 * i), float(i)),
                             step=i, total=1000)
    lines = path.read_text().splitlines()
    assert len(lines) <= 200 + 10
    assert not any('"done"' in line for line in lines)
    before = (curve(model, job("live")), model.source("live"), model.remaining_iterations(job("live")))
    model.close()
    again = MeasuredSpeedModel(4, journal=path)
    after = (curve(again, job("live")), again.source("live"), again.remaining_iterations(job("live")))
    assert after[0] == pytest.approx(before[0], rel=1e-6) and after[1:] == before[1:]
    assert again.source("done") == "linear"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


# -- properties -------------------------------------------------------------------------------------

finite = st.floats(min_value=1e-3, max_value=1e7, allow_nan=False)
anything = st.one_of(st.none(), st.booleans(), st.integers(-10, 10 ** 20), st.floats(allow_nan=True),
                     st.text(max_size=5))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 10 ** 6), finite), min_size=1, max_size=8),
       st.sampled_from([None, "bert", "resnet50", "gpt2", "ncf"]), st.integers(1, 4096), st.integers(1, 10 ** 5))
def test_predictions_are_finite_and_positive_for_accepted_input(reports, app, ask, batch):
    model = MeasuredSpeedModel(8)
    for gpus, rep_batch, sps in reports:
        model.observe(Observation("j", gpus, -(-gpus // 8), rep_batch, sps, 0.0))
    view = job("j", app, batch=batch)
    value = model.iteration_time(view, ask)
    assert math.isfinite(value) and value > 0
    assert math.isfinite(model.remaining_iterations(view)) and model.remaining_iterations(view) >= 1
    assert 1 <= model.reach(view) <= 64


@settings(max_examples=200, deadline=None)
@given(anything, anything, anything, anything, anything, anything, anything, anything)
def test_observe_never_raises(job_id, gpus, nodes, batch, sps, at, step, total):
    model = MeasuredSpeedModel(4)
    accepted = model.observe(Observation(job_id, gpus, nodes, batch, sps, at), step=step, total=total)
    assert accepted in (True, False)
    if accepted:
        value = model.iteration_time(job(job_id), 4)
        assert math.isfinite(value) and value > 0


def test_the_package_imports_neither_simulator_nor_daemon():
    code = ("import sys, slurm_liquid.speed as s; s.MeasuredSpeedModel(4).iteration_time("
            "__import__('slurm_liquid.views', fromlist=['x']).JobView('1', 0.0, 1, app='bert', batch_size=8), 4);"
            "bad = [m for m in sys.modules if m.startswith(('slurm_liquid.sim', 'slurm_liquid.daemon'))];"
            "print(bad); sys.exit(1 if bad else 0)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_priors_file_is_the_generators_format():
    from slurm_liquid.speed.prior import PRIORS_FILE

    with open(PRIORS_FILE, encoding="utf-8") as fh:
        data = json.load(fh)
    assert set(data["traces"]) == {"cifar10", "imagenet", "bert", "deepspeech2", "ncf", "yolov3"}
    assert set(data["aliases"]) >= {"resnet18", "resnet50", "bert-base", "deepspeech2", "ncf", "yolov3"}


def test_a_restarted_daemon_keeps_what_the_journal_holds_before_it_knows_its_nodes(tmp_path):
    """The daemon builds its model before it has read Slurm's nodes (GPUs per node 1, set each slot):
    the journal's 4-GPU-on-1-node observations must survive that replay."""
    path = tmp_path / "speed.jsonl"
    first = MeasuredSpeedModel(4, journal=path)
    assert first.observe(Observation("7", 4, 1, 64, 400.0, 1.0))
    first.close()
    again = MeasuredSpeedModel(1, journal=path)
    assert again.source("7").startswith("measured")
