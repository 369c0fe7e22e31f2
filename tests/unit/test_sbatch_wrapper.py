"""`slurm-liquid sbatch`: --liquid-KEY flags become one `liquid:` comment; sbatch's own arguments pass untouched."""

from __future__ import annotations

import pytest

from slurm_liquid.admission.sbatch import sbatch_argv
from slurm_liquid.errors import UsageError
from slurm_liquid.jobspec import parse_comment


def comment_of(argv: list[str]) -> str:
    (comment,) = [a for a in argv if a.startswith("--comment=")]
    return comment.removeprefix("--comment=")


def test_liquid_flags_become_the_comment_and_the_rest_keeps_its_order() -> None:
    argv = sbatch_argv(["--liquid-model", "bert-large", "-N", "2", "--liquid-batch-size=64", "--gres=gpu:4",
                        "script.sh", "a", "b"])
    assert argv[0] == "sbatch"
    assert [a for a in argv[1:] if not a.startswith("--comment=")] == ["-N", "2", "--gres=gpu:4", "script.sh", "a", "b"]
    assert comment_of(argv) == "liquid: model=bert-large batch-size=64"
    # the comment is what cli_filter reads back
    assert parse_comment(comment_of(argv)).to_dict() == {"model": "bert-large", "batch-size": 64}


def test_comment_comes_before_the_script() -> None:
    argv = sbatch_argv(["--liquid-model", "x", "--liquid-batch-size=64", "-N", "2", "script.sh", "a", "b"])
    assert argv == ["sbatch", "--comment=liquid: model=x batch-size=64", "-N", "2", "script.sh", "a", "b"]


def test_keys_are_forgiving_and_values_normalised() -> None:
    argv = sbatch_argv(["--liquid-batch_size", "1k", "--liquid-Precision=BF16", "--liquid-model=x", "job.sh"])
    assert comment_of(argv) == "liquid: model=x batch-size=1000 precision=bf16"


@pytest.mark.parametrize("argv, comment", [
    (["--liquid-checkpointing", "-N", "1", "--liquid-model=x", "job.sh"], "liquid: model=x checkpointing=true"),
    (["--liquid-model=x", "--liquid-checkpointing"], "liquid: model=x checkpointing=true"),
    (["--liquid-checkpointing", "no", "--liquid-model=x", "job.sh"], "liquid: model=x checkpointing=false"),
    (["--liquid-checkpointing=off", "--liquid-model=x", "job.sh"], "liquid: model=x checkpointing=false"),
])
def test_a_bare_boolean_flag_means_true(argv: list[str], comment: str) -> None:
    assert comment_of(sbatch_argv(argv)) == comment


# A bare boolean right before the script name takes the script name as its value.
def test_a_bare_boolean_flag_before_the_script() -> None:
    argv = sbatch_argv(["--liquid-model=x", "--liquid-checkpointing", "job.sh"])
    assert argv == ["sbatch", "--comment=liquid: model=x checkpointing=true", "job.sh"]


def test_unknown_key_suggests_a_close_match() -> None:
    with pytest.raises(UsageError, match=r"--liquid-batchsize: unknown key 'batchsize'; did you mean batch-size"):
        sbatch_argv(["--liquid-batchsize", "64", "job.sh"])


@pytest.mark.parametrize("argv, key", [
    (["--liquid-batch-size", "0", "job.sh"], "batch-size"),
    (["--liquid-precision=fp7", "job.sh"], "precision"),
    (["--liquid-min-gpus=8", "--liquid-max-gpus=2", "job.sh"], "min-gpus"),
    (["-N", "1", "--liquid-model"], "--liquid-model: needs a value"),
])
def test_bad_values_name_the_key(argv: list[str], key: str) -> None:
    with pytest.raises(UsageError, match=key):
        sbatch_argv(argv)


@pytest.mark.parametrize("flag", [["--comment", "liquid: precision=bf16"], ["--comment=liquid: precision=bf16"],
                                  ["--comment=LIQUID:precision=bf16"]])
def test_a_liquid_comment_is_merged(flag: list[str]) -> None:
    argv = sbatch_argv([*flag, "--liquid-model", "x", "--liquid-batch-size", "8", "job.sh"])
    assert argv[-1] == "job.sh" and sum(a.startswith("--comment") for a in argv) == 1
    assert parse_comment(comment_of(argv)).to_dict() == {"model": "x", "batch-size": 8, "precision": "bf16"}


@pytest.mark.parametrize("flag", [["--comment", "sweep 42"], ["--comment=sweep 42"]])
def test_a_free_text_comment_rides_along_with_liquid_flags(flag: list[str]) -> None:
    from slurm_liquid.ledger import Record, comment_spec

    argv = sbatch_argv([*flag, "--liquid-model", "x", "job.sh"])
    assert comment_of(argv) == "liquid: model=x || sweep 42"
    assert parse_comment(comment_of(argv)).to_dict() == {"model": "x"}
    assert comment_spec(comment_of(argv)) == "model=x"
    # cli_filter's record keeps the user's text verbatim after the spec
    record = Record.of_comment(comment_of(argv))
    assert record.user == "sweep 42"
    assert Record.parse(record.with_fields(mode="advise").render()).user == "sweep 42"
    # and a `liquid:` comment with text of its own keeps both
    merged = sbatch_argv(["--comment", "liquid: precision=bf16 || run 3", "--liquid-model", "x", "job.sh"])
    assert comment_of(merged) == "liquid: precision=bf16 model=x || run 3"


# The wrapper promises "a typo fails before anything is submitted", but the --comment half is not checked.
@pytest.mark.parametrize("comment", ["liquid: model=y", "liquid: batch-size=0"])
def test_a_merged_comment_that_does_not_parse_is_refused(comment: str) -> None:
    with pytest.raises(UsageError):
        sbatch_argv(["--comment", comment, "--liquid-model", "x", "job.sh"])


@pytest.mark.parametrize("argv", [
    [],
    ["job.sh"],
    ["-N", "2", "--gres=gpu:4", "-J", "name", "--exclusive", "job.sh", "a", "-b"],
    ["--comment=run 3", "job.sh"],
])
def test_without_liquid_flags_the_arguments_pass_unchanged(argv: list[str]) -> None:
    assert sbatch_argv(argv) == ["sbatch", *argv]


def test_arguments_after_the_double_dash_are_untouched() -> None:
    argv = sbatch_argv(["--liquid-model", "x", "-N", "1", "--", "job.sh", "--liquid-model", "y",
                        "--comment", "z", "--liquid-checkpointing"])
    assert argv == ["sbatch", "--comment=liquid: model=x", "-N", "1", "--", "job.sh", "--liquid-model", "y",
                    "--comment", "z", "--liquid-checkpointing"]
    assert sbatch_argv(["--", "job.sh", "--liquid-x"]) == ["sbatch", "--", "job.sh", "--liquid-x"]


# sbatch stops reading options at the script name; the wrapper reads on into the script's arguments.
@pytest.mark.parametrize("argv", [["job.sh", "--comment", "note"], ["job.sh", "--liquid-model", "x"]])
def test_the_scripts_own_arguments_are_untouched(argv: list[str]) -> None:
    assert sbatch_argv(argv) == ["sbatch", *argv]
