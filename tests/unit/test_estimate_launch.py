"""Launch configs and command lines people really submit with: DeepSpeed JSON ("auto" from the
command), accelerate YAML, torchrun/srun process counts, HF Trainer argument forms, LoRA flags,
Lightning/torchtune overrides; every value with its source; and the CLI's spelling errors."""

from __future__ import annotations

import json

import pytest

from slurm_liquid.cli import main
from slurm_liquid.jobspec import UserFiles, parse_script, source_kind

DS_ZERO3 = {"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                  "offload_param": {"device": "none"}, "stage3_max_live_parameters": 5e8}}
ACCEL_FSDP = """compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_offload_params: false
  fsdp_activation_checkpointing: true
mixed_precision: bf16
num_machines: 1
num_processes: 4
"""


def job(tmp_path, command: str, header: str = "#SBATCH --gres=gpu:8\n", **files: str):
    for name, text in files.items():
        (tmp_path / name.replace("__", ".")).write_text(text)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + header + command + "\n")
    return parse_script(script.read_text(), read=UserFiles([str(tmp_path)]))


@pytest.mark.parametrize("flags", ["--bf16 True", "--bf16=True", "--bf16 true --fp16 False", "--bf16"])
def test_hf_trainer_boolean_forms(flags):
    spec = parse_script(f"python train.py {flags} --per_device_train_batch_size 2 data/\n")
    assert spec.precision == "bf16" and spec.micro_batch == 2


def test_a_bare_flag_before_a_positional_keeps_both():
    spec = parse_script("python train.py --gradient_checkpointing --fp16 config/data.txt --model_max_length 4096\n")
    assert spec.checkpointing is True and spec.precision == "fp16" and spec.seq_len == 4096


def test_deepspeed_json_with_auto_values_from_the_command(tmp_path):
    spec = job(tmp_path, "deepspeed --num_gpus 8 train.py --deepspeed ds.json --bf16 True "
                         "--per_device_train_batch_size 4 --gradient_accumulation_steps 2",
               ds__json=json.dumps(DS_ZERO3))
    assert (spec.sharding, spec.offload, spec.live_params) == ("zero3", "optimizer", 500_000_000)
    assert (spec.precision, spec.micro_batch, spec.grad_accum, spec.gpus) == ("bf16", 4, 2, 8)
    assert source_kind(spec.sources["sharding"]) == "config file"
    assert "ds.json" in spec.sources["sharding"]
    assert source_kind(spec.sources["precision"]) == "script flag"     # "auto": the command says
    assert source_kind(spec.sources["gpus"]) == "sbatch"


def test_a_config_is_never_read_without_a_reader(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps(DS_ZERO3))
    spec = parse_script(f"deepspeed train.py --deepspeed {tmp_path}/ds.json\n")   # as root code calls it
    assert spec.sharding is None and any("not read" in n for n in spec.notes)


def test_accelerate_yaml_fsdp(tmp_path):
    spec = job(tmp_path, "accelerate launch --config_file fsdp.yaml train.py --per_device_train_batch_size 1",
               header="", fsdp__yaml=ACCEL_FSDP)
    assert (spec.sharding, spec.checkpointing, spec.precision, spec.gpus) == ("fsdp", True, "bf16", 4)


def test_accelerate_deepspeed_plugin_names_its_json(tmp_path):
    yaml_text = ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
                 "  zero3_init_flag: true\nnum_processes: 8\n")
    spec = job(tmp_path, "accelerate launch --config_file ds.yaml train.py", header="",
               ds__yaml=yaml_text, ds__json=json.dumps(DS_ZERO3))
    assert (spec.sharding, spec.offload, spec.gpus) == ("zero3", "optimizer", 8)


