"""The closed loop: finished jobs' records + the agents' measurements -> a retrained correction,
scored on held-out jobs, installed only when better; measured utilisation gates GPU sharing."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re

import pytest

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate import learn
from slurm_liquid.estimate.api import estimate
from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.correction import Correction, Tree, load
from slurm_liquid.estimate.decide import ModelUsage
from slurm_liquid.estimate.prior import MIB, breakdown, resolve_entry
from slurm_liquid.jobspec import JobSpec, parse_directives
from slurm_liquid.ledger import Record, Tag, TrustedSpec, Usage
from slurm_liquid.ledger.tag import spec_digest
from slurm_liquid.slurm.models import Job

CATALOG = load_catalog()
TRANSFORMERS = ("bert-base", "bert-large", "roberta-base", "gpt2", "gpt2-medium", "t5-small", "t5-base",
                "xlnet-base")
CNNS = ("resnet18", "resnet50", "resnet101", "vgg16", "densenet121", "mobilenet_v2", "efficientnet_b0",
        "convnext_tiny")
# the bias the prior is known to have in the synthetic cluster: what the learner must find
BIAS = {"transformer": 1.35, "cnn": 0.8}


def spec_of(**values: object) -> JobSpec:
    return JobSpec.from_values({k.replace("_", "-"): str(v) for k, v in values.items()})


def job(job_id: int, spec: JobSpec | str | None, usage: Usage | None, state: str = "COMPLETED",
        gpus: int = 1, limit: int = 1024, placed_spec: str | None = None) -> Job:
    """A finished job as sacct reports it: the record in Comment, tag + usage in AdminComment.
    `placed_spec`: the spec the daemon saw at placement (its digest goes into the tag)."""
    text = spec.to_directive().removeprefix("#LIQUID ") if isinstance(spec, JobSpec) else spec
    comment = Record(spec=text).with_fields(mode="adjust").render(limit) if text is not None else ""
    trusted = TrustedSpec(digest=spec_digest(placed_spec)) if placed_spec is not None else None
    admin = "; ".join([Tag("placed", "gpu01:1", 1, trusted).render(), *([usage.render()] if usage else [])])
    return Job(job_id, "train", "alice", state, partition="gpu", gpus=gpus, comment=comment,
               admin_comment=admin, source="sacct")


def prior_mib(spec: JobSpec, gpus: int) -> float:
    return breakdown(resolve_entry(spec, CATALOG), spec, gpus).total / MIB


def biased_jobs(seed: int = 0, noise: float = 0.03, util: float = 70.0, start: int = 1000) -> list[Job]:
    """256 jobs over 16 catalogue models, 4 batch sizes, 2 precisions, twice (reruns): measured =
    prior x 1.35 (transformers) or x 0.8 (CNNs) x lognormal noise."""
    rng = random.Random(seed)
    jobs = []
    for _ in range(2):
        for name in TRANSFORMERS + CNNS:
            for batch in (8, 16, 32, 64) if name in TRANSFORMERS else (32, 64, 128, 256):
                for precision in ("fp32", "amp"):
                    gpus = rng.choice((1, 1, 2))
                    spec = spec_of(model=name, batch_size=batch * gpus, precision=precision)
                    bias = BIAS["transformer" if name in TRANSFORMERS else "cnn"]
                    peak = int(prior_mib(spec, gpus) * bias * math.exp(rng.gauss(0, noise)))
                    usage = Usage("nvml", gpus, peak, util, nodes=("gpu01",))
                    jobs.append(job(start + len(jobs), spec, usage, gpus=gpus))
    return jobs


def test_history_rows_join_spec_and_measurement():
    spec = spec_of(model="bert-large", batch_size=64, precision="amp", seq_len=256)
    rows, skipped = learn.history_from_jobs([job(7, spec, Usage("nvml", 2, 21000, 85, nodes=("gpu01",)),
                                                 gpus=2)], CATALOG)
    assert skipped == {} and len(rows) == 1
    row = rows[0]
    assert (row.entry.name, row.gpus, row.measure, row.measured_mib) == ("bert-large", 2, "nvml", 21000)
    assert row.spec.seq_len == 256 and row.spec.precision == "amp"
    # the prior of the width the job ran on: micro-batch 32 per GPU
    assert row.prior.micro_batch == 32 and row.prior_mib == pytest.approx(prior_mib(spec, 2))
    assert row.extra["util"] == "85" and row.extra["job_id"] == "7"


def test_skipped_jobs_are_counted_by_reason():
    good = spec_of(model="resnet50", batch_size=64)
    used = Usage("nvml", 1, 9000, 70, nodes=("gpu01",))
    jobs = [
        job(1, good, used),
        job(2, good, dataclasses.replace(used, by="nvml-acct")),
        job(3, good, dataclasses.replace(used, by="standin")),
        job(4, good, dataclasses.replace(used, by="none", peak_mib=0)),
        job(5, good, dataclasses.replace(used, peak_mib=0)),
        job(6, good, None),                                         # no agent reading
        job(7, None, used),                                         # did not opt in
        job(8, "", used),                                           # record without a spec
        job(9, good, used, limit=50),                               # spec cut to fit Comment
        job(10, "model=transformer-xyz batch-size=8", used),        # unknown model
        job(11, "model=resnet50 batch-size=-3", used),              # invalid value
        job(12, "model=resnet50", used),                            # no batch size
        job(13, good, used, state="RUNNING"),                       # peak not final yet
        job(14, good, used, gpus=0),                                # a CPU job
        job(15, good, used, placed_spec="model=resnet50 batch-size=8"),   # Comment edited after placement
        job(16, good, used, placed_spec=good.to_directive().removeprefix("#LIQUID ")),   # as placed
    ]
    assert jobs[8].comment.endswith("...") and Record.parse(jobs[8].comment).spec.endswith("...")
    rows, skipped = learn.history_from_jobs(jobs, CATALOG)
    assert sorted(r.extra["job_id"] for r in rows) == ["1", "16", "2"]
    assert skipped == {"stand-in readings": 1, "no GPU readings": 1, "peak 0": 1, "no usage": 1,
                       "no record": 1, "no spec": 1, "spec cut": 1, "unknown model": 1,
                       "spec invalid": 2, "not finished": 1, "no GPU": 1, "spec edited": 1}
    rows, skipped = learn.history_from_jobs(jobs, CATALOG, allow_standin=True)
    assert sorted(r.extra["job_id"] for r in rows) == ["1", "16", "2", "3"] and "stand-in readings" not in skipped


def test_a_requeued_job_counts_once_with_its_last_run():
    spec = spec_of(model="resnet50", batch_size=64)
    first = job(5, spec, Usage("nvml", 1, 4000, 50, nodes=("gpu01",)), state="REQUEUED")
    last = job(5, spec, Usage("nvml", 1, 9000, 70, nodes=("gpu02",)))
    rows, skipped = learn.history_from_jobs([first, last], CATALOG)
    assert [r.measured_mib for r in rows] == [9000] and skipped == {}


def test_closed_loop_learns_the_bias_of_the_prior():
    rows, skipped = learn.history_from_jobs(biased_jobs(), CATALOG)
    assert len(rows) == 256 and skipped == {}
    report = learn.retrain(rows, current=None, holdout=0.25, seed=0)
    assert report.new.rows == 64 and report.train_rows == 192
    # the prior is off by -26%/+25%: about 26% mean error and the transformers (half) under
    assert report.prior.mre > 0.2 and report.prior.under > 0.4
    # measured on this data: prior 26.0% / 56% under -> new 5.9% / 5% under
    assert report.new.mre < 0.5 * report.prior.mre and report.new.mre < 0.1
    assert report.new.under <= 0.10
    assert report.better and report.current is None
    # the model to install is refit on every job; the scored one saw only the train part
    assert report.model.meta["rows"] == 256 and report.trial.meta["rows"] == 192
    assert report.model.meta["heldout"]["new"]["mre"] == pytest.approx(report.new.mre, abs=1e-4)
    # and it carries the family bias: ~1.35 for a transformer, ~0.8 for a CNN (plus the margin)
    bert, resnet = spec_of(model="bert-base", batch_size=32), spec_of(model="resnet50", batch_size=128)
    for spec, bias in ((bert, 1.35), (resnet, 0.8)):
        entry = resolve_entry(spec, CATALOG)
        assert report.model.factor(entry, spec, breakdown(entry, spec)) == pytest.approx(bias, rel=0.15)


def test_the_split_is_deterministic_by_seed():
    rows, _ = learn.history_from_jobs(biased_jobs(), CATALOG)
    a, b = learn.retrain(rows, None, seed=3), learn.retrain(rows, None, seed=3)
    assert a.new == b.new and a.prior == b.prior
    assert learn.retrain(rows, None, seed=4).prior != a.prior   # another seed, another held-out set


def noise_jobs() -> list[Job]:
    """The same jobs, measured by a broken agent: readings unrelated to the job (x0.5..2 of the prior)."""
    rng = random.Random(7)
    jobs = []
    for j in biased_jobs():
        usage = Usage.parse(j.admin_comment)
        spec = parse_directives(Record.parse(j.comment).spec)
        peak = int(prior_mib(spec, usage.gpus) * math.exp(rng.uniform(-0.7, 0.7)))
        jobs.append(dataclasses.replace(j, admin_comment=j.admin_comment.replace(
            f"peak={usage.peak_mib}", f"peak={peak}")))
    return jobs


def test_a_worse_model_is_not_installed(tmp_path):
    good, _ = learn.history_from_jobs(biased_jobs(), CATALOG)
    path = tmp_path / "correction.json"
    current = learn.fit_records(good)
    current.save(path)
    before = path.read_bytes()
    noisy, _ = learn.history_from_jobs(noise_jobs(), CATALOG)
    report = learn.retrain(noisy, load(path))
    # the noise-trained model needs a wide margin to keep under-estimates down: worse mean error
    assert not report.better and "not below the current model's" in report.verdict
    assert report.new.mre > report.current.mre
    assert path.read_bytes() == before and not (tmp_path / "correction.json.prev").exists()


def test_a_better_model_is_installed_and_the_old_one_kept(tmp_path):
    noisy, _ = learn.history_from_jobs(noise_jobs(), CATALOG)
    path = tmp_path / "correction.json"
    learn.fit_records(noisy).save(path)
    old = path.read_bytes()
    good, _ = learn.history_from_jobs(biased_jobs(), CATALOG)
    report = learn.retrain(good, load(path))
    assert report.better and report.new.mre < report.current.mre
    backup = learn.install(report.model, path)
    assert backup == tmp_path / "correction.json.prev" and backup.read_bytes() == old
    assert load(path).to_json() == report.model.to_json()
    assert not list(tmp_path.glob("*.tmp"))


def test_install_without_a_previous_file(tmp_path):
    good, _ = learn.history_from_jobs(biased_jobs(), CATALOG)
    path = tmp_path / "correction.json"
    assert learn.install(learn.fit_records(good), path) is None and load(path).meta["rows"] == 256


@pytest.mark.parametrize("prior_under, current, new, better, why", [
    (0.10, None, (0.05, 0.08), True, "mean error"),
    (0.10, None, (0.05, 0.15), False, "under-estimates 15%"),   # limit max(prior's 10%, 10%)
    (0.30, None, (0.05, 0.15), True, "mean error"),             # without a model the prior answers today
    (0.10, None, (0.25, 0.05), False, "not below the prior alone's 20.0%"),
    (0.10, (0.08, 0.05), (0.06, 0.09), True, "mean error"),
    (0.10, (0.08, 0.20), (0.06, 0.18), True, "mean error"),     # not worse than today's 20%
    (0.30, (0.08, 0.05), (0.06, 0.12), False, "limit 10%"),     # the current model is the bar, not the prior
    (0.10, (0.08, 0.05), (0.08, 0.05), False, "not below"),
])
def test_judge(prior_under, current, new, better, why):
    prior = learn.Score(40, 0.20, prior_under)
    ok, verdict = learn.judge(prior, learn.Score(40, *current) if current else None, learn.Score(40, *new))
    assert ok is better and why in verdict


def test_retrain_needs_enough_jobs_and_a_sane_holdout():
    rows, _ = learn.history_from_jobs(biased_jobs()[:6], CATALOG)
    with pytest.raises(UsageError, match="need at least 5"):
        learn.retrain(rows, None)
    with pytest.raises(UsageError, match="holdout"):
        learn.retrain(rows, None, holdout=1.0)


def test_target_matches_what_the_estimator_applies():
    # a job that used exactly the corrected estimate has that factor as its target
    spec = spec_of(model="resnet18", batch_size=32)
    entry = resolve_entry(spec, CATALOG)
    prior = breakdown(entry, spec)
    measured = prior.scaled(1.3).total / MIB
    row = learn.Record(entry, spec, 1, "nvml", measured, prior, {})
    assert math.exp(learn.target(row)) == pytest.approx(1.3)
    tree = Tree((0,), (0.0,), (-1,), (-1,), (math.log(1.3),))
    assert learn.estimated_mib(row, Correction(0.0, 1.0, 0.0, (tree,), {})) == pytest.approx(measured)


# --- sharing feedback -------------------------------------------------------------------------

def flat_model(sharing: dict[str, ModelUsage]) -> Correction:
    """Factor 1 everywhere: the decision then differs from the prior's only by the sharing table."""
    return Correction(0.0, 1.0, 0.0, (Tree((0,), (0.0,), (-1,), (-1,), (0.0,)),), {"method": "rf"}, sharing)


