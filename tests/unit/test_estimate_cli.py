"""`slurm-liquid estimate` end to end through the real dispatcher (in-process)."""

from __future__ import annotations

import csv
import json

import pytest

from slurm_liquid.cli import main


def run(capsys, *argv):
    code = main(["estimate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_promised_fields(capsys):
    code, out, _ = run(capsys, "--model", "resnet50", "--batch-size", "64", "--json", "--correction", "none")
    data = json.loads(out)
    assert code == 0
    for key in ("gpu_mem_mib", "gpus", "gres", "explanation", "cpus_per_gpu", "host_mem_mib_per_gpu"):
        assert key in data
    assert data["gpu_mem_mib"] == sum(data["breakdown_mib"].values()) or \
        abs(data["gpu_mem_mib"] - sum(data["breakdown_mib"].values())) <= 7


def test_text_output_explains(capsys):
    code, out, _ = run(capsys, "--model", "bert-large", "--batch-size", "4", "--gpu-type",
                       "Tesla V100-SXM2-16GB", "--correction", "none")
    assert code == 0 and "activations" in out and "--gres=gpu:v100:1" in out


def test_script_and_comment(tmp_path, capsys):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:8\n#LIQUID model=gpt2 precision=bf16\n"
                      "torchrun train.py --batch-size 32 --seq-len 1024\n")
    code, out, _ = run(capsys, "--script", str(script), "--comment", "liquid: checkpointing",
                       "--json", "--correction", "none")
    data = json.loads(out)
    assert code == 0 and data["model"] == "gpt2" and data["asked_gpus"] == 8
    code, _, err = run(capsys, "--script", str(script), "--comment", "liquid: precision=fp32")
    assert code == 2 and "conflicting directives for precision" in err


@pytest.mark.parametrize("argv, field", [
    (["--model", "resnet50", "--batch-size", "-1"], "batch-size"),
    (["--model", "resnet50", "--batch-size", "99999999"], "batch-size"),
    (["--model", "transformer-xyz", "--batch-size", "8"], "model"),
    (["--model", "resnet50", "--batch-size", "8", "--gpu-type", "quantum"], "gpu-type"),
    (["--script", "/nonexistent/job.sh", "--batch-size", "8"], "script"),
    (["--model", "resnet50", "--batch-size", "8", "--correction", "/nonexistent.json"], "correction"),
    (["--model", "resnet50", "--batch-size", "8", "--min-gpus", "4", "--max-gpus", "2"], "min-gpus"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, field):
    code, out, err = run(capsys, *argv)
    assert code == 2 and field in err and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_inferred_model_names_its_line(tmp_path, capsys):
    script = tmp_path / "job.sh"
    script.write_text("#LIQUID batch-size=8\npython train.py --model-name-or-path ./ckpt/run1/\n")
    code, _, err = run(capsys, "--script", str(script))
    assert code == 2 and "'run1'" in err and "line 2 (training command)" in err


def test_train_then_estimate_with_correction(tmp_path, capsys):
    history = tmp_path / "history.csv"
    with history.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["model", "batch-size", "precision", "measure", "measured_mib"])
        writer.writeheader()
        for model, base in (("resnet18", 1.0), ("resnet50", 1.1), ("vgg16", 1.2), ("bert-base", 1.3)):
            for batch in (8, 16, 32, 64):
                for precision in ("fp32", "amp"):
                    writer.writerow({"model": model, "batch-size": batch, "precision": precision,
                                     "measure": "tensor", "measured_mib": 500 * base + 40 * batch})
    out_file = tmp_path / "correction.json"
    code, _, err = run(capsys, "train", "--history", str(history), "--out", str(out_file), "--method", "gbr")
    assert code == 0 and out_file.exists(), err
    code, out, _ = run(capsys, "--model", "resnet50", "--batch-size", "32", "--json",
                       "--correction", str(out_file))
    data = json.loads(out)
    assert code == 0 and data["correction"] == "gbr" and data["correction_factor"] != 1.0


def test_train_rejects_bad_history(tmp_path, capsys):
    history = tmp_path / "history.csv"
    history.write_text("model,batch-size,measured_mib\nresnet50,8,abc\n")
    code, _, err = run(capsys, "train", "--history", str(history))
    assert code == 2 and "measured_mib" in err


def test_module_entry_point_without_dispatcher(capsys):
    from slurm_liquid.estimate.__main__ import main as direct

    assert direct(["--model", "resnet18", "--batch-size", "8", "--json", "--correction", "none"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "resnet18"
    assert direct(["--model", "resnet18", "--batch-size", "0"]) == 2
    assert "batch-size" in capsys.readouterr().err


# --- `estimate train --from-sacct`: the closed loop through the real dispatcher ---------------

class FakeSlurm:
    def __init__(self, jobs):
        self.jobs, self.since = jobs, []

    def accounting(self, job_ids=None, since=None, until=None):
        self.since.append(since)
        return list(self.jobs)


@pytest.fixture
def sacct(monkeypatch):
    """Point the Slurm client at a list of finished jobs; returns the fake (set .jobs)."""
    import slurm_liquid.slurm

    fake = FakeSlurm([])
    monkeypatch.setattr(slurm_liquid.slurm, "connect", lambda *a, **k: fake)
    return fake


def test_train_from_sacct_installs_a_better_model_then_keeps_it(tmp_path, capsys, sacct):
    from datetime import datetime

    from tests.unit.test_estimate_learn import biased_jobs, job, noise_jobs, spec_of

    sacct.jobs = biased_jobs() + [job(1, spec_of(model="resnet50", batch_size=8), None)]
    path = tmp_path / "correction.json"
    code, out, err = run(capsys, "train", "--from-sacct", "--since", "2026-01-05", "--install", str(path))
    assert code == 0, err
    assert sacct.since == [datetime(2026, 1, 5)]
    assert "257 jobs from sacct, 256 usable: trained on 192, scored on 64 held out" in out
    assert "prior alone" in out and "new model" in out and "current model" not in out
    assert "skipped: no usage 1" in out and f"installed the new model at {path}:" in out
    installed = path.read_bytes()
    assert json.loads(installed)["meta"]["source"] == "sacct since 2026-01-05"
    # a broken agent's readings: the model trained on them is worse, the installed one stays
    sacct.jobs = noise_jobs()
    code, out, err = run(capsys, "train", "--from-sacct", "--install", str(path))
    assert code == 0, err
    assert "current model" in out and "kept the current model: the new model's mean error" in out
    assert path.read_bytes() == installed and not (tmp_path / "correction.json.prev").exists()


def test_train_from_sacct_json_report(tmp_path, capsys, sacct):
    from tests.unit.test_estimate_learn import biased_jobs

    sacct.jobs = biased_jobs()
    path = tmp_path / "correction.json"
    path.write_text("{\"format\": \"something else\"}")       # e.g. an unreadable older model
    code, out, err = run(capsys, "train", "--from-sacct", "--since", "30d", "--install", str(path), "--json")
    report = json.loads(out)
    assert code == 0, err
    assert report["heldout_rows"] == 64 and report["rows"] == 256 and report["jobs"] == 256
    assert report["current"] is None and "unreadable" in report["note"]
    assert report["new"]["mre"] < report["prior"]["mre"] and report["new"]["under"] <= 0.10
    assert report["better"] and report["installed"] and report["backup"] == f"{path}.prev"
    assert (tmp_path / "correction.json.prev").read_text() == "{\"format\": \"something else\"}"
    assert report["sharing"]["resnet50"]["jobs"] == 16
    # `--json` before `train` works as well, and 30d is thirty days back
    code, out, _ = run(capsys, "--json", "train", "--from-sacct", "--since", "30d")
    assert code == 0 and "installed" in json.loads(out)
    from datetime import datetime, timedelta

    assert abs(sacct.since[-1] - (datetime.now() - timedelta(days=30))) < timedelta(minutes=5)


@pytest.mark.parametrize("argv, says", [
    (["train"], "--history FILE (measured rows) or --from-sacct"),
    (["train", "--from-sacct", "--since", "last-week"], "since"),
    (["train", "--from-sacct", "--holdout", "1.5"], "holdout"),
    (["train", "--from-sacct"], "need at least 5"),              # no usable jobs
])
def test_train_bad_input_is_one_line_exit_2(capsys, sacct, argv, says):
    code, _, err = run(capsys, *argv)
    assert code == 2 and says in err and err.count("\n") == 1


def test_the_estimate_path_imports_no_learner(tmp_path):
    import subprocess
    import sys

    from tests.unit.test_estimate_learn import flat_model
    from slurm_liquid.estimate.decide import ModelUsage

    path = tmp_path / "correction.json"
    flat_model({"resnet18": ModelUsage(5, 85.0, 1500.0)}).save(path)
    code = ("import sys; from slurm_liquid.cli import main; "
            "assert main(['estimate', '--model', 'resnet18', '--batch-size', '32', '--json', "
            f"'--correction', {str(path)!r}]) == 0; "
            "bad = [m for m in ('numpy', 'sklearn', 'slurm_liquid.estimate.learn') if m in sys.modules]; "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gres"].startswith("gpu:")   # the sharing table was read
