"""The jobs people submit today: LLM fine-tuning (LoRA, ZeRO-3), MoE, ViT-L, long-context inference,
a model given only by its config.json, and jobs that do not fit (advice, never an absurd request)."""

from __future__ import annotations

import json

import pytest

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.api import estimate
from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.prior import MIB, breakdown, resolve_entry
from slurm_liquid.jobspec import JobSpec

CATALOG = load_catalog()
GB = 1e9 / MIB


def spec(**values) -> JobSpec:
    return JobSpec.from_values({k.replace("_", "-"): str(v) for k, v in values.items()})


def test_7b_lora_matches_the_published_peak():
    # LitGPT resource tables (A100-40GB, bf16-true, r=8 on query/value, longest Alpaca sample 1304
    # tokens): 21.30 GB max allocated at micro-batch 1. A full fine-tune would be ~4x that.
    s = spec(model="llama-2-7b", adapter="lora", rank=8, micro_batch=1, seq_len=1304, precision="bf16-pure",
             attention="flash")
    b = breakdown(resolve_entry(s, CATALOG), s)
    assert abs(b.tensors / MIB - 21.30 * GB) / (21.30 * GB) < 0.10
    assert b.gradients < 0.01 * b.weights                     # only the adapters train
    full = breakdown(resolve_entry(s, CATALOG), spec(model="llama-2-7b", micro_batch=1, seq_len=1304,
                                                     precision="bf16"))
    assert full.total > 3 * b.total
    result = estimate(s, gpu_type="a100-40gb", correction="none")
    assert result.decision.fits and result.decision.gpus == 1


def test_qlora_base_weights_are_four_bit():
    lora, qlora = (breakdown(CATALOG.lookup("llama-2-7b"), spec(model="llama-2-7b", adapter=a, micro_batch=1,
                                                                 precision="bf16-pure")) for a in ("lora", "qlora"))
    assert qlora.weights < 0.35 * lora.weights


def test_70b_zero3_on_8x80gb():
    # a full bf16 fine-tune keeps 16 bytes per parameter under ZeRO-3 (16-bit + fp32 weights, 16-bit
    # gradients, Adam state): 138 GB per GPU on 8 -- it does not fit, and the answer says what does
    s = spec(model="llama-2-70b", micro_batch=1, seq_len=4096, precision="bf16", sharding="zero3",
             checkpointing="true", gpus=8)
    result = estimate(s, gpu_type="a100-80gb", correction="none", risk=None)   # the point estimate's bytes
    d = result.decision
    params = CATALOG.lookup("llama-2-70b").params
    assert d.gpus == 8 and d.sharding == "zero3" and not d.fits
    # + two layers gathered in bf16, capped by DeepSpeed's stage3_max_live_parameters (1e9)
    assert d.per_gpu.model_states == pytest.approx(16 * params / 8 + 2 * min(2 * params / 80, 1e9), rel=1e-6)
    offload = [o for o in result.advice if "offload=optimizer" in o.change]
    assert offload and offload[0].gpus == 8 and offload[0].need_mib <= 81920
    # the same job as a LoRA fine-tune fits the 8 GPUs
    lora = estimate(spec(model="llama-2-70b", micro_batch=1, seq_len=4096, precision="bf16", sharding="zero3",
                         checkpointing="true", gpus=8, adapter="lora"), gpu_type="a100-80gb", correction="none")
    assert lora.decision.fits and lora.decision.gpus == 8


def test_zero1_and_zero2_layouts():
    # DeepSpeed docs: ZeRO-2 partitions "the reduced 16-bit gradients" too; ZeRO-1 keeps them whole
    entry = CATALOG.lookup("gpt2-xl")
    p = entry.params
    b = breakdown(entry, spec(model="gpt2-xl", micro_batch=1, precision="bf16", sharding="zero2"), gpus=8)
    assert b.model_states == pytest.approx(2 * p + 14 * p / 8 + 1e9)      # + one 5e8-element 16-bit bucket
    b = breakdown(entry, spec(model="gpt2-xl", micro_batch=1, precision="bf16", sharding="zero1"), gpus=8)
    assert b.model_states == pytest.approx(4 * p + 12 * p / 8)


def test_mixtral_moe_counts_every_expert_but_routes_top_k():
    entry = CATALOG.lookup("mixtral-8x7b")
    assert entry.experts == 8 and entry.top_k == 2 and 46e9 < entry.params < 47.5e9
    dense = resolve_entry(spec(model="mixtral-8x7b", experts=1, top_k=1, micro_batch=1), CATALOG)
    assert dense.params < 0.2 * entry.params + 6e9
    s = spec(model="mixtral-8x7b", micro_batch=1, seq_len=4096, precision="bf16", sharding="fsdp",
             checkpointing="true")
    result = estimate(s, gpu_type="h100", correction="none")
    assert result.decision.fits and result.decision.gpus >= 8


def test_vit_large_sized_and_fits_one_gpu():
    result = estimate(spec(model="vit-large-patch16-224", batch_size=64, precision="bf16"), gpu_type="a100-40gb",
                      correction="none")
    assert result.entry.name == "vit_l_16" and result.decision.fits and result.decision.gpus == 1
    assert result.to_json()["breakdown_mib"]["activations"] > 0


