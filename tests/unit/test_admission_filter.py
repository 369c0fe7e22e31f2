"""The cli_filter helper: reading sbatch's options, and what it says and sets in each submit mode.

Expected requests are derived from the estimator's own decision (`estimate()` on the same spec with
the test cluster's site file), so these tests check the translation into sbatch options, not the
memory model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from slurm_liquid.admission.filter import (Answer, Asked, decide, field_of, gpu_request,
                                           parse_asked, read_options, run)
from slurm_liquid.config import Config, parse
from slurm_liquid.estimate.api import estimate
from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.decide import Decision
from slurm_liquid.jobspec import parse_comment
from slurm_liquid.ledger import Record, opted_in

SITE = Path(__file__).resolve().parents[2] / "containers" / "slurm" / "liquid-site.toml"
SITE_NODES = 4          # `nodes` in the site file
SMALL = "liquid: model=bert-large batch-size=24 attention=eager"      # one whole H100 (at its bound)
FOUR = "liquid: model=bert-large batch-size=128 follows-allocation"   # one node's worth
TWO_NODES = "liquid: model=llama-2-7b batch-size=8 seq-len=4096 follows-allocation"  # two whole nodes
TINY = "liquid: model=resnet50 batch-size=64"                         # a share of one GPU
TOO_WIDE = "liquid: model=llama-2-7b batch-size=64 seq-len=4096 follows-allocation"  # would need more nodes than exist
NEVER = "liquid: model=llama-2-70b batch-size=512 seq-len=4096"       # fits nowhere


def cfg(mode: str) -> Config:
    return parse(f'[submit]\nmode = "{mode}"\n[estimate]\nsite = "{SITE}"\n')


def decision(comment: str, gpu_type: str | None = "h100") -> Decision:
    return estimate(parse_comment(comment), gpu_type=gpu_type, site=str(SITE)).decision


def record_of(answer: Answer) -> Record:
    record = Record.parse(answer.sets["comment"])
    assert record is not None
    return record


# --- reading the options ---------------------------------------------------------------------

def test_read_options_keeps_known_non_empty_values(tmp_path) -> None:
    path = tmp_path / "opts"
    path.write_text("script=/home/a/job.sh\ngres=gpu:2\ngpus=nil\nmem=\nbogus=1\n"
                    "comment=liquid: model=x batch-size=8\nno equals sign\n")
    assert read_options(path) == {"script": "/home/a/job.sh", "gres": "gpu:2",
                                  "comment": "liquid: model=x batch-size=8"}


@pytest.mark.parametrize("options, asked, describe", [
    ({"gres": "gpu:h100:2"}, Asked("gres", 2, "h100", 1), "gpu:h100:2"),
    ({"gres": "gres/gpu:2"}, Asked("gres", 2, None, 1), "gpu:2"),
    ({"gres": "gres:gpu:h100:1"}, Asked("gres", 1, "h100", 1), "gpu:h100:1"),
    ({"gres": "gpu"}, Asked("gres", 1, None, 1), "gpu:1"),
    ({"gpus": "h100:3"}, Asked("gpus", 3, "h100", 1), "gpu:h100:3"),
    ({"gpus": "3", "nodes": "2"}, Asked("gpus", 3, None, 2), "gpu:3/2n"),      # --gpus is per job
    ({"gpus-per-node": "2", "nodes": "2"}, Asked("gpus-per-node", 2, None, 2), "gpu:4/2n"),
    ({"gres": "shard:4"}, Asked(None, 0, None, 1, shards=4), "shard:4"),
    ({"nodes": "1-0"}, Asked(None, 0, None, 1), "none"),                        # cli_filter's default
    ({"nodes": "2-4", "gres": "gpu:1"}, Asked("gres", 1, None, 2), "gpu:2/2n"),
    ({"gpus": "0"}, Asked(None), "none"),
])
def test_parse_asked(options: dict[str, str], asked: Asked, describe: str) -> None:
    assert parse_asked(options) == asked
    assert asked.describe() == describe


def test_the_filter_uses_the_ledgers_opt_in_rule() -> None:
    assert opted_in("", "  Liquid: model=x")
    assert opted_in("#!/bin/sh\n  #liquid model=x\n", "")
    assert not opted_in("#!/bin/sh\n# LIQUID is a word\npython train.py\n", "a liquid: note")
    assert decide({"comment": "liquidity study"}, "", parse('[submit]\nmode = "adjust"\n')).lines() == ["end"]


@pytest.mark.parametrize("mode", ["advise", "adjust"])
def test_the_users_own_comment_is_kept_in_the_record(mode: str) -> None:
    """Finding: users' own --comment text was overwritten, even in advise mode."""
    script = "#!/bin/sh\n#LIQUID model=resnet50 batch-size=64\npython train.py\n"
    answer = decide({"gres": "gpu:4", "comment": "sweep 42: lr=3e-4"}, script, parse(f'[submit]\nmode = "{mode}"\n'))
    comment = answer.sets["comment"]
    assert comment.endswith(" || sweep 42: lr=3e-4") and len(comment) <= 1024
    record = Record.parse(comment)
    assert record.user == "sweep 42: lr=3e-4" and record.spec.startswith("model=resnet50")


