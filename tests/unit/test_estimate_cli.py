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
