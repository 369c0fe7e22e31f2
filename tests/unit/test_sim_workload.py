"""Workload loading and bad input: one clear message naming the row, exit code 2, no traceback."""

import json

import pytest

from slurm_liquid.cli import main
from slurm_liquid.errors import UsageError
from slurm_liquid.sim.workload import (BUNDLED_WORKLOADS, TUNED, load_philly, load_pollux_csv, load_workload,
                                      sample_philly)

HEADER = "name,time,application,num_replicas,batch_size\n"


def write(tmp_path, text, name="w.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bundled_workloads_load_sorted() -> None:
    wls = load_workload(BUNDLED_WORKLOADS)
    assert list(wls) == [f"workload-{i}" for i in range(1, 9)]
    for specs in wls.values():
        assert len(specs) == 160
        assert [s.time for s in specs] == sorted(s.time for s in specs)


@pytest.mark.parametrize("body,match", [
    ("a-0,10,resnet,1,128\n", r"w.csv:2: unknown application 'resnet'"),
    ("a-0,-5,cifar10,1,128\n", r"w.csv:2: time=-5 must be a non-negative"),
    ("a-0,ten,cifar10,1,128\n", r"w.csv:2: time='ten' is not a number"),
    ("a-0,10,cifar10,1,128\nb-1,20,cifar10,1.5,128\n", r"w.csv:3: num_replicas='1.5' is not a whole number"),
    ("a-0,10,cifar10,0,128\n", r"w.csv:2: num_replicas=0 must be positive"),
    ("a-0,10,cifar10,8,128\n", r"w.csv:2: batch_size=128 is too small for 8 GPUs"),
    ("a-0,10,cifar10,1,999999\n", r"w.csv:2: batch_size=999999 must lie in"),
    ("", r"the file is empty"),
])
def test_bad_rows_name_the_row(tmp_path, body, match) -> None:
    path = write(tmp_path, (HEADER if body else "") + body)
    with pytest.raises(UsageError, match=match):
        load_pollux_csv(path)


def test_header_only_and_missing_columns(tmp_path) -> None:
    with pytest.raises(UsageError, match="no jobs"):
        load_pollux_csv(write(tmp_path, HEADER))
    with pytest.raises(UsageError, match="missing column"):
        load_pollux_csv(write(tmp_path, "name,time\na,1\n"))


def test_cli_reports_oversized_job_in_one_line(tmp_path, capsys) -> None:
    path = write(tmp_path, HEADER + "big-0,10,imagenet,48,6400\n")
    rc = main(["simulate", "--workload", str(path), "--nodes", "4", "--policy", "fifo"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and "w.csv:2" in err and "asks for 48 GPUs" in err and "has 16" in err


@pytest.mark.parametrize("args,match", [
    (["--workload", "/nonexistent.csv"], "does not exist"),
    (["--workload", "pollux", "--policy", "lottery"], "unknown policy 'lottery'"),
    (["--workload", "pollux", "--gpus-per-node", "8"], "up to 4 GPUs per node"),
])
def test_cli_usage_errors(args, match, capsys) -> None:
    assert main(["simulate", *args]) == 2
    assert match in capsys.readouterr().err


def test_cli_json_one_object_per_policy(tmp_path, capsys) -> None:
    path = write(tmp_path, HEADER + "c-0,53,cifar10,6,2048\nn-1,70,ncf,1,32768\n")
    assert main(["simulate", "--workload", str(path), "--policy", "tiresias,drf", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["policy"] for o in out] == ["tiresias", "drf"]
    for o in out:
        assert {"policy", "workload", "avg_jct_s", "makespan_s", "gpu_utilisation"} <= set(o)
        assert o["workload"] == "w" and o["jobs"] == 2
    assert out[0]["avg_jct_s"] == (947 + (120 - 70 + 30 + 47)) / 2


def test_cli_batch_scaling_says_so_and_runs_faster(tmp_path, capsys) -> None:
    path = write(tmp_path, HEADER + "c-0,53,cifar10,6,2048\nb-1,70,bert,6,384\n")
    jct = {}
    for flags in ([], ["--batch-scaling"]):
        assert main(["simulate", "--workload", str(path), "--policy", "drf", *flags]) == 0
        header, _, row = capsys.readouterr().out.splitlines()[:3]
        assert ("jobs scale their batch" in header) == bool(flags)
        jct[bool(flags)] = float(row.split()[1])
    assert jct[True] < jct[False]


def test_cli_directory_gives_per_workload_and_mean(tmp_path, capsys) -> None:
    write(tmp_path, HEADER + "c-0,53,cifar10,6,2048\n", "a.csv")
    write(tmp_path, HEADER + "c-0,0,cifar10,6,2048\n", "b.csv")
    assert main(["simulate", "--workload", str(tmp_path), "--policy", "tiresias", "--json"]) == 0
    (obj,) = json.loads(capsys.readouterr().out)
    assert set(obj["workloads"]) == {"a", "b"}
    assert obj["avg_jct_s"] == (947 + 1000) / 2


def test_philly_workload_is_seeded_and_fits_the_traces() -> None:
    a = load_philly(jobs=300, seed=3, time_scale=0.5)
    assert a == load_philly(jobs=300, seed=3, time_scale=0.5)
    assert a != load_philly(jobs=300, seed=4, time_scale=0.5)
    assert len(a) == 300 and a[0].time == 0
    assert all(1 <= s.num_replicas <= 64 for s in a)
    assert [s.time for s in a] == sorted(s.time for s in a)


def test_philly_sample_is_drawn_like_the_artifacts_workloads() -> None:
    a = sample_philly(jobs=160, seed=7)
    assert a == sample_philly(jobs=160, seed=7) and a != sample_philly(jobs=160, seed=8)
    assert len(a) == 160 and all(0 <= s.time < 8 * 3600 for s in a)
    assert all((s.num_replicas, s.batch_size) in TUNED[s.application] for s in a)
    apps = {s.application for s in a}
    assert {"ncf", "cifar10", "bert", "deepspeech2"} <= apps  # the GPU-time bands' mix, as in the 8 workloads
    quarter = sample_philly(jobs=40, seed=7, time_scale=0.25)
    assert all(s.time < 2 * 3600 for s in quarter)
    with pytest.raises(UsageError, match="hours=30"):
        sample_philly(jobs=10, hours=30)


def test_duplicate_job_names_are_named(tmp_path, capsys) -> None:
    path = write(tmp_path, HEADER + "a,10,ncf,1,32768\na,20,ncf,1,32768\n")
    assert main(["simulate", "--workload", str(path), "--policy", "fifo"]) == 2
    assert "w.csv:3: job name 'a' is used twice" in capsys.readouterr().err
