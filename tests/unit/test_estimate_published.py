"""The prior against peaks that others measured and published (benchmarks/estimate/data/published_*.csv),
and the physical terms those rows exposed: Swin's per-stage MLP width, ViTs trained without dropout,
fp32 norm inputs of 16-bit LLMs, frozen 16-bit linears of LoRA saving no inputs (bitsandbytes' 4-bit
matmul of QLoRA saves them), pure bf16 halving CNN activations, and the PyTorch version each source
ran (`torch=`: fp32 GELU under autocast before 1.10, no in-place ReLU6 copies before 1.10)."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.history import read_history
from slurm_liquid.estimate.prior import activation_bytes, breakdown, layout, resolve_entry
from slurm_liquid.jobspec import JobSpec

CATALOG = load_catalog()
DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "estimate" / "data"


def spec(**values) -> JobSpec:
    return JobSpec.from_values({k.replace("_", "-"): str(v) for k, v in values.items()})


def errors(name: str) -> list[float]:
    return [(r.prior_mib - r.measured_mib) / r.measured_mib for r in read_history(DATA / name, CATALOG)]


@pytest.mark.parametrize("name", ["published_peaks.csv", "published_llm_peaks.csv", "published_cnn_peaks.csv"])
def test_every_published_row_cites_its_source(name):
    with (DATA / name).open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all("http" in row["source"] and row["measured_mib"] for row in rows)


def test_cnn_and_vit_rows_mean_error_within_15_percent():
    errs = errors("published_cnn_peaks.csv")
    assert len(errs) >= 10
    assert statistics.mean(abs(e) for e in errs) <= 0.15


def test_cnns_and_transformers_alike_meet_the_published_target():
    # issue 20's target, per kind of model over every published row: mean error <= 15% and at most
    # 1 in 10 rows under by more than 5% (vision transformers count as transformers)
    records = [r for name in ("published_peaks.csv", "published_llm_peaks.csv", "published_cnn_peaks.csv")
               for r in read_history(DATA / name, CATALOG)]
    for kind in ("cnn", "transformer"):
        errs = [(r.prior_mib - r.measured_mib) / r.measured_mib for r in records
                if (r.entry.family in ("cnn", "detection")) == (kind == "cnn")]
        assert len(errs) >= 4, kind
        assert statistics.mean(abs(e) for e in errs) <= 0.15, kind
        assert sum(e < -0.05 for e in errs) <= len(errs) / 10, kind


def test_every_cnn_and_vit_row_says_its_pytorch_version():
    records = read_history(DATA / "published_cnn_peaks.csv", CATALOG)
    assert all(r.spec.torch for r in records)


def test_transformer_rows_at_most_one_in_ten_under_by_more_than_5_percent():
    errs = errors("published_peaks.csv") + errors("published_llm_peaks.csv")
    assert statistics.mean(abs(e) for e in errs) <= 0.10
    assert sum(e < -0.05 for e in errs) <= len(errs) / 10


def test_qlora_llama_rows_within_5_percent():
    rows = [r for r in read_history(DATA / "published_llm_peaks.csv", CATALOG) if r.spec.adapter == "qlora"
            and r.entry.name.startswith("llama")]
    assert len(rows) == 2
    for r in rows:
        assert -0.05 <= (r.prior_mib - r.measured_mib) / r.measured_mib <= 0.05


def test_swin_stage_mlp_is_four_times_the_stage_width():
    # Mesa (ziplab/Mesa README): Swin-T, batch 128, AMP, 11,812 MB max allocated. Sized with the
    # last stage's 3072-wide MLP at every stage the prior was 85% over.
    s = spec(model="swin-t", batch_size=128, precision="amp")
    b = breakdown(resolve_entry(s, CATALOG), s)
    assert abs(b.tensors / 2 ** 20 - 11812) / 11812 < 0.2


def test_vit_given_by_shape_trains_without_dropout():
    entry = resolve_entry(spec(family="vit", layers=12, hidden=384, heads=6, batch_size=8), CATALOG)
    assert not entry.trains_with_dropout


def test_frozen_linears_of_lora_save_no_inputs_but_bitsandbytes_qlora_does():
    entry = CATALOG.lookup("llama-2-7b")
    acts = {}
    for adapter in ("lora", "qlora"):
        s = spec(model="llama-2-7b", adapter=adapter, micro_batch=1, seq_len=1024, precision="bf16-pure",
                 attention="flash")
        acts[adapter] = activation_bytes(entry, s, 1, layout(entry, s))
    # per token and layer the norm outputs (2 x 2h), the out-projection input (2h) and the
    # down-projection input (2 x ffn) are kept by QLoRA only
    per_token_layer = (acts["qlora"] - acts["lora"]) / (1024 * 32)
    assert per_token_layer == pytest.approx(6 * 4096 + 2 * 11008, rel=0.01)


def test_pure_bf16_halves_cnn_activations():
    entry = CATALOG.lookup("resnet50")
    fp32, pure = (activation_bytes(entry, s, 32) for s in (spec(model="resnet50", batch_size=32),
                                                           spec(model="resnet50", batch_size=32,
                                                                precision="bf16-pure")))
    assert pure == pytest.approx(0.5 * fp32)


def test_llama_lm_head_is_untied_and_kept_in_16_bits_beside_the_embedding():
    # Llama 2 config.json: tie_word_embeddings false. LitGPT's nf4 inference of Llama-2-7B peaked
    # at 4.57 GB max allocated; with a tied head the prior was 6% under.
    assert not CATALOG.lookup("llama-2-7b").tied and CATALOG.lookup("gpt2").tied
    row = [r for r in read_history(DATA / "published_llm_peaks.csv", CATALOG)
           if r.entry.name == "llama-2-7b" and r.spec.mode == "inference" and r.spec.precision == "int4"]
    assert len(row) == 1
    assert abs(row[0].prior_mib - row[0].measured_mib) / row[0].measured_mib < 0.05


def test_phi_lora_rows_within_5_percent():
    # phi-1.5 uses nn.LayerNorm (its 16-bit input is saved, no fp32 copy) and LitGPT's LoRA leaves
    # the out-/down-projections frozen: sized as a full fine-tune the rows were 14-25% over
    rows = [r for r in read_history(DATA / "published_llm_peaks.csv", CATALOG)
            if r.entry.name == "phi-1.5" and r.spec.adapter == "lora"]
    assert len(rows) == 3
    for r in rows:
        assert abs(r.prior_mib - r.measured_mib) / r.measured_mib < 0.05


def test_lora_over_an_8bit_base_keeps_the_inputs_bitsandbytes_saves():
    entry = CATALOG.lookup("llama-2-7b")
    acts = {}
    for precision in ("bf16-pure", "int8"):
        s = spec(model="llama-2-7b", adapter="lora", micro_batch=1, seq_len=1024, precision=precision,
                 attention="flash")
        acts[precision] = activation_bytes(entry, s, 1, layout(entry, s))
    assert acts["int8"] > acts["bf16-pure"]
