"""The memory knobs of today's fine-tuning, each pinned to the bytes of the code path it models."""

from __future__ import annotations

import pytest

from slurm_liquid.estimate.activations import activation_bytes, layout
from slurm_liquid.estimate.api import estimate
from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.prior import QUANT_BYTES, adapter_params, breakdown, resolve_entry
from slurm_liquid.jobspec import JobSpec

CATALOG = load_catalog()
LLAMA = CATALOG.lookup("llama-2-7b")


def spec(**values) -> JobSpec:
    return JobSpec.from_values({k.replace("_", "-"): str(v) for k, v in values.items()})


def acts(s: JobSpec, micro: int = 1) -> float:
    entry = resolve_entry(s, CATALOG)
    return activation_bytes(entry, s, micro, layout(entry, s))


def test_lora_target_modules_count_peft_trainable_parameters():
    # PEFT print_trainable_parameters() for Llama-2-7b: r=16 on all linear layers -> 39,976,960;
    # LitGPT's resource table: r=8 on query and value -> 4,194,304
    assert adapter_params(LLAMA, 16, ("q", "k", "v", "o", "gate", "up", "down")) == 39_976_960
    assert adapter_params(LLAMA, 8) == 4_194_304
    s = spec(model="llama-2-7b", adapter="lora", rank=16, lora_targets="all-linear", micro_batch=1, seq_len=512,
             precision="bf16-pure", attention="flash")
    qv = spec(model="llama-2-7b", adapter="lora", rank=16, micro_batch=1, seq_len=512, precision="bf16-pure",
              attention="flash")
    # fp32 adapter weights + gradients + two fp32 Adam states: 16 bytes per trainable parameter
    grown = breakdown(LLAMA, s).model_states - breakdown(LLAMA, qv).model_states
    assert grown == pytest.approx(16 * (39_976_960 - 8_388_608))
    # LoRA dropout keeps each target's input (2 bytes) and mask (1 byte): k, o, gate, up (h) and down (ffn) more
    extra_inputs = 32 * 512 * 3 * (4096 * 4 + 11008)       # k, o, gate, up of width 4096; down of 11008
    assert acts(s) - acts(qv) == pytest.approx(extra_inputs)


@pytest.mark.parametrize("states, bytes_per_value", [("fp32", 4), ("bf16", 2), ("8bit", 1 + 4 / 2048)])
def test_optimizer_state_precision(states, bytes_per_value):
    s = spec(model="llama-2-7b", micro_batch=1, seq_len=512, precision="bf16", optimizer_states=states)
    assert breakdown(LLAMA, s).optimizer == pytest.approx(LLAMA.params * 2 * bytes_per_value)
    # bitsandbytes' 8-bit Adam and the paged one: two 1-byte states whatever the precision
    paged = spec(model="llama-2-7b", micro_batch=1, seq_len=512, precision="bf16-pure", optimizer="paged_adamw_8bit")
    assert breakdown(LLAMA, paged).optimizer == pytest.approx(LLAMA.params * 2)


def test_selective_checkpointing_drops_only_the_attention_core():
    bert = CATALOG.lookup("bert-large")
    base = dict(model="bert-large", micro_batch=2, seq_len=512, precision="amp", attention="eager")
    full, sel = acts(spec(**base), 2), acts(spec(**base, checkpointing="selective"), 2)
    # BERT under autocast drops out fp32 probabilities: fp32 softmax out, mask, fp32 dropout out and the
    # matmul's 16-bit copy = 4 + 1 + 4 + 2 bytes per score, heads x seq^2 per layer and sample
    assert full - sel == pytest.approx(2 * bert.layers * 16 * 512 * 512 * 11 * bert.act_scale)
    assert sel > acts(spec(**base, checkpointing="true"), 2)


def test_torch_compile_fuses_gpt2s_python_gelu():
    base = dict(model="gpt2", micro_batch=4, seq_len=1024, precision="amp", attention="sdpa")
    # gelu_new under autocast saves pow's fp32 input, tanh's and (1 + tanh)'s fp32 outputs: 12 bytes more
    assert acts(spec(**base), 4) - acts(spec(**base, compile="true"), 4) == pytest.approx(4 * 12 * 1024 * 3072 * 12)