def test_training_argument_yaml_of_llama_factory(tmp_path):
    text = ("model_name_or_path: meta-llama/Llama-2-7b-hf\nfinetuning_type: lora\nlora_target: all\n"
            "quantization_bit: 4\nper_device_train_batch_size: 2\ncutoff_len: 2048\nbf16: true\n")
    spec = job(tmp_path, "llamafactory-cli train qlora.yaml", qlora__yaml=text)
    assert (spec.model, spec.adapter, spec.precision, spec.micro_batch, spec.seq_len) == \
        ("Llama-2-7b-hf", "lora", "int4", 2, 2048)
    assert spec.lora_targets == "q,k,v,o,gate,up,down"


def test_torchrun_and_srun_process_counts():
    assert parse_script("torchrun --nnodes=2 --nproc-per-node=4 train.py\n").gpus == 8
    assert parse_script("srun -n 16 python train.py -n 3\n").gpus == 16   # -n after the script is its own
    assert parse_script("#SBATCH --nodes=4\n#SBATCH --gpus-per-node=8\npython x.py\n").gpus == 32


def test_lora_flags_and_dtype():
    spec = parse_script("python sft.py --use_peft --lora_r 64 --lora_target_modules q_proj k_proj v_proj o_proj "
                        "--torch_dtype bfloat16 --bf16 True --optim paged_adamw_8bit data.json\n")
    assert (spec.adapter, spec.rank, spec.lora_targets) == ("lora", 64, "q,k,v,o")
    assert spec.precision == "bf16-pure" and spec.optimizer == "adam8bit"


def test_lightning_and_torchtune_overrides():
    spec = parse_script("python main.py fit --trainer.precision=bf16-mixed --trainer.strategy=deepspeed_stage_3_offload\n")
    assert (spec.precision, spec.sharding, spec.offload) == ("bf16", "zero3", "params")
    spec = parse_script("tune run lora_finetune_single_device --config llama3/8B_lora batch_size=4 "
                        "enable_activation_checkpointing=True enable_activation_offloading=True compile=True "
                        "loss._component_=torchtune.modules.loss.CEWithChunkedOutputLoss\n")
    assert (spec.micro_batch, spec.checkpointing, spec.offload_activations, spec.compile, spec.loss_chunks) == \
        (4, True, True, True, 8)