def test_inference_with_a_32k_context_holds_weights_and_kv_cache():
    s = spec(model="llama-3-8b", mode="inference", micro_batch=4, seq_len=32768, precision="bf16")
    result = estimate(s, gpu_type="h100", correction="none", risk=None)   # the point estimate's bytes
    b = result.decision.per_gpu
    kv = 2 * 32 * 8 * 128 * 32768 * 4 * 2                   # K and V, 32 layers, 8 kv heads x 128, 4 seqs
    assert b.kv_cache == pytest.approx(kv) and b.gradients == 0 and b.optimizer == 0
    assert result.to_json()["kv_cache_mib"] == int(-(-kv // MIB)) and result.decision.fits


def test_a_model_given_only_by_its_config_json(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                  "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                                  "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                                  "max_position_embeddings": 32768, "tie_word_embeddings": False}))
    result = estimate(spec(hf_config=config, micro_batch=1, seq_len=2048, precision="bf16", adapter="lora"),
                      gpu_type="a100-80gb", correction="none")
    assert result.entry.family == "decoder" and result.entry.kv_heads == 8 and result.entry.gated_mlp
    assert result.entry.params == pytest.approx(CATALOG.lookup("mistral-7b").params, rel=0.01)
    assert result.decision.fits and any("config.json" in n for n in result.to_json()["notes"])


@pytest.mark.parametrize("text, says", [("[1, 2]", "JSON object"), ("{", "not valid JSON"),
                                        ('{"hidden_size": "big"}', "hidden_size"),
                                        ("[" * 100000 + "]" * 100000, "JSON")])
def test_bad_config_json_is_one_usage_error(tmp_path, text, says):
    config = tmp_path / "config.json"
    config.write_text(text)
    with pytest.raises(UsageError, match=says):
        estimate(spec(hf_config=config, micro_batch=1), correction="none")


def test_shape_directives_alone_define_a_model():
    s = spec(layers=24, hidden=2048, heads=16, kv_heads=4, intermediate=5632, vocab=32000, family="decoder",
             micro_batch=2)
    entry = resolve_entry(s, CATALOG)
    assert 1.0e9 < entry.params < 1.3e9 and entry.kv_heads == 4


def test_generic_name_resolves_to_the_base_member_with_a_note():
    result = estimate(spec(model="efficientnet", batch_size=32), correction="none")
    assert result.entry.name == "efficientnet_b0"
    assert any("efficientnet_b0" in n for n in result.to_json()["notes"])


def test_eager_attention_costs_more_than_flash():
    eager, flash = (breakdown(CATALOG.lookup("gpt2"), spec(model="gpt2", micro_batch=8, seq_len=1024,
                                                           precision="bf16", attention=a)) for a in ("eager", "flash"))
    assert flash.activations < 0.6 * eager.activations


def test_gpt2_xl_fp32_on_a100_40gb_is_feasible_with_a_named_fix():
    result = estimate(spec(model="gpt2-xl", batch_size=2, seq_len=1024, precision="fp32"), gpu_type="a100-40gb",
                      correction="none")
    out = result.to_json()
    assert out["gpus"] <= 2 and out["nodes"] == 1
    if not out["fits"]:
        assert out["advice"]
    else:
        assert out["micro_batch"] == 1 or out["sharding"] != "none"


def test_llama_70b_that_does_not_fit_names_the_options_not_a_huge_request():
    result = estimate(spec(model="llama-2-70b", batch_size=8, checkpointing="true"), gpu_type="a100-80gb",
                      correction="none")
    out = result.to_json()
    assert not out["fits"] and out["gpus"] <= 8 and out["advice"]
    assert all(o["need_mib"] <= 81920 for o in out["advice"])
    assert "fits with:" in out["explanation"]


def test_micro_batch_fixed_by_the_script_is_not_cut_by_more_gpus():
    s = spec(model="bert-large", micro_batch=32, gpus=1)
    result = estimate(s, gpu_type="v100-16gb", correction="none")
    assert not result.decision.fits and result.decision.gpus == 1
    changes = [o.change for o in result.advice]
    assert changes and changes[0].startswith("micro-batch=") and "grad-accum=" in changes[0]


def test_never_more_gpus_than_the_site_has(tmp_path):
    site = tmp_path / "site.json"
    site.write_text(json.dumps({"defaults": {"nodes": 2, "gpus_per_node": 4}}))
    result = estimate(spec(model="llama-3.1-405b", micro_batch=1, precision="bf16", sharding="fsdp"),
                      gpu_type="a100-40gb", site=str(site), correction="none")
    assert not result.decision.fits and result.decision.gpus <= 8
    assert all(o.gpus <= 8 for o in result.advice)


def test_quantized_full_training_is_a_usage_error():
    with pytest.raises(UsageError, match="adapter"):
        estimate(spec(model="llama-2-7b", batch_size=1, precision="int4"), correction="none")
