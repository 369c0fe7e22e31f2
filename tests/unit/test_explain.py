"""`slurm-liquid explain`: a job's record expanded, and a plain answer for jobs that did not opt in."""

from __future__ import annotations

import json
from pathlib import Path

from slurm_liquid.config import Config, EstimateConfig
from slurm_liquid.estimate.api import estimate
from slurm_liquid.explain import explain
from slurm_liquid.jobspec import parse_directives
from slurm_liquid.slurm import Job

SITE = Path(__file__).resolve().parents[2] / "containers" / "slurm" / "liquid-site.toml"
CONFIG = Config(estimate=EstimateConfig(site=str(SITE)))
SPEC = "model=bert-large batch-size=64"
RECORD = f"liquid/1 mode=adjust est=2xh100-80gb:69G asked=gpu:h100:4 set=gpu:h100:2 placed=gpu01:2 | {SPEC}"
TAG = "ops: checked; liquid/1 state=placed placed=gpu01:2"


def a_job(comment: str, admin: str = "", **more) -> Job:
    return Job(101, "train", "alice", "RUNNING", nodes=("gpu01",), gpus=2, gpu_type="h100",
               comment=comment, admin_comment=admin, **more)


def test_a_record_is_expanded_with_a_fresh_estimate() -> None:
    out = explain(a_job(RECORD, TAG), CONFIG)
    assert out["record"] == RECORD and out["tag"] == "liquid/1 state=placed placed=gpu01:2"
    assert out["fields"] == {"mode": "adjust", "est": "2xh100-80gb:69G", "asked": "gpu:h100:4",
                             "set": "gpu:h100:2", "placed": "gpu01:2"}
    assert out["spec"] == SPEC
    est = estimate(parse_directives(SPEC), gpu_type="h100", site=str(SITE))
    assert out["estimate"]["gpus"] == est.decision.gpus and out["estimate"]["model"] == "bert-large"
    assert out["explanation"] == est.explanation()
    assert (out["job_id"], out["nodes"], out["gpus"]) == (101, ["gpu01"], 2)
    json.dumps(out)                                   # what --json prints


def test_a_job_that_did_not_opt_in() -> None:
    for comment in ("", "my run 3"):
        out = explain(a_job(comment), CONFIG)
        assert out["record"] is None and out["tag"] is None and "fields" not in out
        assert "did not opt in" in out["explanation"]


def test_a_spec_without_a_record_has_nothing_to_expand() -> None:
    out = explain(a_job("liquid: model=x batch-size=8"), CONFIG)
    assert out["record"] is None and "fields" not in out and "estimate" not in out


def test_a_record_with_an_error_is_not_re_estimated() -> None:
    out = explain(a_job("liquid/1 mode=adjust asked=gpu:4 err=batch-size | model=bert-large batch-size=-1"), CONFIG)
    assert out["fields"]["err"] == "batch-size" and "estimate" not in out and "explanation" not in out


def test_a_spec_that_no_longer_estimates_says_why() -> None:
    out = explain(a_job("liquid/1 mode=server asked=gpu:4 | model=no-such-model batch-size=8"), CONFIG)
    assert "estimate" not in out and out["explanation"].startswith("cannot re-estimate: ")
    assert "no-such-model" in out["explanation"]


def test_a_record_without_a_spec_shows_its_fields_only() -> None:
    out = explain(a_job("liquid/1 mode=server asked=none", "liquid/1 state=released why=no-GPUs-asked"), CONFIG)
    assert out["fields"] == {"mode": "server", "asked": "none"} and out["spec"] == ""
    assert out["tag"] == "liquid/1 state=released why=no-GPUs-asked" and "estimate" not in out


USED = "liquid-used/1 by=nvml gpus=2 peak=52000 util=87 host=9000 cpu=3.5 shared=0 secs=600 n=120 nodes=gpu01"


def test_what_the_agents_measured_is_shown_beside_the_estimate(capsys, monkeypatch) -> None:
    import argparse

    from slurm_liquid import explain as module

    job = a_job(RECORD, f"{TAG}; {USED}")
    assert explain(job, CONFIG)["used"] == USED
    assert explain(a_job("", USED), CONFIG)["used"] == USED          # a plain job is measured too

    class Client:
        def job(self, job_id):
            return job

    monkeypatch.setattr("slurm_liquid.slurm.connect", lambda *a, **k: Client())
    monkeypatch.setattr("slurm_liquid.config.load", lambda path=None: CONFIG)
    assert module.run(argparse.Namespace(job_id=101, json=False, config=None, container=None)) == 0
    text = capsys.readouterr().out
    est = estimate(parse_directives(SPEC), gpu_type="h100", site=str(SITE))
    assert "peak 52,000 MiB per GPU on 2 GPU(s), GPU utilisation 87%" in text
    assert f"{est.to_json()['gpu_mem_mib']:,} vs 52,000 MiB per GPU" in text
    # the point estimate, the bound that was asked for and the stated risk
    assert f"point estimate {est.point_mib:,} MiB per GPU, bound {est.decision.need_mib:,} MiB: risk 1 in 20" in text