@pytest.mark.parametrize("option, expected", [
    (None, {"gres": "gpu:h100:4", "nodes": "2"}),
    ("gres", {"gres": "gpu:h100:4", "nodes": "2"}),
    ("gpus", {"gpus": "h100:8", "nodes": "2"}),
    ("gpus-per-node", {"gpus-per-node": "h100:4", "nodes": "2"}),
])
def test_gpu_request_speaks_the_users_option(option, expected) -> None:
    assert gpu_request(Asked(option), 8, 2, 4, 0, "h100") == expected


def test_gpu_request_for_shards_zeroes_a_gpus_option() -> None:
    assert gpu_request(Asked("gpus", 2), 1, 1, 1, 3, None) == {"gres": "shard:3", "gpus": "0", "nodes": "1"}
    assert gpu_request(Asked("gres", 2), 1, 1, 1, 3, None) == {"gres": "shard:3", "nodes": "1"}


def test_answer_lines_are_single_lines_only_settable_options_and_end() -> None:
    answer = Answer(sets={"gres": "gpu:2", "partition": "big", "comment": "a\nb"}, says=["one\ntwo  three"])
    assert answer.lines() == ["say one two three", "set gres gpu:2", "set comment a b", "end"]
    assert Answer().lines() == ["end"]     # "nothing to do" is a complete answer too


def nothing(answer: Answer) -> bool:
    return not answer.says and not answer.sets


# --- decide() --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["off", "advise", "adjust"])
def test_jobs_that_did_not_opt_in_get_nothing(mode: str) -> None:
    options = {"gres": "gpu:4", "comment": "my run 3"}
    assert nothing(decide(options, "#!/bin/sh\npython train.py --bs 64\n", cfg(mode)))


def test_off_mode_does_nothing_even_for_liquid_jobs() -> None:
    assert nothing(decide({"gres": "gpu:4", "comment": FOUR}, "", cfg("off")))


@pytest.mark.parametrize("mode", ["advise", "adjust"])
def test_a_comment_that_already_is_a_record_is_left_alone(mode: str) -> None:
    record = "liquid/1 mode=adjust asked=gpu:4 set=gpu:1 | model=bert-large batch-size=32"
    script = "#!/bin/sh\n#LIQUID model=bert-large batch-size=32\n"
    assert nothing(decide({"gres": "gpu:1", "comment": record}, script, cfg(mode)))


@pytest.mark.parametrize("options, option", [({"gres": "gpu:h100:1"}, "gres"), ({"gpus": "h100:1"}, "gpus"),
                                             ({"gpus-per-node": "1"}, "gpus-per-node")])
