"""The stated risk: split-conformal bound from calibration scores, used by requests and advice."""

from __future__ import annotations

import json
import math

import pytest

from slurm_liquid.cli import main
from slurm_liquid.errors import UsageError
from slurm_liquid.estimate import risk
from slurm_liquid.estimate.api import estimate
from slurm_liquid.estimate.prior import MIB
from slurm_liquid.jobspec import JobSpec


def test_the_bound_is_the_conformal_rank_of_the_scores():
    scores = tuple(sorted(math.log(1 + i / 100) for i in range(39)))     # n = 39: 0%..38% over
    model = risk.RiskModel(scores, "test")
    m = model.margin(0.05)                  # rank ceil(40 x 0.95) = 38 -> the 38th smallest: 37%
    assert m.guaranteed and m.factor == pytest.approx(1.37) and m.rows == 39
    assert model.margin(0.5).factor == pytest.approx(1.19)          # rank 20
    few = risk.RiskModel(scores[:10], "few")
    assert not few.margin(0.05).guaranteed and few.margin(0.05).factor == pytest.approx(1.09)   # the largest
    assert risk.RiskModel((-0.2, -0.1), "over").margin(0.05).factor == 1.0    # never below the point


def test_a_models_score_is_its_worst_row():
    rows = [("a", 110, 100), ("a", 90, 100), ("b", 100, 100), ("c", 80, 100)]
    assert risk.scores_from(rows) == pytest.approx((math.log(0.8), 0.0, math.log(1.1)))


def test_coverage_holds_on_exchangeable_scores():
    import random

    rng = random.Random(0)
    draws = [rng.gauss(0, 0.1) for _ in range(4000)]
    model = risk.RiskModel(tuple(sorted(draws[:99])), "cal")
    q = math.log(model.margin(0.05).factor)
    assert sum(d > q for d in draws[99:]) / len(draws[99:]) <= 0.06


def test_a_malformed_risk_file_is_one_usage_error(tmp_path):
    bad = tmp_path / "risk.json"
    bad.write_text(json.dumps({"format": risk.FORMAT, "version": 1, "scores": ["x"]}))
    with pytest.raises(UsageError, match="scores"):
        risk.load(bad)


def test_requests_use_the_bound_and_say_the_point():
    spec = JobSpec.from_values({"model": "llama-2-7b", "adapter": "lora", "micro-batch": "1", "seq-len": "2048",
                                "precision": "bf16-pure"})
    point = estimate(spec, gpu_type="h100", correction="none", risk=None)
    bound = estimate(spec, gpu_type="h100", correction="none")
    factor = risk.risk_model().margin(risk.DEFAULT_RISK).factor
    assert factor > 1
    context = point.decision.per_gpu.context
    assert bound.decision.need_mib == pytest.approx(context / MIB + (point.decision.need_mib - context / MIB) * factor,
                                                    abs=2)
    out = bound.to_json()
    assert out["point_mib"] == point.decision.need_mib and out["bound_mib"] == out["gpu_mem_mib"]
    assert out["risk"] == 0.05 and "point estimate" in bound.explanation()


def test_advice_fits_by_the_bound():
    spec = JobSpec.from_values({"model": "llama-2-13b", "micro-batch": "4", "seq-len": "4096", "precision": "bf16",
                                "gpus": "2"})
    result = estimate(spec, gpu_type="a100-40gb", correction="none")
    for option in result.advice:
        assert option.need_mib <= 40960
    point_only = estimate(spec, gpu_type="a100-40gb", correction="none", risk=None)
    assert all(o.need_mib >= p.need_mib for o, p in zip(result.advice, point_only.advice) if o.change == p.change)


def test_calibrate_writes_a_risk_file_the_estimate_reads(tmp_path, capsys):
    history = tmp_path / "site.csv"
    history.write_text("model,batch-size,precision,measure,measured_mib\n"
                       + "".join(f"resnet50,{b},amp,nvml,{m}\n" for b, m in
                                 [(32, 9000), (64, 12000), (128, 20000), (16, 6000), (8, 4000)]))
    out = tmp_path / "risk.json"
    assert main(["estimate", "calibrate", "--history", str(history), "--out", str(out), "--site-only"]) == 0
    model = risk.load(out)
    assert len(model.scores) == 1 and "site rows" in model.source       # one model: one score, its worst row
    code = main(["estimate", "--model", "resnet50", "--batch-size", "64", "--precision", "amp", "--json",
                 "--risk-file", str(out), "--risk", "0.2", "--correction", "none"])
    got = json.loads(capsys.readouterr().out)
    assert got["risk"] == 0.2 and got["risk_models"] == 1 and got["gpu_mem_mib"] >= got["point_mib"]
    assert got["risk_guaranteed"] is False            # 1 model cannot back a risk of 1 in 5
    assert main(["estimate", "--model", "resnet50", "--batch-size", "64", "--risk", "2"]) == 2
    assert "risk: 2.0 is outside (0, 1)" in capsys.readouterr().err
