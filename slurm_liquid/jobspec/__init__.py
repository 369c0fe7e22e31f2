"""What a DL job says about itself: the one parser for every way a job can say it.

Sources, strongest first:

1. flags of `slurm-liquid estimate` (or a wrapper) -- explicit, override everything below;
2. `#LIQUID key=value ...` lines in the batch script and a `liquid: key=value ...` prefix in the
   Slurm `--comment` -- explicit; two explicit values that disagree are an error naming the field;
3. `#SBATCH --gres=gpu:N` / `--gpus=N` / `--nodes` / `--comment=...` lines -- what the job asked Slurm for;
4. the training command line in the script (`python train.py --arch resnet50 --bs 64 --fp16`,
   `torchrun --nproc_per_node 8 ...`) -- inferred, fills only the gaps; a value that does not parse
   there is skipped with a note;
5. launch config files the command names (DeepSpeed JSON, accelerate YAML, training-argument
   files), read only when the caller runs as the user and passes a reader (jobspec.launch).

One vocabulary everywhere: a directive key is the `slurm-liquid estimate` flag without its dashes
(`#LIQUID batch-size=64` == `--batch-size 64` == `--batch_size 64`); `_` and `-` are the same in keys.

Rooms: values (parsers, vocabularies), spec (the keys, declared once as JobSpec fields), directives
(#LIQUID, comments), command (training command lines), launch (config files), script (batch scripts).

Public API: `parse_script(text[, read]) -> JobSpec`, `parse_comment(text) -> JobSpec`,
`parse_directives(text) -> JobSpec`, `JobSpec.from_args(namespace)`, `JobSpec.merged(...)`,
`add_arguments(parser)` (the job-spec flags), `JobSpec.to_directive()`, `source_kind(where)`.
"""

from slurm_liquid.jobspec.directives import parse_comment, parse_directives
from slurm_liquid.jobspec.launch import UserFiles
from slurm_liquid.jobspec.script import parse_script
from slurm_liquid.jobspec.spec import KEY_ALIASES, KEYS, JobSpec, Key, add_arguments, canonical_key
from slurm_liquid.jobspec.values import (
    ADAPTERS, ATTENTIONS, FAMILIES, MODES, OFFLOADS, OPTIMIZERS, PRECISIONS, SHARDINGS)


def source_kind(where: str) -> str:
    """What kind of source a value's `where` is: flag, directive, sbatch, script flag, config file,
    default."""
    if not where:
        return "default"
    if where.startswith("config file"):
        return "config file"
    if "training command" in where:
        return "script flag"
    if "#SBATCH --comment" in where or where == "--comment":
        return "directive"                      # a `liquid:` comment says what #LIQUID lines say
    if "#SBATCH" in where:
        return "sbatch"
    return "directive" if where.startswith("line ") else "flag"


__all__ = ["ADAPTERS", "ATTENTIONS", "FAMILIES", "KEYS", "KEY_ALIASES", "JobSpec", "Key", "MODES",
           "OFFLOADS", "OPTIMIZERS", "PRECISIONS", "SHARDINGS", "UserFiles", "add_arguments",
           "canonical_key", "parse_comment", "parse_directives", "parse_script", "source_kind"]