SMALL = spec_of(model="resnet18", batch_size=32)


def test_the_small_job_shares_a_gpu_without_evidence():
    plain = estimate(SMALL, correction="none")
    assert plain.decision.shards > 0 and plain.decision.gres.startswith("shard:")


@pytest.mark.parametrize("usage, shares", [
    (ModelUsage(5, 85.0, 1500.0), False),     # busy, enough evidence
    (ModelUsage(3, 60.0, 1500.0), False),     # at the threshold
    (ModelUsage(5, 30.0, 1500.0), True),      # quiet: shares as before
    (ModelUsage(2, 95.0, 1500.0), True),      # too little evidence
    (None, True),                             # never measured
])
def test_measured_utilisation_gates_shards(tmp_path, usage, shares):
    path = tmp_path / "correction.json"
    flat_model({"resnet18": usage} if usage else {"resnet50": ModelUsage(9, 99.0, 9000.0)}).save(path)
    plain = estimate(SMALL, correction="none")
    got = estimate(SMALL, correction=str(path))
    assert got.decision.need_mib == plain.decision.need_mib
    if shares:
        assert got.decision.shards == plain.decision.shards and got.decision.notes == ()
    else:
        note = f"measured median GPU utilisation {usage.util:.0f}% over {usage.jobs} jobs: too busy to share"
        assert got.decision.shards == 0 and got.decision.gpus == 1
        assert got.decision.gres == f"gpu:{got.gpu.gres_type}:1"
        assert note in got.explanation() and note in got.to_json()["notes"]