def test_advise_only_writes_the_comment(options: dict[str, str], option: str) -> None:
    d = decision(FOUR)
    assert d.fits and d.gpus > 1 and d.nodes == 1        # precondition: the request is worth changing
    answer = decide({**options, "comment": FOUR}, "", cfg("advise"))
    assert set(answer.sets) == {"comment"}
    assert len(answer.says) == 1 and "advice" in answer.says[0]
    assert f"advice: --{option}=" in answer.says[0] and "instead of gpu:" in answer.says[0]
    record = record_of(answer)
    assert record.get("mode") == "advise" and "set" not in record.fields
    assert (record.get("est") or "").startswith(f"{d.gpus}x")
    assert record.spec == "model=bert-large batch-size=128 follows-allocation=true"


@pytest.mark.parametrize("options, option, value", [
    ({"gres": "gpu:h100:1"}, "gres", "gpu:h100:{per_node}"),
    ({"gres": "gpu:1"}, "gres", "gpu:{per_node}"),
    ({"gpus": "h100:1"}, "gpus", "h100:{gpus}"),
    ({"gpus-per-node": "1"}, "gpus-per-node", "{per_node}"),
])
def test_adjust_sets_the_option_the_user_used(options, option, value) -> None:
    d = decision(FOUR)
    assert d.fits and d.gpus > 1 and d.nodes == 1 and not d.shards     # precondition
    want = value.format(per_node=d.gpus_per_node, gpus=d.gpus)
    answer = decide({**options, "comment": FOUR}, "", cfg("adjust"))
    other_gpu_options = {"gres", "gpus", "gpus-per-node"} - {option}
    assert answer.sets[option] == want and not other_gpu_options & set(answer.sets)
    assert answer.sets["nodes"] == "1"
    assert answer.sets["mem"] == f"{d.host_mem_mib_per_gpu * d.gpus_per_node}M"
    assert answer.sets["cpus-per-gpu"] == str(d.cpus_per_gpu)
    (say,) = answer.says
    assert say.startswith(f"slurm-liquid: adjusted {parse_asked(options).describe()} -> --{option}={want}")
    assert record_of(answer).get("set") == want and record_of(answer).get("mode") == "adjust"


def test_adjust_grows_a_per_node_request_to_whole_nodes() -> None:
    d = decision(TWO_NODES)
    assert d.fits and d.nodes == 2 <= SITE_NODES              # precondition
    answer = decide({"gpus-per-node": "1", "nodes": "1", "comment": TWO_NODES}, "", cfg("adjust"))
    assert answer.sets["gpus-per-node"] == str(d.gpus_per_node) and answer.sets["nodes"] == "2"
    assert f"--gpus-per-node={d.gpus_per_node} --nodes=2" in answer.says[0]


def test_adjust_to_a_shared_gpu() -> None:
    d = decision(TINY)
    assert d.shards > 0                                        # precondition
    answer = decide({"gpus": "1", "comment": TINY}, "", cfg("adjust"))
    assert answer.sets["gres"] == f"shard:{d.shards}" and answer.sets["gpus"] == "0"
    assert answer.sets["nodes"] == "1" and "cpus-per-gpu" not in answer.sets
    assert f"-> --gres=shard:{d.shards}" in answer.says[0] and "--gpus=0" not in answer.says[0]


def test_adjust_keeps_the_users_memory_and_cpus() -> None:
    options = {"gres": "gpu:1", "mem-per-cpu": "2G", "cpus-per-task": "3", "comment": FOUR}
    answer = decide(options, "", cfg("adjust"))
    assert "gres" in answer.sets                                # it did adjust the GPUs ...
    assert "mem" not in answer.sets and "cpus-per-gpu" not in answer.sets   # ... and nothing else


def test_a_right_sized_request_is_confirmed_not_changed() -> None:
    d = decision(SMALL)
    assert d.gpus == 1 and not d.shards                        # precondition
    answer = decide({"gres": "gpu:1", "comment": SMALL}, "", cfg("adjust"))
    assert set(answer.sets) == {"comment"} and "is right for this job" in answer.says[0]


