"""`slurm-liquid place` end to end, through the real dispatcher, and its input files."""

import json
import re
from pathlib import Path

import pytest

from slurm_liquid.cli import main
from slurm_liquid.errors import UsageError
from slurm_liquid.placement.inputs import requests_from_json, state_from_json

FIXTURES = Path(__file__).parents[1] / "fixtures" / "topology"
TOPO = str(FIXTURES / "small.conf")
STATE = str(FIXTURES / "small_state.json")
REQUESTS = str(FIXTURES / "small_requests.json")


def run_json(capsys, *argv):
    assert main(["place", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_one_job_json(capsys):
    out = run_json(capsys, "--topology", TOPO, "--state", STATE, "--gpus", "12")
    (row,) = out["placements"]
    assert row["nodes"] == {"gpu03": 8, "gpu04": 4} and row["reason"] is None
    assert row["leaf_switches"] == ["leaf2"] and row["cross_switch_pairs"] == 0
    assert out["gpus_free_after"] == 27 - 12


def test_requests_in_order_each_seeing_the_previous(capsys):
    out = run_json(capsys, "--topology", TOPO, "--state", STATE, "--requests", REQUESTS)
    rows = out["placements"]
    assert [r["job"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[0]["nodes"] == {"gpu01": 3}                     # fills the partly used node
    assert rows[1]["nodes"] == {"gpu03": 8, "gpu04": 8}         # 8 per node, one leaf
    assert rows[2]["nodes"] == {"gpu02": 4}
    assert rows[3]["nodes"] is None and "needs 16 GPUs; 4 free" in rows[3]["reason"]


def test_batch_mode_is_reproducible(capsys):
    argv = ["--topology", TOPO, "--state", STATE, "--requests", REQUESTS, "--mode", "batch",
            "--time-budget", "0", "--generations", "4", "--seed", "3"]
    first, second = run_json(capsys, *argv), run_json(capsys, *argv)
    assert first == second and first["placer"] == "ga"
    assert sum(r["nodes"] is not None for r in first["placements"]) == 3


def test_flat_topology_and_readable_table(capsys):
    assert main(["place", "--state", STATE, "--gpus", "16", "--gpus-per-node", "8", "--job", "train"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["JOB", "GPUS", "NODES", "SWITCHES", "NET"]
    assert "train" in text and ":8" in text and "after: 11 GPUs free" in text


@pytest.mark.parametrize("placer", ["slurm", "first-fit", "random"])
def test_baselines_from_the_command_line(capsys, placer):
    out = run_json(capsys, "--topology", TOPO, "--state", STATE, "--gpus", "4", "--placer", placer)
    assert sum(out["placements"][0]["nodes"].values()) == 4


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "0"], "--gpus must be positive"),
    (["--gpus", "3", "--gpus-per-node", "2"], "not a positive multiple"),
    (["--requests", REQUESTS, "--gpus-per-node", "2"], "go with --gpus"),
    (["--gpus", "1", "--alpha", "2"], "--alpha must lie in"),
    (["--gpus", "1", "--mode", "batch", "--time-budget", "0"], "needs --generations"),
    (["--gpus", "1", "--mode", "batch", "--placer", "slurm"], "batch mode is the grouping GA"),
    (["--gpus", "1", "--topology", str(FIXTURES / "nope.conf")], "cannot read topology file"),
    (["--requests", str(FIXTURES / "small.conf")], "not valid JSON"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, message):
    assert main(["place", "--state", STATE, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_state_with_nodes_outside_the_topology(tmp_path, capsys):
    state = tmp_path / "s.json"
    state.write_text(json.dumps({"nodes": {"gpu01": {"gpus": 8}, "cpu9": {"gpus": 0}}}))
    assert main(["place", "--topology", TOPO, "--state", str(state), "--gpus", "1"]) == 2
    assert "does not know node(s) cpu9" in capsys.readouterr().err


def test_state_file_fields():
    state = state_from_json({"nodes": {"g[1-2]": {"gpus": 4}, "g3": {"gpus": 8, "gpus_free": 2, "gpu_type": "a100",
                                                                   "cpus": 64, "mem_free_mib": 1000}}})
    assert state.nodes["g2"].gpus_free == 4 and state.nodes["g3"].gpu_type == "a100" and state.gpus_free == 10


@pytest.mark.parametrize("data, message", [
    ([], "expected"),
    ({"nodes": {}}, "no nodes"),
    ({"nodes": {"g1": {"gpus_free": 1}}}, "nodes.g1.gpus is missing"),
    ({"nodes": {"g1": {"gpus": 8, "gpus_free": 9}}}, "gpus_free=9 exceeds gpus=8"),
    ({"nodes": {"g1": {"gpus": -1}}}, "nodes.g1.gpus must be an integer in 0..1000000"),
    ({"nodes": {"g1": {"gpus": True}}}, "nodes.g1.gpus must be an integer"),
    ({"nodes": {"g1": {"gpus": 8, "gpu": 1}}}, "unknown field(s) gpu"),
    ({"nodes": {"g[1-": {"gpus": 8}}}, "bad node name expression"),
    ({"nodes": {"g[1-2]": {"gpus": 8}, "g2": {"gpus": 8}}}, "node g2 is given twice"),
    ({"nodes": {"g1": 8}}, "must be an object"),
])
def test_bad_state_files_name_the_field(data, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        state_from_json(data)


def test_request_file_fields():
    (a, b) = requests_from_json([{"job": "a", "gpus": 16, "gpus_per_node": 8, "gpu_type": "h100"}, {"gpus": 1}])
    assert (a.gpus, a.gpus_per_node, a.gpu_type) == (16, 8, "h100") and b.job == "1"


@pytest.mark.parametrize("data, message", [
    ({"job": "a"}, "expected a list"),
    ([{"job": "a"}], "requests[0].gpus must be an integer in 1..1000000"),
    ([{"job": "a", "gpus": 0}], "requests[0].gpus must be"),
    ([{"gpus": 2}, {"gpus": 3, "gpus_per_node": 2}], "requests[1]: gpus=3 is not a multiple"),
    ([{"gpus": 2, "nodes": 1}], "unknown field(s) nodes"),
    (["a"], "requests[0] must be an object"),
])
def test_bad_request_files_name_the_row(data, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        requests_from_json(data)


@pytest.mark.parametrize("which, content, message", [
    ("state", b'{"nodes": {"gpu01": {"gpus": 8, "gpu_type": "h\xff100"}}}', "not UTF-8 text (byte 46 is 0xff)"),
    ("requests", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("state", b'{"nodes": {"gpu01": {"gpus": ' + b"9" * 5000 + b"}}}", "JSON that cannot be read"),
    ("state", b'{"nodes": {"gpu01": {"gpus": ' + b"9" * 400 + b"}}}", "must be an integer in 0..1000000"),
    ("state", b'{"nodes": {"gpu[1-99999],cpu[1-99999]": {"gpus": 8}}}', "more than 100000 names"),
    ("requests", b'[{"job": "a", "gpus": NaN}]', "requests[0].gpus must be an integer"),
    ("requests", b'[{"job": ["a"], "gpus": 1}]', "requests[0].job must be a string"),
    ("topology", b"SwitchName=s1 Nodes=gpu\xff01\n", "not UTF-8 text"),
    ("topology", b"SwitchName=s1 Nodes=gpu01 LinkSpeed=nan\n", "LinkSpeed='nan' is not a number"),
])
def test_hostile_input_files_are_one_clear_line_and_exit_2(tmp_path, capsys, which, content, message):
    """Non-UTF-8 and deeply nested input crashed `slurm-liquid place` with a traceback."""
    files = {"state": STATE, "requests": REQUESTS, "topology": TOPO}
    files[which] = str(tmp_path / which)
    Path(files[which]).write_bytes(content)
    code = main(["place", "--topology", files["topology"], "--state", files["state"], "--requests", files["requests"]])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1 and files[which] in err


def test_gpus_beyond_any_cluster_are_refused(capsys):
    assert main(["place", "--state", STATE, "--gpus", "9" * 400]) == 2
    assert "--gpus must be positive and at most 1000000" in capsys.readouterr().err
