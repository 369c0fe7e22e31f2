"""Job-spec parser: directives, comment, script inference, errors, and properties."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings, strategies as st

from slurm_liquid.errors import UsageError
from slurm_liquid.jobspec import (KEYS, JobSpec, add_arguments, parse_comment, parse_directives,
                                  parse_script)


def test_directive_values_are_typed_and_keys_forgiving():
    spec = parse_directives("#LIQUID model=resnet50 batch_size=64 Precision=BF16 checkpointing\n"
                            "#LIQUID params=1.3B seq-len=2k optimizer=AdamW_torch sharding=zero_3")
    assert spec.model == "resnet50" and spec.batch_size == 64 and spec.precision == "bf16"
    assert spec.checkpointing is True and spec.params == 1_300_000_000 and spec.seq_len == 2000
    assert spec.optimizer == "adamw" and spec.sharding == "zero3"
    assert spec.sources["batch-size"] == "line 1"


def test_directive_same_as_flags():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model", "resnet50", "--batch-size", "64", "--precision", "bf16"])
    assert JobSpec.from_args(args) == parse_directives("#LIQUID model=resnet50 batch-size=64 precision=bf16")


@pytest.mark.parametrize("text, field", [
    ("batch-size=0", "batch-size"), ("batch-size=-3", "batch-size"), ("batch-size=1e9", "batch-size"),
    ("batch-size=lots", "batch-size"), ("precision=fp7", "precision"),
    ("attention=fast", "attention"), ("adapter=ia3", "adapter"), ("tp=0", "tp"), ("mode=train-ish", "mode"), ("image-size=3", "image-size"),
    ("deadline=soon", "deadline"), ("epochs", "epochs"), ("min-gpus=8 max-gpus=2", "min-gpus"),
])
def test_bad_values_name_the_field(text, field):
    with pytest.raises(UsageError, match=field):
        parse_directives("#LIQUID " + text)


def test_unknown_key_suggests_close_match():
    with pytest.raises(UsageError, match="batch-size"):
        parse_directives("#LIQUID batchsize=64")


def test_conflicting_directives_are_an_error():
    with pytest.raises(UsageError, match="conflicting directives for batch-size"):
        parse_script("#LIQUID batch-size=64\n#SBATCH --comment='liquid: batch-size=32'\n")
    # the same value twice is fine
    assert parse_directives("#LIQUID batch-size=8\n#LIQUID batch-size=8").batch_size == 8


def test_comment_only_with_liquid_prefix():
    assert parse_comment("liquid: model=bert-large batch-size=32").batch_size == 32
    assert parse_comment("just a note model=x").to_dict() == {}
    with pytest.raises(UsageError, match="--comment"):
        parse_comment("liquid: batch-size=0")


SCRIPT = """#!/bin/bash
#SBATCH --gres=gpu:a100:4
#SBATCH --time=10:00:00
#LIQUID batch-size=256 precision=bf16
module load cuda
srun python train.py --arch ResNet50 --bs 128 --fp16 --opt sgd --momentum 0.9 \\
     --epochs=90 --lr $LR --seq-len $SEQ --model-name-or-path google-bert/bert-large-uncased
