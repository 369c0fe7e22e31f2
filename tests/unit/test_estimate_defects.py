"""Numeric defects: host memory with offload, scaling with only a micro-batch, advice that keeps the
global batch, and the TOML site file on Python 3.10."""

from __future__ import annotations

import sys
import tomllib

import pytest

from slurm_liquid.estimate.api import estimate
from slurm_liquid.estimate.catalog import load_catalog
from slurm_liquid.estimate.decide import efficiency
from slurm_liquid.estimate.gpus import load_gpu_table
from slurm_liquid.estimate.prior import MIB
from slurm_liquid.jobspec import JobSpec


def spec(**values) -> JobSpec:
    return JobSpec.from_values({k.replace("_", "-"): str(v) for k, v in values.items()})


@pytest.mark.parametrize("model, sharding", [("llama-2-7b", "zero2"), ("llama-2-7b", "zero3"),
                                             ("opt-1.3b", "none")])
def test_host_memory_rises_by_the_offloaded_states(model, sharding):
    base = dict(model=model, micro_batch=1, seq_len=2048, precision="bf16", sharding=sharding,
                checkpointing="true", gpus=8)
    plain = estimate(spec(**base), gpu_type="h100", correction="none")
    off = estimate(spec(**base, offload="optimizer"), gpu_type="h100", correction="none")
    assert plain.decision.gpus == off.decision.gpus == 8
    params = load_catalog().lookup(model).params
    shard = params / 8 if sharding != "none" else params
    offloaded = (8 + 4 + 4) * shard          # Adam's two fp32 states, fp32 master weights and gradients
    assert off.prior.host == pytest.approx(offloaded)
    rise = off.decision.host_mem_mib_per_gpu - plain.decision.host_mem_mib_per_gpu
    assert rise >= offloaded / MIB - 1


def test_scaling_of_a_spec_with_only_a_micro_batch_is_not_batch_one():
    table = load_gpu_table()
    gpu = table.lookup("h100")
    entry = load_catalog().lookup("llama-2-7b")
    micro = spec(model="llama-2-7b", micro_batch=4, seq_len=4096, precision="bf16")
    same = spec(model="llama-2-7b", batch_size=32, seq_len=4096, precision="bf16")
    one = spec(model="llama-2-7b", batch_size=1, seq_len=4096, precision="bf16")
    # 4 per GPU on 8 GPUs is the global batch 32: the same step, the same efficiency
    assert efficiency(entry, micro, 8, gpu, table) == pytest.approx(efficiency(entry, same, 8, gpu, table))
    assert efficiency(entry, micro, 8, gpu, table) > efficiency(entry, one, 8, gpu, table)
    out = estimate(spec(model="llama-2-7b", micro_batch=4, seq_len=4096, precision="bf16", max_gpus=64,
                        sharding="fsdp", gpus=8), gpu_type="h100", correction="none")
    assert out.decision.efficiency > 0.7 and out.decision.max_efficient_gpus > 8


def _global(option_change: str, base: dict, gpus: int) -> int:
    said = dict(word.split("=", 1) for word in option_change.split())
    micro = int(said.get("micro-batch", base.get("micro_batch", 0)) or 0)
    accum = int(said.get("grad-accum", base.get("grad_accum", 1)))
    ranks = int(said.get("gpus", gpus)) // int(said.get("tp", base.get("tp", 1)))   # data-parallel ranks
    return micro * accum * ranks if micro else int(base["batch_size"])


@pytest.mark.parametrize("base", [
    dict(model="opt-1.3b", micro_batch=12, seq_len=2048, precision="fp32", gpus=1),
    dict(model="opt-1.3b", micro_batch=6, seq_len=2048, precision="bf16", gpus=3),
    dict(model="opt-6.7b", batch_size=24, seq_len=2048, precision="bf16", max_gpus=8),
    dict(model="llama-2-13b", micro_batch=4, seq_len=4096, precision="bf16", gpus=2),
    dict(model="llama-2-13b", micro_batch=6, grad_accum=2, seq_len=4096, precision="bf16", gpus=4),
])
def test_advice_keeps_the_global_batch_exactly(base):
    result = estimate(spec(**base), gpu_type="a100-40gb", correction="none")
    assert not result.decision.fits and result.advice
    gpus = result.decision.gpus
    before = _global("", base, gpus)
    for option in result.advice:
        assert _global(option.change, base, option.gpus) == before, option
        assert f"global batch {before}" in option.why or "gpu-type" in option.change \
            or "sharding" in option.change or "checkpointing" in option.change \
            or "precision" in option.change or "attention" in option.change
        if "micro-batch=" in option.change and "gpus=" not in option.change:
            # micro-batch 6 -> 4 x 2 steps would be 8 samples, not 6: only divisors are offered
            assert int(dict(w.split("=") for w in option.change.split())["micro-batch"]) in (1, 2, 3, 4, 6, 12)
        if "gpus=" in option.change and "batch_size" in base:
            ranks = option.gpus
            assert base["batch_size"] % ranks == 0


def test_site_toml_reads_with_tomli_on_python_310(tmp_path, monkeypatch):
    from slurm_liquid.estimate import catalog

    site = tmp_path / "site.toml"
    site.write_text('[defaults]\ngpu_type = "h100"\n')
    monkeypatch.setitem(sys.modules, "tomllib", None)     # what Python 3.10 has: no tomllib
    monkeypatch.setitem(sys.modules, "tomli", tomllib)    # the tomli package is the same parser
    assert catalog._read(str(site))["defaults"]["gpu_type"] == "h100"
