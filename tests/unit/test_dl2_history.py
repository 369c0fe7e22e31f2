"""DL2 warm-up from accounting: recorded `sacct --json` replays as slots, and a scheduler's decisions
written as accounting records come back exactly and can be imitated."""

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_liquid.errors import UsageError
from slurm_liquid.policy import make_policy
from slurm_liquid.policy.dl2.history import history_jobs, history_slots, load_history, node_capacity
from slurm_liquid.loop import PlaceStage
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.policy.dl2.train import agreement, imitation_steps, new_params, supervised, teacher_counts

ARTIFACT_PLACE = PlaceStage(MostFreeGreedy())
from slurm_liquid.ledger import Record
from slurm_liquid.sim.engine import Simulator
from slurm_liquid.slurm.models import Job

from .dl2_fixtures import CONFIG, small_workload

FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"
EPOCH = 1_800_000_000.0


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_recorded_accounting_replays_what_each_job_held(version):
    records = load_history(FIXTURES / version / "sacct.json")
    slots = list(history_slots(records, interval=1.0))
    assert slots
    view, counts = slots[-1]
    held = dict(zip((j.id for j in view.jobs), counts))
    assert held["3"] == 8 and held["5"] == 1   # still running when the history was captured
    assert "1" not in held and "2" not in held  # finished in the first seconds
    assert held["6"] == 1                       # pending again after a requeue: its earlier run held one
    assert view.jobs[[j.id for j in view.jobs].index("3")].attained_gpu_seconds > 0
    assert node_capacity(history_jobs(records, view.now))["gpu01"] == 4


def test_a_broken_history_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "h.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not a `sacct --json` document"):
        load_history(bad)
    bad.write_text(json.dumps({"meta": {}}))
    with pytest.raises(UsageError, match="no \"jobs\" list"):
        load_history(bad)
    with pytest.raises(UsageError, match="cannot read"):
        load_history(tmp_path / "missing.json")


def _as_accounting(specs, teacher):
    """Run `teacher` in the simulator and write what it gave each job as accounting records: one
    run per allocation, as Slurm records a requeued job's runs; the counts it decided per slot."""
    sim = Simulator(specs, CONFIG)
    teacher.reset()
    view = sim.reset()
    held: dict[int, tuple] = {}
    runs: dict[int, list] = {}
    decided = []
    while view is not None:
        actions = ARTIFACT_PLACE.place(view, teacher.decide(view))
        counts = teacher_counts(view, actions)
        decided.append((view.now, dict(zip((j.id for j in view.jobs), counts))))
        new = {a.job: a.allocation for a in actions}
        for job in view.jobs:
            i = int(job.id.rsplit("-", 1)[-1]) if not job.id.isdigit() else int(job.id)
            alloc = new.get(job.id, job.allocation)
            if alloc != held.get(i, ()):
                if held.get(i):
                    runs[i][-1][1] = view.now
                if alloc:
                    runs.setdefault(i, []).append([view.now, None, alloc])
                held[i] = alloc
        view = sim.step(actions)
    records = []
    ts = lambda t: datetime.fromtimestamp(EPOCH + t, timezone.utc)  # noqa: E731
    for job in sim.jobs:
        i = job.index
        comment = Record(spec=f"elastic=1:{job.max_gpus or job.spec.num_replicas}").render()
        for start, end, alloc in runs.get(i, []):
            last = end is None
            records.append(Job(job_id=i, name=job.spec.name, user="u", partition="gpu",
                               state="COMPLETED" if last else "REQUEUED",
                               nodes=tuple(n for n, _ in alloc), gpus=sum(g for _, g in alloc), comment=comment,
                               submit_time=ts(job.spec.time), start_time=ts(start),
                               end_time=ts(job.completion if last else end)))
    return records, decided


def test_a_schedulers_decisions_come_back_from_its_accounting():
    records, decided = _as_accounting(small_workload(5, jobs=10), make_policy("drf"))
    replayed = {view.now - EPOCH: dict(zip((j.id for j in view.jobs), counts))
                for view, counts in history_slots(records, CONFIG.interval)}
    compared = 0
    for now, counts in decided:
        if now in replayed:
            got = {str(int(k.rsplit("-", 1)[-1])) if not k.isdigit() else k: v for k, v in counts.items()}
            assert replayed[now] == got, now
            compared += 1
    assert compared >= 0.8 * len(decided)


def test_warmup_on_accounting_imitates_the_site_scheduler():
    steps = []
    for seed in range(4):
        records, _ = _as_accounting(small_workload(seed, jobs=12, gap=60), make_policy("drf"))
        steps.append([s for view, counts in history_slots(records, CONFIG.interval)
                      for s in imitation_steps(view, counts, 32)])
    train, held = [s for chunk in steps[:3] for s in chunk], steps[3]
    assert len(held) > 50
    params = new_params(32, 2, seed=0)
    result = supervised(params, train, held, epochs=10, lr=3e-3, batch_size=64, seed=0)
    assert result.curve[-1]["held_out_agreement"] >= 0.9 > agreement(new_params(32, 2, seed=0), held)


def _sacct_document(records):
    """`records` written as Slurm 24.11's `sacct --json`, each from the recorded fixture's first job."""
    import copy

    template = json.loads((FIXTURES / "24.11" / "sacct.json").read_text())
    jobs = []
    for rec in records:
        raw = copy.deepcopy(template["jobs"][0])
        raw.update(job_id=rec.job_id, nodes=",".join(rec.nodes), name=rec.name,
                   state={"current": [rec.state], "reason": "None"})
        raw["time"].update(submission=int(rec.submit_time.timestamp()), start=int(rec.start_time.timestamp()),
                           end=int(rec.end_time.timestamp()))
        raw["comment"]["job"] = rec.comment
        for kind in ("allocated", "requested"):
            for tres in raw["tres"][kind]:
                if tres["type"] == "gres" and tres["name"] == "gpu":
                    tres["count"] = rec.gpus
        jobs.append(raw)
    return {**template, "jobs": jobs}


def test_policy_train_warms_up_on_a_saved_sacct_history(tmp_path, capsys):
    from slurm_liquid.cli import main
    from slurm_liquid.policy.dl2.io import load_policy

    records, _ = _as_accounting(small_workload(2, jobs=12, gap=60), make_policy("drf"))
    history = tmp_path / "history.json"
    history.write_text(json.dumps(_sacct_document(records)))
    assert len(load_history(history)) == len(records)  # every run, requeued ones included
    out = tmp_path / "site.npz"
    assert main(["policy", "train", "--supervised", "--teacher", "sacct", "--history", str(history),
                 "--warmup-epochs", "2", "--hidden", "16", "--out", str(out)]) == 0
    _, meta = load_policy(out)
    warmup = meta["training"]["warmup"]
    assert warmup["teacher"] == "sacct" and warmup["history"] == "history.json" and warmup["held_out_slots"] > 0
    assert meta["stages"] == ["supervised on sacct"]


def test_sacct_teacher_needs_a_history_and_a_history_too_short_says_so(tmp_path, capsys):
    from slurm_liquid.cli import main

    out = str(tmp_path / "p.npz")
    assert main(["policy", "train", "--supervised", "--teacher", "sacct", "--out", out]) == 2
    assert "--teacher sacct and --history SACCT.json go together" in capsys.readouterr().err
    short = str(FIXTURES / "24.11" / "sacct.json")  # seven jobs over seven seconds: not one 60 s slot
    assert main(["policy", "train", "--supervised", "--teacher", "sacct", "--history", short, "--out", out]) == 2
    assert "found no decisions to learn from" in capsys.readouterr().err
