"""Files users and admins hand us (site, correction, placement state and requests, topology):
whatever they hold, the answer is the parsed value or one UsageError naming the file.

The hypothesis tests drive the same hostile inputs as benchmarks/robustness/fuzz_parsers.py
(st.randoms() feeds its cases, so a failure shrinks and replays), plus inputs hypothesis builds
from scratch.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate import correction
from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.gpus import load_gpu_table
from slurm_liquid.files import parse_json
from slurm_liquid.placement.inputs import requests_from_json, state_from_json
from slurm_liquid.topology import Topology
from tests.unit import hostile

FUZZ = Path(__file__).resolve().parents[2] / "benchmarks" / "robustness" / "fuzz_parsers.py"


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_parsers", FUZZ)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = dict(_fuzz_module().CASES)
FILE_CASES = ["site-file", "correction-file", "placement-input", "topology-text"]


def _write(tmp_path: Path, content: bytes | str, name: str = "f.json") -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


# ------------------------------------------------------------------ the findings, one by one

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("content, message", [
    ("null", "must be an object with models, gpus and/or defaults, not null"),
    ("[]", "not list"), (DEEP, "nested too deeply"), (b'{"models": [{"name": "n\xff"}]}', "not UTF-8"),
    ('{"models": 5}', "models must be a list"),
    ('{"models": [{"name": "x", "family": "cnn", "params": 3, "aliases": [1]}]}', "aliases"),
    ('{"models": [{"name": "x", "family": "cnn", "params": 3, "image_size": 0}]}', "image_size must be positive"),
    ('{"models": [{"name": "x", "family": "cnn", "params": NaN}]}', "params"),
    ('{"models": [{"name": "x", "family": "cnn", "params": ' + "9" * 400 + "}]}", "params"),
    ('{"models": [{"name": ["x"], "family": "cnn", "params": 3}]}', "name must be a str"),
])
def test_bad_site_files_are_one_usage_error_naming_the_file(tmp_path, content, message):
    """null, [] and deeply nested site files crashed the estimator CLI (and would crash the daemon)."""
    path = _write(tmp_path, content)
    with pytest.raises(UsageError, match=message) as err:
        load_catalog(path)
    assert path in str(err.value)


@pytest.mark.parametrize("content, message", [
    ('{"defaults": {"gpus_per_node": "x"}}', "defaults.gpus_per_node"),
    ('{"defaults": {"nodes": ' + "9" * 400 + "}}", "defaults.nodes"),
    ('{"defaults": {"headroom": 2}}', "defaults.headroom"),
    ('{"gpus": {"x": {"mem_mib": ' + "9" * 400 + "}}}", "gpus.x"),
    ('{"gpus": {"x": {"mem_mib": 1024, "aliases": "x"}}}', "aliases"),
    ('{"gpus": 5}', "gpus must be a table"),
])
def test_bad_gpu_sections_of_a_site_file_are_usage_errors(tmp_path, content, message):
    with pytest.raises(UsageError, match=message):
        load_gpu_table(_write(tmp_path, content))


def _correction(**changes) -> str:
    doc = hostile.correction_doc()
    doc.update(changes)
    return json.dumps(doc)


@pytest.mark.parametrize("content, message", [
    ("null", "format is not"), ("[]", "format is not"), (DEEP, "nested too deeply"), (b"\xff\xfe", "not UTF-8"),
    (_correction(base=float("nan")), "base must be a finite number"),
    (_correction(trees=5), "trees must be a list"), (_correction(trees=[5]), "each tree must be an object"),
    (_correction(meta=[]), "meta must be an object"), (_correction(features="log10_params"), "retrain"),
    (_correction(sharing={"m": {"jobs": 10 ** 400, "util": 1, "peak_mib": 1}}), "jobs must be a number"),
])
def test_bad_correction_files_are_one_usage_error_naming_the_file(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(UsageError, match=message) as err:
        correction.load(path)
    assert path in str(err.value)


@pytest.mark.parametrize("flag, content", [("--site", "null"), ("--site", "[]"), ("--site", DEEP),
                                           ("--correction", "null"), ("--correction", "[]"), ("--correction", DEEP),
                                           ("--site", b"\xff")])
def test_the_estimator_command_says_what_is_wrong_with_a_file(tmp_path, capsys, flag, content):
    from slurm_liquid.cli import main

    path = _write(tmp_path, content)
    assert main(["estimate", "--model", "resnet50", "--batch-size", "32", flag, path]) == 2
    err = capsys.readouterr().err
    assert path in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_tree_of_floats_where_indexes_belong_is_refused(tmp_path):
    doc = hostile.correction_doc()
    doc["trees"][0]["left"] = [1.0, -1, -1]  # loaded before, then failed as a list index at estimate time
    with pytest.raises(UsageError, match="left must hold whole numbers"):
        correction.load(_write(tmp_path, json.dumps(doc)))
    doc["trees"][0]["left"] = [1, -1, -1]
    doc["trees"][0]["value"] = [0.0, float("inf"), 0.1]
    with pytest.raises(UsageError, match="value must be a finite number"):
        correction.load(_write(tmp_path, json.dumps(doc)))


def test_the_real_inputs_are_accepted(tmp_path):
    """The generators start from valid files: otherwise the fuzzing would only test the first check."""
    site = _write(tmp_path, json.dumps(hostile.site_doc()), "site.json")
    assert load_catalog(site).lookup("ournet-v1").name == "our-net" and load_gpu_table(site).default == "mi100"
    fitted = correction.load(_write(tmp_path, json.dumps(hostile.correction_doc()), "c.json"))
    assert len(fitted.trees) == 2 and fitted.sharing["resnet50"].jobs == 12
    assert len(state_from_json(hostile.placement_state_doc()).nodes) == 4
    assert len(requests_from_json(hostile.placement_requests_doc())) == 4
    for text in (hostile.topology_text(random.Random(seed)) for seed in range(8)):
        assert Topology.from_scontrol(text).nodes


# ------------------------------------------------------------------ generated

@pytest.mark.parametrize("case", FILE_CASES)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_hostile_files_give_an_answer_or_a_usage_error(case, rng):
    assert CASES[case](rng) in {"ok", "error"}


json_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=10 ** 300, max_value=10 ** 400)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
node_fields = st.fixed_dictionaries({}, optional={
    "gpus": json_values, "gpus_free": json_values, "gpu_type": json_values, "cpus": json_values,
    "cpus_free": json_values, "mem_mib": json_values, "mem_free_mib": json_values})


@given(st.dictionaries(st.text(max_size=12), node_fields | json_values, max_size=4) | json_values)
def test_any_state_json_is_a_state_or_a_usage_error(nodes):
    try:
        state = state_from_json({"nodes": nodes})
    except UsageError:
        return
    assert all(0 <= n.gpus_free <= n.gpus for n in state.nodes.values())


@given(st.lists(st.fixed_dictionaries({}, optional={"job": json_values, "gpus": json_values,
                                                    "gpus_per_node": json_values, "gpu_type": json_values})
                | json_values, max_size=4) | json_values)
def test_any_requests_json_is_requests_or_a_usage_error(data):
    try:
        requests = requests_from_json(data)
    except UsageError:
        return
    assert all(r.gpus >= 1 and isinstance(r.job, str) for r in requests)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_json_or_a_usage_error(data):
    try:
        parse_json(data.decode("utf-8", "surrogateescape"), "file x")
    except UsageError as exc:
        assert str(exc).startswith("file x: ")


@given(st.text(alphabet=st.sampled_from("SwitchNamLevlnkpd=[]-,0123456789 \n#\\s"), max_size=200))
def test_any_topology_text_is_a_topology_or_a_usage_error(text):
    for read in (Topology.from_scontrol, Topology.from_topology_conf):
        try:
            topology = read(text)
        except UsageError:
            continue
        assert topology.nodes