#SBATCH --gres=gpu:8
"""


def test_script_explicit_wins_and_gaps_are_inferred():
    spec = parse_script(SCRIPT)
    assert spec.batch_size == 256 and spec.precision == "bf16"        # explicit over --bs/--fp16
    assert spec.model == "ResNet50"                                    # first model flag kept
    assert spec.optimizer == "sgd-momentum" and spec.epochs == 90
    assert spec.gpus == 4 and spec.gpu_type == "a100"                  # #SBATCH after commands ignored
    assert "training command" in spec.sources["epochs"]
    assert any("shell variable" in n for n in spec.notes)
    assert any("bert-large-uncased" in n for n in spec.notes)          # the second model flag noted


@pytest.mark.parametrize("line, gpus, gpu_type", [
    ("#SBATCH --gres=gpu:2", 2, None), ("#SBATCH --gres=gpu:h100:8", 8, "h100"),
    ("#SBATCH --gpus=a100:4", 4, "a100"), ("#SBATCH -G 3", 3, None), ("#SBATCH --gres=gpu", 1, None),
])
def test_sbatch_gpu_requests(line, gpus, gpu_type):
    spec = parse_script(line + "\n")
    assert spec.gpus == gpus and spec.gpu_type == gpu_type


def test_training_flags_outside_launchers_are_ignored():
    assert parse_script("echo --batch-size 7\n").batch_size is None
    assert parse_script("torchrun --nproc-per-node 8 main.py --per_device_train_batch_size=16 "
                        "--gradient_checkpointing --zero-stage 2\n").to_dict() == {
        "micro-batch": 16, "checkpointing": True, "sharding": "zero2", "gpus": 8}


@pytest.mark.parametrize("command, expected", [
    # per-GPU flags are the micro-batch; only explicitly global flags are the global batch
    ("torchrun --nproc_per_node 2 train.py --per_device_train_batch_size 4", {"micro-batch": 4, "gpus": 2}),
    ("python pretrain_gpt.py --micro-batch-size 2 --global-batch-size 512 --tensor-model-parallel-size 4 "
     "--pipeline-model-parallel-size 2", {"micro-batch": 2, "batch-size": 512, "tp": 4, "pp": 2}),
    ("python train.py --model vit_large_patch16_224 -b 64 --amp", {"model": "vit_large_patch16_224",
                                                                 "micro-batch": 64, "precision": "amp"}),
    ("accelerate launch sft.py --use_peft --lora_r 16 --attn_implementation flash_attention_2 --bf16",
     {"adapter": "lora", "rank": 16, "attention": "flash", "precision": "bf16"}),
    ("python qlora.py --load_in_4bit --qlora", {"precision": "int4", "adapter": "qlora"}),
])
def test_training_flags_map_to_the_right_key(command, expected):
    assert parse_script(command + "\n").to_dict() == expected


def test_new_keys_and_aliases():
    spec = parse_directives("#LIQUID model=x per-gpu-batch=2 lora-rank=8 adapter=qlora attention=flash_attention_2 "
                            "tp=2 pp=2 sp=2 offload=cpu mode=serve precision=nf4 follows-allocation "
                            "layers=32 hidden=4096 heads=32 kv-heads=8 intermediate=14336 vocab=32000 "
                            "experts=8 top-k=2 hf-config=/tmp/config.json")
    assert (spec.micro_batch, spec.rank, spec.adapter, spec.attention) == (2, 8, "qlora", "flash")
    assert (spec.tp, spec.pp, spec.sp, spec.offload, spec.mode) == (2, 2, 2, "optimizer", "inference")
    assert spec.precision == "int4" and spec.follows_allocation is True and spec.hf_config == "/tmp/config.json"
    assert (spec.layers, spec.kv_heads, spec.intermediate, spec.experts, spec.top_k) == (32, 8, 14336, 8, 2)


def test_merged_prefers_self():
    strong = JobSpec.from_values({"batch-size": "8"}, "flag")
    weak = parse_directives("#LIQUID batch-size=64 model=vgg16")
    merged = strong.merged(weak)
    assert merged.batch_size == 8 and merged.model == "vgg16"
    assert merged.sources == {"batch-size": "flag", "model": "line 1"}


# --- properties -------------------------------------------------------------------------------

VALUES = {
    "model": st.from_regex(r"[a-z][a-z0-9_.\-]{0,20}", fullmatch=True),
    "batch-size": st.integers(1, 1_000_000),
    "seq-len": st.integers(1, 100_000),
    "precision": st.sampled_from(["fp32", "fp16", "bf16", "amp", "bf16-pure"]),
    "optimizer": st.sampled_from(["adam", "adamw", "sgd", "sgd-momentum", "adafactor"]),
    "checkpointing": st.booleans(),
    "epochs": st.integers(1, 1000),
    "min-gpus": st.integers(1, 8),
}


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional=VALUES))
def test_directive_round_trip(values):
    spec = JobSpec.from_values({k: str(v) for k, v in values.items()})
    assert parse_directives(spec.to_directive()) == spec
    assert parse_script(spec.to_directive() + "\npython x.py --global-batch-size 3\n").to_dict()["batch-size"] == \
        values.get("batch-size", 3)


def _spellings(key: str) -> st.SearchStrategy[str]:
    return st.sampled_from([key, key.upper(), key.replace("-", "_"), "--" + key])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(KEYS)).flatmap(lambda k: st.tuples(st.just(k), _spellings(k))))
def test_key_spellings_are_one_key(pair):
    key, spelling = pair
    value = {"model": "x", "params": "7B", "family": "cnn", "precision": "fp16", "optimizer": "sgd",
             "sharding": "fsdp", "checkpointing": "true", "deadline": "48h", "gpu-type": "h100",
             "image-size": "224", "attention": "sdpa", "adapter": "lora", "offload": "optimizer",
             "mode": "inference", "follows-allocation": "true", "hf-config": "config.json", "hidden": "64",
             "intermediate": "256", "dataset": "/shared/x", "stage": "copy", "compile": "true",
             "offload-activations": "true", "optimizer-in-backward": "true", "kbit-prep": "true",
             "optimizer-states": "bf16", "runtime": "vllm", "gpu-memory-utilization": "0.9",
             "lora-targets": "all-linear"}.get(key, "4")
    assert parse_directives(f"#LIQUID {spelling}={value}") == parse_directives(f"#LIQUID {key}={value}")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_a_spec_or_a_usage_error(text):
    for parse in (parse_script, parse_comment, lambda t: parse_directives("#LIQUID " + t)):
        try:
            assert isinstance(parse(text), JobSpec)
        except UsageError as exc:
            assert str(exc) and "\n" not in str(exc).strip("\n")


def test_the_script_parser_is_bounded_and_linear() -> None:
    """Finding 2: a 1 MB opted-in script with an unclosed quote cost a 30 s placement pass (shlex is
    quadratic in one line). Lines past MAX_LINE_CHARS are skipped with a note, scripts past
    MAX_SCRIPT_BYTES read only to there; the work per input byte is bounded (measured in
    benchmarks/robustness/script_parser.py, not timed here)."""
    from slurm_liquid.ledger.limits import MAX_LINE_CHARS, MAX_SCRIPT_BYTES

    head = "#!/bin/sh\n#LIQUID model=resnet50 batch-size=32\n"
    spec = parse_script(head + "python train.py --bs 64 '" + "a " * MAX_LINE_CHARS + "\n")
    assert spec.model == "resnet50" and any("longer than" in n for n in spec.notes)
    spec = parse_script(head + "x\n" * (MAX_SCRIPT_BYTES // 2 + 10) + "#LIQUID epochs=3\n")
    assert spec.epochs is None and any("first" in n for n in spec.notes)
    with pytest.raises(UsageError, match="characters"):
        parse_script("#LIQUID model=" + "x" * (MAX_LINE_CHARS + 1))
    with pytest.raises(UsageError, match="#LIQUID lines"):
        parse_script("#LIQUID model=resnet50\n" * 300)
    spec = parse_script(head + "python train.py 'x\n" * 100 + "python train.py --bs 64\n")
    assert spec.micro_batch is None and any("launcher lines only" in n for n in spec.notes)


@pytest.mark.parametrize("text, version", [("1.7.1", "1.7.1"), ("2.1.0.dev20230623+cu118", "2.1.0"),
                                           ("torch-1.13", "1.13"), ("2", "2.0"), ("1.12.1rc1", "1.12.1")])
def test_torch_version_key(text, version):
    assert parse_directives(f"#LIQUID model=resnet50 torch={text}").torch == version


@pytest.mark.parametrize("text", ["new", "1..2", "1.7.1.2", "1.7 beta"])
def test_bad_torch_version_names_the_field(text):
    with pytest.raises(UsageError, match="torch"):
        JobSpec.from_values({"torch": text})
