"""Exact byte terms of what transformers' code paths save for backward: the eager attention
probabilities (with and without dropout, cast before or after the dropout) and GPT-2's `gelu_new`
chain of ops, on a small shape where every term can be written out by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slurm_liquid.estimate.catalog import ModelEntry, load_catalog
from slurm_liquid.estimate.prior import breakdown, resolve_entry
from slurm_liquid.jobspec import JobSpec

CATALOG = load_catalog()
LAYERS, HIDDEN, HEADS, FFN, SEQ, BATCH = 2, 64, 4, 256, 32, 3


def spec(**values) -> JobSpec:
    return JobSpec.from_values({k.replace("_", "-"): str(v) for k, v in values.items()})


def small(family: str = "decoder", **fields) -> ModelEntry:
    return ModelEntry("tiny", family, 100_000, layers=LAYERS, hidden=HIDDEN, heads=HEADS, ffn=FFN,
                      vocab=0, lm_head=False, seq_len=SEQ, **fields)


def activations(entry: ModelEntry, **values) -> float:
    return breakdown(entry, spec(micro_batch=BATCH, seq_len=SEQ, **values)).activations


def probs_bytes(entry: ModelEntry, precision: str) -> float:
    """Bytes per attention-score element that eager attention saves beyond SDPA's log-sum-exp."""
    eager = activations(entry, precision=precision, attention="eager")
    sdpa = activations(entry, precision=precision, attention="sdpa")
    per_token_layer = (eager - sdpa) / (BATCH * LAYERS * SEQ)
    return (per_token_layer + HEADS * 4.0) / (HEADS * SEQ)


@pytest.mark.parametrize("family, dropout, expected", [
    # fp32 softmax output (4) + the 16-bit copy the probabilities x values matmul saves (2)
    ("decoder", False, 6.0), ("encoder", False, 6.0),
    # GPT-2/Llama: cast to 16 bits, then dropout: fp32 softmax (4) + mask (1) + 16-bit output (2)
    ("decoder", True, 7.0),
    # BERT: dropout on the fp32 probabilities (4 + 1 + 4), then the matmul's 16-bit copy (2)
    ("encoder", True, 11.0),
])
def test_eager_probabilities_under_autocast(family, dropout, expected):
    assert probs_bytes(small(family, dropout=dropout), "bf16") == pytest.approx(expected)


def test_seq2seq_probabilities_follow_bert_layout():
    # T5 and BART (transformers 5.x) drop out the fp32 softmax output like BERT
    assert small("seq2seq", dropout=True).downcasts_probs is False
    assert small("decoder").downcasts_probs and small("vit").downcasts_probs
    assert not small("encoder").downcasts_probs


def test_probability_layout_can_be_set_per_model():
    bert_like = small("decoder", dropout=True, probs_downcast=False)
    gpt_like = small("encoder", dropout=True, probs_downcast=True)
    assert probs_bytes(bert_like, "bf16") == pytest.approx(11.0)
    assert probs_bytes(gpt_like, "bf16") == pytest.approx(7.0)


@pytest.mark.parametrize("family", ["decoder", "encoder"])
def test_fp32_eager_layout_does_not_depend_on_the_cast(family):
    # without autocast there is no cast: softmax output (4) + mask (1) + dropout output (4)
    assert probs_bytes(small(family, dropout=True), "fp32") == pytest.approx(9.0)
    assert probs_bytes(small(family, dropout=False), "fp32") == pytest.approx(4.0)


@pytest.mark.parametrize("precision, extra", [
    # autocast runs pow in fp32: pow's fp32 input, tanh's fp32 output and (1 + tanh) in fp32 are
    # saved (12 bytes) while 0.5 * x (16-bit) replaces the fused gelu's saved 16-bit input
    ("bf16", 12.0), ("fp16", 12.0),
    # one width throughout: three tensors more than the fused gelu (tanh, 1 + tanh, 0.5 * x)
    ("fp32", 12.0), ("bf16-pure", 6.0),
])
def test_gelu_new_chain_saves_three_more_tensors(precision, extra):
    fused, chain = small(), small(activation="gelu_new")
    more = activations(chain, precision=precision) - activations(fused, precision=precision)
    assert more == pytest.approx(BATCH * LAYERS * SEQ * FFN * extra)


def test_gated_and_fused_activations_are_unchanged():
    for name in ("gelu", "gelu_pytorch_tanh", "relu", ""):
        assert activations(small(activation=name), precision="bf16") == activations(small(), precision="bf16")
    gated = small(gated_mlp=True)
    assert activations(replace(gated, activation="gelu_new"), precision="bf16") == \
        activations(gated, precision="bf16")


def test_catalog_gpt2_uses_gelu_new_but_litgpt_phi_does_not():
    for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"):
        assert CATALOG.lookup(name).activation == "gelu_new", name
    # phi-1.5/2's catalogue rows are LitGPT's, which calls torch's fused tanh gelu
    assert CATALOG.lookup("phi-1.5").activation == ""


def _config(tmp_path, **values) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    return str(path)


def test_config_json_names_the_activation_and_the_dropout(tmp_path):
    gpt2 = dict(model_type="gpt2", n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, vocab_size=1000,
                n_positions=SEQ, activation_function="gelu_new")
    with_dropout = resolve_entry(spec(hf_config=_config(tmp_path, **gpt2, resid_pdrop=0.1, attn_pdrop=0.1)),
                                 CATALOG)
    assert with_dropout.activation == "gelu_new" and with_dropout.trains_with_dropout
    without = resolve_entry(spec(hf_config=_config(tmp_path, **gpt2, resid_pdrop=0.0, attn_pdrop=0.0)),
                            CATALOG)
    assert not without.trains_with_dropout
    bert = resolve_entry(spec(hf_config=_config(tmp_path, model_type="bert", hidden_size=HIDDEN,
                                                num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                                hidden_act="gelu", hidden_dropout_prob=0.1)), CATALOG)
    assert bert.activation == "gelu" and not bert.downcasts_probs