def test_the_busy_threshold_is_a_parameter(tmp_path):
    path = tmp_path / "correction.json"
    flat_model({"resnet18": ModelUsage(5, 85.0, 1500.0)}).save(path)
    assert estimate(SMALL, correction=str(path), busy_util=90).decision.shards > 0
    assert estimate(SMALL, correction=str(path), busy_util=80).decision.shards == 0


def test_sharing_table_from_measured_jobs(tmp_path):
    spec = spec_of(model="resnet18", batch_size=32)
    utils = (80, 90, 85, 20, 95)
    jobs = [job(i, spec, Usage("nvml", 1, 1500 + 100 * i, u, nodes=("gpu01",))) for i, u in enumerate(utils)]
    jobs += biased_jobs(util=30.0)
    rows, _ = learn.history_from_jobs(jobs, CATALOG)
    table = learn.sharing_table(rows)
    # resnet18: the 5 jobs above (median 85%) + 16 biased ones at 30% -> 21 jobs, median 30
    assert table["resnet18"].jobs == 21 and table["resnet18"].util == 30.0
    assert table["gpt2"] == ModelUsage(16, 30.0, table["gpt2"].peak_mib)
    only = learn.sharing_table(rows[:5])
    assert only["resnet18"] == ModelUsage(5, 85.0, 1700.0)
    # the whole loop: retrain, install, and the next resnet18 job gets a whole GPU
    busy_rows = rows[:5] + [r for r in rows[5:] if r.entry.name != "resnet18"]
    report = learn.retrain(busy_rows, None)
    path = tmp_path / "correction.json"
    learn.install(report.model, path)
    assert load(path).sharing["resnet18"] == ModelUsage(5, 85.0, 1700.0)
    assert estimate(spec, correction=str(path)).decision.shards == 0
    assert estimate(spec_of(model="mobilenet_v2", batch_size=32), correction=str(path)).decision.shards > 0


def test_a_corrupted_sharing_section_names_the_file(tmp_path):
    path = tmp_path / "correction.json"
    flat_model({"resnet18": ModelUsage(5, 85.0, 1500.0)}).save(path)
    doc = json.loads(path.read_text())
    doc["sharing"]["resnet18"]["util"] = "high"
    path.write_text(json.dumps(doc))
    where = f"correction file {re.escape(str(path))}"
    with pytest.raises(UsageError, match=f"{where}: malformed sharing data: resnet18: util"):
        estimate(SMALL, correction=str(path))


def test_an_installed_model_reaches_a_running_estimator(tmp_path):
    # the daemon estimates in one long process: it must not keep serving the file it first read
    path = tmp_path / "correction.json"
    learn.install(flat_model({}), path)
    assert estimate(SMALL, correction=str(path)).decision.shards > 0
    learn.install(flat_model({"resnet18": ModelUsage(5, 85.0, 1500.0)}), path)
    assert estimate(SMALL, correction=str(path)).decision.shards == 0