@pytest.mark.parametrize("mode", ["advise", "adjust"])
def test_a_job_that_does_not_fit_is_never_adjusted(mode: str) -> None:
    assert not decision(NEVER).fits                            # precondition
    answer = decide({"gres": "gpu:1", "comment": NEVER}, "", cfg(mode))
    assert set(answer.sets) == {"comment"}
    assert "does not fit" in answer.says[0] and answer.says[0].endswith("submitted as asked")


@pytest.mark.parametrize("mode", ["advise", "adjust"])
def test_never_more_nodes_than_the_cluster_has(mode: str) -> None:
    # the estimate never looks past the site: a job that would need more is one that does not fit,
    # and the answer names what would make it fit instead of asking for nodes that do not exist
    d = decision(TOO_WIDE)
    assert not d.fits and d.nodes <= SITE_NODES
    answer = decide({"gres": "gpu:1", "comment": TOO_WIDE}, "", cfg(mode))
    assert set(answer.sets) == {"comment"}
    assert "does not fit" in answer.says[0] and "fits with:" in answer.says[0]
    assert "set" not in record_of(answer).fields


@pytest.mark.parametrize("comment, script, field", [
    ("liquid: model=bert-large batch-size=-1", "", "batch-size"),
    ("liquid: model=bert-large precision=fp7 batch-size=8", "", "precision"),
    ("", "#!/bin/sh\n#LIQUID model=resnet50 batch-size=8\n#LIQUID image-size=3\n", "image-size"),
])
def test_a_malformed_spec_is_said_once_and_the_job_goes_as_asked(comment, script, field) -> None:
    answer = decide({"gres": "gpu:2", "comment": comment}, script, cfg("adjust"))
    (say,) = answer.says
    assert field in say and say.endswith("the job is submitted as asked")
    assert set(answer.sets) == {"comment"}
    record = record_of(answer)
    assert record.get("err") == field and record.get("asked") == "gpu:2"


def test_an_unknown_key_is_said_once_with_a_close_match() -> None:
    answer = decide({"gres": "gpu:2", "comment": "liquid: modle=bert-large batch-size=8"}, "", cfg("advise"))
    (say,) = answer.says
    assert "'modle'" in say and "model" in say.split("'modle'")[1] and say.endswith("submitted as asked")
    assert set(answer.sets) == {"comment"} and "err" in record_of(answer).fields


# The estimator names the field first ("batch-size: needed ...", "gpu-type: unknown GPU type 'zz';
# known: ...", with more colons after it).
@pytest.mark.parametrize("comment, options, field", [
    ("liquid: model=bert-large", {"gres": "gpu:1"}, "batch-size"),
    ("liquid: model=bert-large batch-size=8", {"gres": "gpu:zz:1"}, "gpu-type"),
    ("liquid: model=no-such-model batch-size=8", {"gres": "gpu:1"}, "model"),
])
def test_estimator_errors_name_the_field_in_the_record(comment, options, field) -> None:
    answer = decide({**options, "comment": comment}, "", cfg("adjust"))
    assert len(answer.says) == 1 and answer.says[0].endswith("submitted as asked")
    assert record_of(answer).get("err") == field


@pytest.mark.parametrize("message, field", [
    ("line 3: image-size: '3' is outside 8..16384", "image-size"),
    ("line 2 (#SBATCH --comment): seq-len: 'x' is not a number", "seq-len"),
    ("conflicting directives for batch-size: 64 (line 1) and 32 (line 2)", "batch-size"),
    ("gpu-type: unknown GPU type 'zz'; known: h100-80gb", "gpu-type"),
    ("--comment: unknown key 'modle'; did you mean model?", "spec"),
    ("`scontrol write batch_script 7 -` exit code 1: no script", "spec"),
])
def test_field_of_names_the_job_spec_key(message: str, field: str) -> None:
    assert field_of(UsageError(message)) == field


# --- run(): the command cli_filter.lua calls ---------------------------------------------------

def _run(tmp_path: Path, capsys, options: str | None, config_text: str) -> list[str]:
    opts = tmp_path / "options"
    if options is not None:
        opts.write_text(options)
    conf = tmp_path / "liquid.toml"
    conf.write_text(config_text)
    assert run(argparse.Namespace(options=str(opts), config=str(conf))) == 0
    return capsys.readouterr().out.splitlines()