def _cli(capsys, *argv):
    code = main(["estimate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_script_shows_every_value_and_its_source(tmp_path, capsys):
    (tmp_path / "ds.json").write_text(json.dumps(DS_ZERO3))
    script = tmp_path / "job.sh"
    # not UTF-8 (a Latin-1 comment): sbatch takes it, so must the estimator
    script.write_bytes(b"#!/bin/bash\n#SBATCH --gres=gpu:8\n# caf\xe9\n"
                       b"torchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Llama-2-7b-hf "
                       b"--deepspeed ds.json --bf16 True --per_device_train_batch_size 1\n")
    code, out, err = _cli(capsys, "--script", str(script), "--json", "--correction", "none")
    inputs = json.loads(out)["inputs"]
    assert inputs["sharding"] == {"value": "zero3", "source": "config file", "where": inputs["sharding"]["where"]}
    assert inputs["precision"]["source"] == "script flag" and inputs["gpus"]["source"] == "sbatch"
    assert inputs["optimizer"] == {"value": "adamw", "source": "default", "where": "default"}
    code, out, err = _cli(capsys, "--script", str(script), "--correction", "none")
    assert "read (value, source):" in out and "config file" in out


def test_unknown_flag_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--batchsize", "32"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "unknown option --batchsize" in err and "--batch-size" in err
    assert "invalid choice" not in err


def test_flags_take_underscores_as_directives_do(capsys):
    code, out, _ = _cli(capsys, "--model", "resnet50", "--batch_size", "64", "--gpu_type", "h100", "--json",
                        "--correction", "none")
    assert code == 0 and json.loads(out)["inputs"]["batch-size"]["value"] == 64


def test_lightning_trainer_literals_in_the_script(tmp_path):
    code = ("import lightning as L\nprecision = args.precision\n"
            "trainer = L.Trainer(devices=4, precision='bf16-mixed', strategy=\"deepspeed_stage_2\",\n"
            "                    accumulate_grad_batches=4)\n")
    spec = job(tmp_path, "srun python fit.py --batch_size 8", train__py="", fit__py=code)
    assert (spec.precision, spec.sharding, spec.grad_accum, spec.micro_batch) == ("bf16", "zero2", 4, 8)
    assert "fit.py" in spec.sources["precision"]


from hypothesis import given, settings, strategies as st  # noqa: E402

_JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                            st.sampled_from(["zero_optimization", "stage", "bf16", "enabled", "offload_param",
                                             "device", "distributed_type", "fsdp_config", "num_processes",
                                             "per_device_train_batch_size", "deepspeed", "trainer", "precision",
                                             "train_micro_batch_size_per_gpu", "lora_target", "x"]),
                            inner, max_size=5), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(st.one_of(_JSONISH.map(json.dumps), st.text(max_size=300)), st.sampled_from(["c.json", "c.yaml", "c.py"]))
def test_any_config_gives_a_spec_or_notes(text, name):
    from slurm_liquid.jobspec import JobSpec

    files = {name: text}
    spec = parse_script(f"accelerate launch --config_file {name} train.py --deepspeed {name}\n",
                        read=lambda path: (path, files[path]) if path in files else None)
    assert isinstance(spec, JobSpec)


@pytest.mark.parametrize("flag, sharding, offload", [
    ('--fsdp "full_shard auto_wrap"', "fsdp", None), ('--fsdp "full_shard offload auto_wrap"', "fsdp", "params"),
    ("--fsdp shard_grad_op", "zero2", None), ("--fsdp", "fsdp", None)])
def test_hf_trainer_fsdp_strings(flag, sharding, offload):
    spec = parse_script(f"torchrun --nproc_per_node 8 train.py {flag} --bf16 True data.json\n")
    assert (spec.sharding, spec.offload, spec.precision) == (sharding, offload, "bf16")


def test_the_distributed_launch_line_beats_data_preparation():
    spec = parse_script("python prepare.py --max_seq_length 512 --model_name_or_path gpt2\n"
                        "torchrun --nproc_per_node 4 train.py --model_name_or_path meta-llama/Llama-2-7b-hf "
                        "--max_seq_length 4096\npython eval.py --per_device_eval_batch_size 64 --bf16\n")
    assert (spec.model, spec.seq_len, spec.gpus) == ("Llama-2-7b-hf", 4096, 4)
    assert spec.precision == "bf16"           # what the launch line leaves, a plain line may fill


def test_scripts_that_spawn_their_own_processes():
    assert parse_script("python finetune/lora.py --devices 2 --precision bf16-true\n").gpus == 2
    assert parse_script("srun python main.py fit --trainer.devices=4 --trainer.num_nodes=2\n").gpus == 8


def test_options_are_checked_against_their_own_parser(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--batch-sizes", "32"])              # a profile option, not an estimate one
    assert "unknown option --batch-sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["estimate", "train", "--histroy", "x.csv"])
    assert "did you mean --history" in capsys.readouterr().err
    assert main(["estimate", "--model", "resnet50", "--batch_size", "8", "--json", "--correction", "none"]) == 0


def test_a_vllm_server_is_inference_that_reserves_its_share():
    spec = parse_script("vllm serve TheBloke/Llama-2-13B-AWQ --quantization awq --max-model-len 4096 "
                        "--gpu-memory-utilization 0.85 --tensor-parallel-size 2\n")
    assert (spec.mode, spec.runtime, spec.precision, spec.seq_len, spec.gpu_memory_utilization, spec.tp) == \
        ("inference", "vllm", "gptq", 4096, 0.85, 2)
    assert spec.model == "Llama-2-13B-AWQ"


def test_a_vllm_server_needs_no_batch_and_asks_for_its_share():
    from slurm_liquid.estimate.api import estimate

    spec = parse_script("vllm serve meta-llama/Llama-2-13b-hf --max-model-len 4096 --tensor-parallel-size 2\n")
    result = estimate(spec, gpu_type="a100-80gb", correction="none")
    assert result.decision.gpus == 2 and result.decision.need_mib == 73728     # 0.9 of each 81,920 MiB card
