"""A batch script: `#LIQUID` lines and a `liquid:` comment (explicit), `#SBATCH` GPU requests, the
training command's flags (inferred, gaps only) and, when the caller runs as the user and hands a
`Reader`, the launch config files that command names (weakest: they fill what the command leaves;
DeepSpeed's "auto" values come from the command)."""

from __future__ import annotations

import re
import shlex
from typing import Iterable

from slurm_liquid.errors import UsageError
from slurm_liquid.jobspec.command import training_values
from slurm_liquid.jobspec.directives import (
    MAX_DIRECTIVE_LINES, _bounded_lines, _comment_into, _Layer, _pairs, _split)
from slurm_liquid.jobspec.launch import MAX_CONFIGS, Reader, config_pairs
from slurm_liquid.jobspec.spec import JobSpec

# Lines worth splitting for training flags: a cheap look first (shlex is slow), and only so many.
_LAUNCHER_WORD = re.compile(r"python|torchrun|deepspeed|accelerate|horovodrun|mpirun|srun|lightning|"
                            r"composer|llamafactory-cli|axolotl|tune|vllm|\.py\b")
MAX_COMMAND_LINES = 64
_DISTRIBUTED = re.compile(r"(^|[\s/])(torchrun|deepspeed|accelerate|srun|mpirun|horovodrun|tune|llamafactory-cli|"
                          r"axolotl|composer|lightning)\s|torch\.distributed\.(run|launch)")
_LAUNCHERS = re.compile(r"(^|/)(python[0-9.]*|torchrun|deepspeed|accelerate|horovodrun|"
                        r"mpirun|srun|lightning|composer|llamafactory-cli|axolotl|tune|vllm)$")


def _gres_gpus(text: str) -> int | None:
    """GPU count of `gpu:4`, `gpu:a100:4`, `gres/gpu:2`, `4` (for --gpus)."""
    for part in text.split(","):
        fields = part.strip().replace("gres/", "").split(":")
        if fields[0] in ("gpu",) or fields[0].isdigit():
            last = fields[-1].split("(")[0]
            if last.isdigit():
                return int(last)
            if len(fields) <= 2:
                return 1
    return None


def parse_script(text: str, read: Reader | None = None) -> JobSpec:
    """A batch script: `#LIQUID` lines and a `liquid:` comment (explicit), then `#SBATCH` GPU
    requests, the training command's flags and (with `read`) its config files (inferred, gaps only)."""
    explicit, sbatch, inferred = _Layer(strict=True), _Layer(strict=False), _Layer(strict=False)
    plain = _Layer(strict=False)   # `python x.py` lines without a distributed launcher: data prep, eval, ...
    configs: list[tuple[str, str]] = []
    in_header = True
    directives = commands = 0
    nodes: list[int] = []
    per_node: list[tuple[int, str]] = []
    for number, line in _bounded_lines(text, inferred.notes):
        body = line.strip()
        where = f"line {number}"
        if body.upper().startswith("#LIQUID"):
            directives += 1
            if directives > MAX_DIRECTIVE_LINES:
                raise UsageError(f"{where}: more than {MAX_DIRECTIVE_LINES} #LIQUID lines")
            for key, value in _pairs(_split(body[len("#LIQUID"):], where), where):
                explicit.add(key, value, where)
        elif body.startswith("#SBATCH") and in_header:
            _sbatch_into(explicit, sbatch, body[len("#SBATCH"):], where, nodes, per_node)
        elif body and not body.startswith("#"):
            in_header = False  # sbatch stops reading #SBATCH at the first command
            if _LAUNCHER_WORD.search(body):
                commands += 1
                if commands == MAX_COMMAND_LINES + 1:
                    inferred.notes.append(f"read the training command of the first {MAX_COMMAND_LINES} "
                                          "launcher lines only")
                if commands <= MAX_COMMAND_LINES:
                    layer = inferred if _DISTRIBUTED.search(body) else plain
                    configs += [(path, where) for path in _command_into(layer, body, where)]
    for count, where in per_node[:1]:
        # --gres and --gpus-per-node count GPUs per node: times the nodes the job asks for
        sbatch.add("gpus", count * (nodes[0] if nodes else 1), where)
    # a distributed launcher's line is the training; plain python lines fill what it leaves
    spec = explicit.spec().merged(sbatch.spec(), inferred.spec(), plain.spec())
    if configs and read is None:    # (a training script is looked into only for Lightning literals)
        return spec.merged(JobSpec(notes=tuple(f"config {p} ({w}) not read here" for p, w in configs
                                               if not p.endswith(".py"))))
    if configs:
        spec = spec.merged(_configs(configs, read))
    return spec


def _configs(named: list[tuple[str, str]], read: Reader) -> JobSpec:
    layer = _Layer(strict=False)
    queue = list(dict.fromkeys(named))
    seen: set[str] = set()
    while queue and len(seen) < MAX_CONFIGS:
        path, where = queue.pop(0)
        got = read(path)
        if got is None:
            if not path.endswith(".py"):
                layer.notes.append(f"config {path} ({where}): cannot read it (or over 1 MiB): not used")
            continue
        resolved, text = got
        if resolved in seen:
            continue
        seen.add(resolved)
        pairs, refs, notes = config_pairs(resolved, text)
        layer.notes.extend(notes)
        for key, value in pairs:
            layer.add(key, value, f"config file {resolved} (named on {where})")
        queue += [(ref, f"{resolved}") for ref in refs]
    return layer.spec()


def _sbatch_into(explicit: _Layer, sbatch: _Layer, options: str, where: str, nodes: list[int],
                 per_node: list[tuple[int, str]]) -> None:
    try:
        tokens = shlex.split(options, comments=True)
    except ValueError:
        return
    for flag, value in _command_options(tokens):
        if flag == "comment":
            _comment_into(explicit, value, f"{where} (#SBATCH --comment)")
        elif flag in ("nodes", "N"):
            low = value.split("-")[0].split(":")[0]
            if low.isdigit() and int(low) > 0:
                nodes.append(int(low))
        elif flag in ("gres", "gpus", "gpus-per-node", "G"):
            fields = value.split(":")
            if flag == "gres":
                count = _gres_gpus(value)
                gpu_type = fields[1] if len(fields) == 3 else None
            else:  # --gpus=[type:]count
                count = int(fields[-1]) if fields[-1].isdigit() else None
                gpu_type = fields[0] if len(fields) == 2 else None
            if count and flag in ("gres", "gpus-per-node"):
                per_node.append((count, f"{where} (#SBATCH --{flag})"))
            elif count:
                sbatch.add("gpus", count, f"{where} (#SBATCH --{flag})")
            if gpu_type:
                sbatch.add("gpu-type", gpu_type, f"{where} (#SBATCH --{flag})")


def _command_options(tokens: list[str]) -> Iterable[tuple[str, str]]:
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("--") and "=" in token:
            name, _, value = token[2:].partition("=")
            yield name, value
        elif token.startswith("-") and i < len(tokens):
            yield token.lstrip("-"), tokens[i]
            i += 1


def _command_into(layer: _Layer, line: str, where: str) -> list[str]:
    """Adds the command's values to `layer`; returns the config files it names."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:
        tokens = line.split()
    if not any(_LAUNCHERS.search(t) or t.endswith(".py") for t in tokens):
        return []
    pairs, configs, notes = training_values(tokens)
    layer.notes.extend(f"{note} ({where})" for note in notes)
    for key, value in pairs:
        layer.add(key, value, f"{where} (training command)")
    return configs