def test_run_answers_with_instructions(tmp_path, capsys) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --gres=gpu:h100:1\n#LIQUID model=bert-large batch-size=128 follows-allocation\n")
    out = _run(tmp_path, capsys, f"script={script}\ngres=gpu:h100:1\nnodes=1-0\n",
               f'[submit]\nmode = "adjust"\n[estimate]\nsite = "{SITE}"\n')
    assert out[0].startswith("say slurm-liquid: adjusted gpu:h100:1 -> --gres=gpu:h100:")
    assert f"set gres gpu:h100:{decision(FOUR).gpus_per_node}" in out
    assert any(line.startswith("set comment liquid/1 mode=adjust") for line in out) and out[-1] == "end"


@pytest.mark.parametrize("options, config_text, says", [
    (None, "", "No such file"),                                           # options file gone
    ("gres=gpu:1\ncomment=liquid: model=x batch-size=8\n", "[submit\n", "not valid TOML"),
    ("gres=gpu:1\ncomment=liquid: model=x batch-size=8\n", "[submit]\nmode = 'fast'\n", "mode = 'fast'"),
    ("script=/no/such/script.sh\ngres=gpu:1\n", "", "No such file"),
])
def test_run_fails_open_with_one_say_line(tmp_path, capsys, options, config_text, says) -> None:
    out = _run(tmp_path, capsys, options, config_text)
    assert len(out) == 2 and out[1] == "end"
    assert out[0].startswith("say slurm-liquid: ") and says in out[0]
    assert out[0].endswith("the job is submitted as asked")


def test_run_reports_internal_errors_without_failing(tmp_path, capsys, monkeypatch) -> None:
    def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("slurm_liquid.admission.filter.decide", broken)
    out = _run(tmp_path, capsys, "gres=gpu:1\n", "")
    assert out == ["say slurm-liquid: internal error (RuntimeError: boom); the job is submitted as asked", "end"]


def test_adjust_only_resizes_jobs_that_follow_the_allocation() -> None:
    # without follows-allocation the launcher may not follow a new GPU count (a GPU fewer breaks
    # `torchrun --nproc_per_node 2`): adjust mode advises instead
    comment = "liquid: model=bert-large batch-size=128"
    assert decision(comment).gpus > 1                          # precondition: worth changing
    answer = decide({"gres": "gpu:h100:1", "comment": comment}, "", cfg("adjust"))
    assert set(answer.sets) == {"comment"} and "set" not in record_of(answer).fields
    (say,) = answer.says
    assert "advice: --gres=gpu:h100:" in say and "slurm-liquid: adjusted" not in say


@pytest.mark.parametrize("spec_text, asked, gpus, shards, ok", [
    ("batch-size=128 follows-allocation", Asked("gres", 1), 4, 0, True),
    ("batch-size=128", Asked("gres", 1), 4, 0, False),                        # launcher may not follow
    ("micro-batch=32 follows-allocation", Asked("gres", 2), 1, 0, False),     # fixed per-GPU batch
    ("micro-batch=32", Asked("gres", 1), 1, 3, True),                         # one GPU -> a share of it
    ("micro-batch=32", Asked("gres", 2), 2, 0, True),                         # unchanged count
])
def test_resizable(spec_text, asked, gpus, shards, ok) -> None:
    from slurm_liquid.admission.filter import resizable

    assert resizable(parse_comment("liquid: " + spec_text), asked, gpus, shards) is ok


def test_adjust_resizes_a_job_that_follows_the_allocation() -> None:
    d = decision(FOUR)
    assert d.fits and d.gpus > 1                                # precondition
    answer = decide({"gres": "gpu:h100:1", "comment": FOUR}, "", cfg("adjust"))
    assert answer.sets["gres"] == f"gpu:h100:{d.gpus_per_node}" and "adjusted" in answer.says[0]
