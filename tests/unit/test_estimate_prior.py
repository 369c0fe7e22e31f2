"""Analytic prior and decisions: arithmetic, monotonicity (hypothesis), sharding, sharing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.api import estimate
from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.prior import BACKWARD_TEMP, MIB, breakdown, resolve_entry
from slurm_liquid.jobspec import JobSpec

CATALOG = load_catalog()


def spec(**values) -> JobSpec:
    return JobSpec.from_values({k.replace("_", "-"): str(v) for k, v in values.items()})


def test_model_states_bytes_per_parameter():
    entry = CATALOG.lookup("bert-large")
    fp32 = breakdown(entry, spec(model="bert-large", batch_size=1, optimizer="adamw"))
    assert fp32.weights == 4 * entry.params and fp32.gradients == 4 * entry.params
    assert fp32.optimizer == 8 * entry.params
    mixed = breakdown(entry, spec(model="bert-large", batch_size=1, precision="bf16", optimizer="sgd"))
    assert mixed.weights == 6 * entry.params and mixed.optimizer == 0


def test_published_bert_large_anatomy_is_close():
    # transformers docs, "Model training anatomy": V100-16GB, bert-large-uncased, seq 512, batch 4,
    # fp32 AdamW: NVML used 14949 MB (context included), eager attention (transformers of 2022).
    # The prior must land within 15%.
    entry = CATALOG.lookup("bert-large-uncased")
    total = breakdown(entry, spec(model="bert-large", batch_size=4, seq_len=512, attention="eager")).total / MIB
    assert abs(total - 14949) / 14949 < 0.15


def test_cheaper_settings_need_less():
    base = dict(model="gpt2-medium", batch_size=8, seq_len=1024, attention="eager")
    entry = CATALOG.lookup("gpt2-medium")
    full = breakdown(entry, spec(**base)).total
    # mixed precision is not among them: with eager attention autocast keeps fp32 softmax outputs
    # next to their 16-bit copies (the published BERT-large run: fp16 only 7% below fp32)
    for change in ({"precision": "bf16-pure"}, {"checkpointing": "true"}, {"optimizer": "sgd"},
                   {"grad_accum": 4}):
        assert breakdown(entry, spec(**base, **change)).total < full, change
    assert breakdown(entry, spec(**base), gpus=4, sharding="zero3").total < \
        breakdown(entry, spec(**base), gpus=4, sharding="zero1").total < breakdown(entry, spec(**base), gpus=4).total


MODELS = sorted(CATALOG.names())


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(MODELS), st.integers(1, 4096), st.integers(1, 4096),
       st.sampled_from(["fp32", "fp16", "bf16", "bf16-pure"]), st.booleans(), st.integers(1, 16))
def test_more_batch_never_needs_less(model, b1, b2, precision, ckpt, gpus):
    entry = CATALOG.lookup(model)
    lo, hi = sorted((b1, b2))
    need = [breakdown(entry, spec(model=model, batch_size=b, precision=precision,
                                  checkpointing=str(ckpt)), gpus).total for b in (lo, hi)]
    assert need[0] <= need[1]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["cnn", "encoder", "decoder", "seq2seq", "rnn", "vit"]),
       st.floats(1e6, 2e11), st.floats(1.01, 10), st.integers(1, 64))
def test_larger_model_needs_more(family, params, growth, batch):
    small, large = (JobSpec.from_values({"params": str(int(p)), "family": family, "batch-size": str(batch)})
                    for p in (params, params * growth))
    needs = [breakdown(resolve_entry(s, CATALOG), s).total for s in (small, large)]
    assert needs[0] < needs[1]


def test_mixed_precision_halves_cnn_activations():
    entry = CATALOG.lookup("resnet50")
    fp32, amp = (breakdown(entry, spec(model="resnet50", batch_size=128, precision=p)) for p in ("fp32", "amp"))
    assert amp.activations == pytest.approx(0.55 * fp32.activations) and amp.total < fp32.total


def test_mixed_precision_weight_copies_do_not_stack_on_the_optimizer_step():
    # vgg16 at batch 1: the Adam step is the peak. Autocast's 16-bit weight copies are freed by
    # backward, so the step's peak is the fp32 one (the CPU harness measured 2895 MiB for both).
    entry = CATALOG.lookup("vgg16")
    fp32, amp = (breakdown(entry, spec(model="vgg16", batch_size=1, image_size=96, precision=p))
                 for p in ("fp32", "amp"))
    assert amp.weights == 6 * entry.params
    assert amp.tensors == pytest.approx(fp32.tensors)
    # ...while with large activations the copies count (they are saved for backward)
    big = breakdown(entry, spec(model="vgg16", batch_size=256, precision="amp"))
    assert big.tensors == pytest.approx(6 * entry.params + big.gradients + big.optimizer
                                        + big.activations * (1 + BACKWARD_TEMP))


def test_unknown_model_without_params_is_a_usage_error():
    with pytest.raises(UsageError, match="model: unknown model 'resnt50'.*resnet50"):
        estimate(spec(model="resnt50", batch_size=8), correction="none")
    with pytest.raises(UsageError, match="batch-size"):
        estimate(JobSpec.from_values({"model": "resnet50"}), correction="none")


def test_small_job_gets_shards_and_big_job_gets_whole_gpus():
    small = estimate(spec(model="resnet18", batch_size=16, precision="amp"), gpu_type="a100-80gb",
                     correction="none")
    assert small.decision.shards > 0 and small.decision.gres.startswith("shard:")
    assert small.decision.need_mib <= small.decision.shards * 81920 / 16
    big = estimate(spec(model="resnet50", batch_size=1024), gpu_type="v100-16gb", correction="none")
    d = big.decision
    assert d.gpus > 1 and d.fits and d.need_mib <= 16160 and d.gres == f"gpu:v100:{d.gpus_per_node}"
    smaller = estimate(spec(model="resnet50", batch_size=1024), gpu_type="a100-80gb", correction="none")
    assert smaller.decision.gpus < d.gpus


def test_model_states_beyond_one_card_are_sharded_over_whole_nodes():
    result = estimate(spec(model="llama-2-70b", batch_size=32, seq_len=4096, precision="bf16",
                           checkpointing="true"), gpu_type="h100", correction="none")
    d = result.decision
    assert d.auto_sharded and d.sharding == "fsdp" and d.fits
    assert d.gpus % 8 == 0 and d.nodes == d.gpus // 8 and d.need_mib <= 81559


def test_min_gpus_and_explanation():
    result = estimate(spec(model="resnet18", batch_size=64, min_gpus=2, max_gpus=8), correction="none")
    assert result.decision.gpus == 2 and result.decision.shards == 0
    assert 2 <= result.decision.max_efficient_gpus <= 8
    assert "resnet18" in result.explanation() and "MiB" in result.explanation()


def test_does_not_fit_is_reported_not_raised():
    result = estimate(spec(model="llama-3-70b", batch_size=8, seq_len=8192, max_gpus=2), gpu_type="t4",
                      correction="none")
    assert not result.decision.fits and "does not fit" in result.explanation()


def test_old_torch_mobilenet_v2_holds_no_relu6_copies():
    # in-place ReLU6 copies its input for backward since PyTorch 1.10 (the catalogue's coefficient,
    # counted on a current PyTorch, holds the copies): a job on 1.9 needs exactly that much less
    entry = CATALOG.lookup("mobilenet_v2")
    assert entry.inplace_copy_bytes > 0
    base = dict(model="mobilenet_v2", batch_size=64, precision="fp32")
    new, v1_10, old = (breakdown(entry, spec(**base, **extra)).activations
                       for extra in ({}, {"torch": "1.10"}, {"torch": "1.9.1"}))
    assert new == v1_10 and old == pytest.approx(new - 64 * entry.inplace_copy_bytes)
    # models without in-place ReLU6 are the same on any PyTorch
    resnet = CATALOG.lookup("resnet50")
    assert breakdown(resnet, spec(model="resnet50", batch_size=64, torch="1.5")).total == \
        breakdown(resnet, spec(model="resnet50", batch_size=64)).total


@pytest.mark.parametrize("model", ["deit-base", "swin-t", "bert-base"])
def test_old_torch_autocast_saves_gelu_input_in_fp32(model):
    # before PyTorch 1.10 autocast ran GELU in fp32: 2 more bytes per MLP element under mixed
    # precision, nothing more in fp32 or with a current PyTorch
    shape = dict(family="vit", layers=12, hidden=768, heads=12) if model == "deit-base" else {}
    base = dict(model=model, batch_size=32, **shape)
    for precision, more in (("amp", True), ("fp32", False)):
        old, new = (breakdown(resolve_entry(s, CATALOG), s).activations
                    for s in (spec(**base, precision=precision, torch="1.7.1"), spec(**base, precision=precision)))
        assert (old > new) is more, precision
    deit = spec(**base, precision="amp", torch="1.7.1")
    entry = resolve_entry(deit, CATALOG)
    extra = breakdown(entry, deit).activations - breakdown(entry, spec(**base, precision="amp")).activations
    tokens = 32 * ((224 // 16) ** 2 + 1)
    if model == "deit-base":
        assert extra == pytest.approx(tokens * 12 * 2.0 * entry.ffn)


def test_old_torch_leaves_gelu_free_models_alone():
    # GPT-2 (gelu_new, a tanh formula) and Llama (SiLU, gated) never called the autocast-listed gelu
    for model in ("gpt2", "llama-2-7b"):
        entry = CATALOG.lookup(model)
        old, new = (breakdown(entry, spec(model=model, batch_size=2, seq_len=512, precision="amp", **extra)).total
                    for extra in ({"torch": "1.8"}, {}))
        assert old == new, model
