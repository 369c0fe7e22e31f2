"""Model catalogue and GPU table: forgiving names, close matches, site files."""

from __future__ import annotations

import json

import pytest

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.gpus import load_gpu_table


@pytest.mark.parametrize("name, expected", [
    ("ResNet-50", "resnet50"), ("resnet_50", "resnet50"), ("RN50", "resnet50"),
    ("MobileNetV2", "mobilenet_v2"), ("mobilenet-v2", "mobilenet_v2"),
    ("google-bert/bert-large-uncased", "bert-large"), ("BERT_base_cased", "bert-base"),
    ("meta-llama/Llama-2-7b-hf", "llama-2-7b"), ("Mistral-7B-v0.1", "mistral-7b"),
    ("GPT-2", "gpt2"), ("EfficientNet-B3", "efficientnet_b3"), ("NeuMF", "ncf"), ("YOLOv3", "yolov3"),
    ("t5_base", "t5-base"), ("xlnet-large-cased", "xlnet-large"), ("deepspeech", "deepspeech2"),
])
def test_names_match_forgivingly(name, expected):
    assert load_catalog().lookup(name).name == expected


def test_unknown_name_lists_close_matches():
    with pytest.raises(UsageError, match="close matches: .*resnet50"):
        load_catalog().lookup("resnet55")


def test_every_entry_is_usable():
    catalog = load_catalog()
    for name in catalog.names():
        entry = catalog.entries[name]
        assert entry.params > 0
        if entry.is_transformer:
            assert entry.layers and entry.hidden and (entry.vocab or entry.family == "vit"), name
        else:
            assert entry.act_bytes > 0, name


def test_site_file_adds_models_and_gpus(tmp_path):
    site = tmp_path / "site.json"
    site.write_text(json.dumps({
        "models": [{"name": "our-net", "family": "cnn", "params": 5e6, "act_bytes": 3e7, "aliases": ["ournet-v1"]}],
        "gpus": {"mi100-32gb": {"model": "mi100", "mem_mib": 32752, "aliases": ["mi100"]}},
        "defaults": {"gpu_type": "mi100", "gpus_per_node": 4}}))
    assert load_catalog(str(site)).lookup("OurNet_V1").params == 5_000_000
    table = load_gpu_table(str(site))
    assert table.lookup("AMD Instinct MI100").mem_mib == 32752
    assert table.default == "mi100" and table.gpus_per_node == 4


def test_site_cuda_context_moves_every_estimate(tmp_path):
    # older CUDA without lazy module loading: the published BERT-large runs reported 1343 MB
    from slurm_liquid.estimate.api import estimate
    from slurm_liquid.jobspec import JobSpec

    site = tmp_path / "site.json"
    site.write_text(json.dumps({"defaults": {"context_mib": 1343}}))
    job = JobSpec.from_values({"model": "bert-large", "batch-size": "4", "seq-len": "512"})
    plain, eager = (estimate(job, "v100-16gb", site=s, correction="none") for s in (None, str(site)))
    assert load_gpu_table().context_mib == 800 and load_gpu_table(str(site)).context_mib == 1343
    assert eager.prior.total - plain.prior.total == pytest.approx(543 * 2 ** 20)
    bad = tmp_path / "bad.json"    # another path: tables are cached per site file
    bad.write_text(json.dumps({"defaults": {"context_mib": "lots"}}))
    with pytest.raises(UsageError, match="defaults.context_mib"):
        load_gpu_table(str(bad))


@pytest.mark.parametrize("content, field", [
    ("{not json", "not valid"), (json.dumps({"models": [{"name": "x", "family": "cnn"}]}), "params"),
    (json.dumps({"models": [{"name": "x", "family": "gan", "params": 3}]}), "family"),
    (json.dumps({"models": [{"name": "x", "family": "cnn", "params": 3, "colour": 1}]}), "colour"),
    (json.dumps({"models": [{"name": "x", "family": "cnn", "params": 3, "act_bytes": 10,
                             "inplace_copy_bytes": 11}]}), "inplace_copy_bytes"),
])
def test_bad_site_file_names_the_problem(tmp_path, content, field):
    site = tmp_path / "site.json"
    site.write_text(content)
    with pytest.raises(UsageError, match=field):
        load_catalog(str(site))


def test_missing_site_file():
    with pytest.raises(UsageError, match="cannot read"):
        load_catalog("/nonexistent/site.json")


@pytest.mark.parametrize("name, expected", [
    ("h100", "h100-80gb"), ("a100", "a100-40gb"), ("a100-40gb", "a100-40gb"), ("a100_40g", "a100-40gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("A100 80GB PCIe", "a100-80gb"), ("Tesla V100-SXM2-16GB", "v100-16gb"), ("v100-32gb", "v100-32gb"),
    ("NVIDIA H100 80GB HBM3", "h100-80gb"), ("NVIDIA H100 NVL", "h100-94gb"), ("h200", "h200-141gb"),
    ("NVIDIA L40S", "l40s-48gb"), ("Tesla T4", "t4-16gb"), ("NVIDIA GeForce RTX 3090", "rtx3090-24gb"),
    ("NVIDIA RTX A6000", "rtxa6000-48gb"),
])
def test_gpu_names_match_forgivingly(name, expected):
    assert load_gpu_table().lookup(name).name == expected


def test_unknown_gpu_type():
    with pytest.raises(UsageError, match="gpu-type.*close matches"):
        load_gpu_table().lookup("a1000")