def test_activation_offloading_keeps_two_layers_and_moves_the_rest_to_the_host():
    base = dict(model="llama-2-7b", micro_batch=1, seq_len=2048, precision="bf16-pure", adapter="lora",
                attention="flash")
    plain = breakdown(LLAMA, spec(**base))
    off = breakdown(LLAMA, spec(**base, offload_activations="true"))
    per_layer_and_logits = plain.activations / 32   # order of one layer's saved tensors (+ logits)
    assert off.activations < 3 * per_layer_and_logits + 12 * 2048 * 32000
    assert off.host == pytest.approx(plain.activations - off.activations)


def test_optimizer_step_in_backward_keeps_one_gradient():
    base = dict(model="llama-2-7b", micro_batch=1, seq_len=2048, precision="bf16-pure", attention="flash")
    fused = breakdown(LLAMA, spec(**base, optimizer_in_backward="true"))
    # the largest tensor: the 32000 x 4096 embedding (LM head alike), 2 bytes per gradient in bf16
    assert fused.gradients == pytest.approx(2 * 32000 * 4096)


def test_chunked_cross_entropy():
    base = dict(model="llama-2-7b", micro_batch=2, seq_len=4096, precision="bf16-pure", attention="flash",
                checkpointing="true")
    # 12 bytes per logit whole; in 8 chunks 6 stay whole (fp32 log-probs + 16-bit gradient), 6 / 8 per chunk
    assert acts(spec(**base), 2) - acts(spec(**base, loss_chunks=8), 2) == pytest.approx(2 * 4096 * 32000 * (6 - 6 / 8))


def test_kbit_preparation_upcasts_the_16_bit_parameters():
    base = dict(model="llama-2-7b", adapter="qlora", micro_batch=1, seq_len=512, attention="flash")
    upcast = breakdown(LLAMA, spec(**base, kbit_prep="true")).weights - breakdown(LLAMA, spec(**base)).weights
    assert upcast == pytest.approx(2 * 2 * 32000 * 4096)         # embedding + LM head: 2 -> 4 bytes


def test_gptq_weights_and_no_whole_dequantized_copy():
    gptq = spec(model="llama-2-7b", mode="inference", precision="gptq", micro_batch=1, seq_len=64)
    nf4 = spec(model="llama-2-7b", mode="inference", precision="nf4", micro_batch=1, seq_len=64)
    emb = 2 * 32000 * 4096
    assert breakdown(LLAMA, gptq).weights == pytest.approx((LLAMA.params - emb) * (0.5 + 2.5 / 128) + 2 * emb)
    assert QUANT_BYTES["gptq"] < QUANT_BYTES["int4"]
    # bitsandbytes dequantizes the largest matrix (the LM head) to 16 bits once more; GPTQ kernels do not
    assert breakdown(LLAMA, nf4).temporaries - breakdown(LLAMA, gptq).temporaries == pytest.approx(
        2 * 32000 * 4096, rel=0.01)


def test_zero3_live_parameters():
    base = dict(model="llama-2-70b", micro_batch=1, seq_len=2048, precision="bf16", sharding="zero3",
                checkpointing="true")
    entry = CATALOG.lookup("llama-2-70b")
    small = breakdown(entry, spec(**base, live_params="1e8"), 64)
    default = breakdown(entry, spec(**base), 64)
    assert default.weights - small.weights == pytest.approx(2 * (1e9 - 1e8))


def test_vllm_holds_its_share_of_the_card():
    s = spec(model="llama-2-7b", mode="inference", runtime="vllm", micro_batch=1, seq_len=4096, precision="bf16")
    out = estimate(s, gpu_type="a100-80gb", correction="none")
    assert out.decision.fits and out.decision.need_mib == int(0.9 * 81920 + 0.999)
    # at 15% of the card the 13.5 GB of weights do not start: tensor parallelism over 2 does
    tight = spec(model="llama-2-7b", mode="inference", runtime="vllm", gpu_memory_utilization=0.15, micro_batch=1,
                 seq_len=4096, precision="bf16")
    result = estimate(tight, gpu_type="a100-80gb", correction="none", risk=None)
    changes = [o.change for o in result.advice]
    # ... and a bigger card only where 15% of it holds them (141 GB: 21 GB; not 94 GB: 14 GB)
    assert not result.decision.fits and changes == ["tp=2", "gpu-type=h200-141gb"]
