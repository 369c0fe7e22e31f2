"""The submit-time helper behind etc/slurm/cli_filter.lua: what to tell the user and what to change.

cli_filter.lua runs in the user's own `sbatch`. It writes the options that matter into a private
temporary file (one `key=value` per line), runs `slurm-liquid submit-filter --options FILE` under a
hard time limit, and applies the answer, one instruction per line:

    say <text>             print one line to the user
    set <option> <value>   change an sbatch option (only those in SETTABLE; the Lua checks again)
    end                    the answer is complete (the Lua ignores an answer without it)

Nothing here may make a submission fail: every error becomes a `say` line and the job goes as asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from slurm_liquid.config import Config
from slurm_liquid.errors import LiquidError
from slurm_liquid.jobspec import JobSpec, parse_comment, parse_script
from slurm_liquid.ledger import VERSION, Record, comment_spec, opted_in

# Options cli_filter.lua passes in, and those the helper may set.
OPTIONS = ("script", "gres", "gpus", "gpus-per-node", "nodes", "mem", "mem-per-gpu", "mem-per-cpu",
           "cpus-per-gpu", "cpus-per-task", "comment")
SETTABLE = ("gres", "gpus", "gpus-per-node", "nodes", "mem", "cpus-per-gpu", "comment")
MAX_SCRIPT_BYTES = 1 << 20


@dataclass(frozen=True)
class Asked:
    """The GPU request as sbatch options say it: which option, how many, of which type."""

    option: str | None            # gres, gpus, gpus-per-node, or None (no GPUs asked)
    gpus: int = 0                 # per node for gres/gpus-per-node, per job for gpus
    gpu_type: str | None = None
    nodes: int = 1
    shards: int = 0

    @property
    def total(self) -> int:
        return self.gpus if self.option == "gpus" else self.gpus * self.nodes

    @classmethod
    def of_job(cls, job) -> "Asked":
        """The request of a job Slurm already holds (`slurm_liquid.slurm.Job`)."""
        nodes = max(job.num_nodes, 1)
        if job.gpus_per_node:
            return cls("gres", job.gpus_per_node, job.gpu_type, nodes, job.shards)
        return cls("gpus" if job.gpus else None, job.gpus, job.gpu_type, nodes, job.shards)

    def describe(self) -> str:
        if self.shards:
            return f"shard:{self.shards}"
        if not self.option:
            return "none"
        kind = f"gpu:{self.gpu_type}" if self.gpu_type else "gpu"
        return f"{kind}:{self.total}" + (f"/{self.nodes}n" if self.nodes > 1 else "")


@dataclass
class Answer:
    """What the helper tells cli_filter.lua."""

    sets: dict[str, str] = field(default_factory=dict)
    says: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"say {' '.join(s.split())}" for s in self.says]
        out += [f"set {k} {' '.join(v.split())}" for k, v in self.sets.items() if k in SETTABLE]
        return out + ["end"]


def read_options(path: str | Path) -> dict[str, str]:
    options = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key in OPTIONS and value not in ("", "nil"):
            options[key] = value
    return options


def _count(text: str) -> int:
    digits = text.split("(")[0]
    return int(digits) if digits.isdigit() else 1


def parse_asked(options: Mapping[str, str]) -> Asked:
    """Read `--gres=gpu:h100:2`, `--gpus=[type:]N`, `--gpus-per-node=N` and `--nodes=N[-M]`."""
    nodes_text = options.get("nodes", "1").split("-")[0]
    nodes = int(nodes_text) if nodes_text.isdigit() and int(nodes_text) > 0 else 1
    shards = 0
    for part in options.get("gres", "").split(","):
        fields = part.strip().replace("gres/", "").replace("gres:", "").split(":")
        if fields[0] == "gpu":
            return Asked("gres", _count(fields[-1]) if len(fields) > 1 else 1,
                         fields[1] if len(fields) == 3 else None, nodes)
        if fields[0] == "shard":
            shards = _count(fields[-1]) if len(fields) > 1 else 1
    for option in ("gpus", "gpus-per-node"):
        value = options.get(option, "")
        fields = value.split(":")
        if value and fields[-1].isdigit() and int(fields[-1]) > 0:
            return Asked(option, int(fields[-1]), fields[0] if len(fields) == 2 else None, nodes)
    return Asked(None, nodes=nodes, shards=shards)


def spec_from(script: str, comment: str) -> JobSpec:
    # The command-line --comment overrides an #SBATCH --comment, as sbatch itself does.
    from_comment = parse_comment(comment)
    return from_comment.merged(parse_script(script)) if from_comment.to_dict() else parse_script(script)


def field_of(error: Exception) -> str:
    """The job-spec key an error message names ('line 3: batch-size: ...' -> 'batch-size')."""
    from slurm_liquid.jobspec import KEYS

    for part in str(error).split(":"):
        word = part.strip().split(" ")[-1].strip("'\"")
        if part.strip() in KEYS or word in KEYS:
            return part.strip() if part.strip() in KEYS else word
    return "spec"


def spec_text(spec: JobSpec) -> str:
    """The spec for the record, without what `asked=` already says (the GPUs asked of Slurm)."""
    said = {k: v for k, v in spec.to_dict().items() if k not in ("gpus", "gpu-type")}
    return JobSpec.from_values({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in said.items()}
                               ).to_directive().removeprefix("#LIQUID ") if said else ""


def gpu_request(asked: Asked, gpus: int, nodes: int, per_node: int, shards: int,
                gpu_type: str | None) -> dict[str, str]:
    """The sbatch options that ask for the estimate, said with the option the user used."""
    kind = f"{gpu_type}:" if gpu_type else ""
    if shards:
        sets = {"gres": f"shard:{shards}"}
        if asked.option in ("gpus", "gpus-per-node"):
            sets[asked.option] = "0"   # a --gpus option cannot be unset from cli_filter, only zeroed
        return sets | {"nodes": "1"}
    if asked.option == "gpus":
        return {"gpus": f"{kind}{gpus}", "nodes": str(nodes)}
    if asked.option == "gpus-per-node":
        return {"gpus-per-node": f"{kind}{per_node}", "nodes": str(nodes)}
    return {"gres": f"gpu:{kind}{per_node}", "nodes": str(nodes)}


def decide(options: Mapping[str, str], script: str, config: Config) -> Answer:
    """The whole decision for one submission (pure: no Slurm commands, no clocks)."""
    comment = options.get("comment", "")
    answer = Answer()
    mode = config.submit.mode
    if mode == "off" or comment.startswith(VERSION) or not opted_in(script, comment):
        return answer
    asked = parse_asked(options)
    raw = comment_spec(comment) or ""
    # The user's own Comment text stays in the record (Record.of_comment), whatever the mode.
    record = replace(Record.of_comment(comment), spec=raw).with_fields(mode=mode, asked=asked.describe())
    try:
        spec = spec_from(script, comment)
        record = replace(record, spec=spec_text(spec))
        from slurm_liquid.estimate.api import estimate  # after the cheap checks above

        est = estimate(spec, gpu_type=asked.gpu_type, **config.estimate.kwargs())
    except LiquidError as exc:
        answer.says.append(f"slurm-liquid: {exc}; the job is submitted as asked")
        answer.sets["comment"] = record.with_fields(err=field_of(exc)).render()
        return answer
    d = est.decision
    record = record.with_fields(est=est.summary())
    want = gpu_request(asked, d.gpus, d.nodes, d.gpus_per_node, d.shards,
                       asked.gpu_type if asked.option else None)
    proposal = " ".join(f"--{k}={v}" for k, v in want.items()
                        if v != "0" and not (k == "nodes" and v == "1" and asked.nodes == 1))
    # Never ask for more nodes than the cluster has (Slurm would refuse the job outright).
    room = max(asked.nodes, est.table_nodes or asked.nodes)
    same = (asked.shards == d.shards) if d.shards else (not asked.shards and asked.total == d.gpus
                                                        and asked.nodes == d.nodes)
    if not d.fits:
        answer.says.append(f"slurm-liquid: {est.explanation()}; the job is submitted as asked")
    elif d.nodes > room:
        answer.says.append(f"slurm-liquid: advice: {proposal} ({est.explanation()}), more nodes than "
                           f"{'the cluster has' if est.table_nodes else 'asked'}; the job is submitted as asked")
    elif same:
        answer.says.append(f"slurm-liquid: {asked.describe()} is right for this job ({est.explanation()})")
    elif mode == "adjust" and not resizable(spec, asked, d.gpus, d.shards):
        answer.says.append(f"slurm-liquid: advice: {proposal} instead of {asked.describe()}: {est.explanation()}; "
                           "not adjusted: the script fixes its per-GPU batch or its launcher's process count "
                           "(add #LIQUID follows-allocation with the global batch-size to let it be resized)")
    elif mode == "adjust":
        answer.sets.update(want)
        if not any(options.get(k) for k in ("mem", "mem-per-gpu", "mem-per-cpu")):
            answer.sets["mem"] = f"{d.host_mem_mib_per_gpu * (1 if d.shards else d.gpus_per_node)}M"
        if not any(options.get(k, "0") not in ("0", "") for k in ("cpus-per-gpu", "cpus-per-task")) and not d.shards:
            answer.sets["cpus-per-gpu"] = str(d.cpus_per_gpu)
        record = record.with_fields(set=want.get("gres") or want.get("gpus") or want.get("gpus-per-node"))
        answer.says.append(f"slurm-liquid: adjusted {asked.describe()} -> {proposal}: {est.explanation()}")
    else:
        answer.says.append(f"slurm-liquid: advice: {proposal} instead of {asked.describe()}: {est.explanation()}")
    answer.sets["comment"] = record.render()
    return answer


def resizable(spec: JobSpec, asked: Asked, gpus: int, shards: int) -> bool:
    """May adjust mode change this job's GPU count? Only when the spec says the global batch is fixed
    (batch-size, no micro-batch) and the launcher follows the allocation (follows-allocation): a
    script that fixes its per-GPU batch gains no memory from more GPUs, and `torchrun
    --nproc_per_node 2` breaks on one. A one-GPU job moved to a share of a GPU keeps its process."""
    if shards and asked.total <= 1:
        return True
    if asked.total == gpus and not shards:
        return True
    return bool(spec.follows_allocation and spec.batch_size and not spec.micro_batch)


def read_script(path: str | None) -> str:
    if not path:
        return ""
    with open(path, "rb") as handle:
        return handle.read(MAX_SCRIPT_BYTES).decode("utf-8", errors="replace")


# --- `slurm-liquid submit-filter` --------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("--options", required=True, metavar="FILE",
                        help="sbatch options written by cli_filter.lua, one key=value per line")
    parser.add_argument("--config", default=None, help="liquid.toml (default: $SLURM_LIQUID_CONFIG or /etc/slurm/liquid.toml)")


def run(args) -> int:
    """Always exit 0 with instructions: a failure here must never stop a submission."""
    import logging
    import sys

    from slurm_liquid import config as config_module

    try:
        options = read_options(args.options)
        answer = decide(options, read_script(options.get("script")), config_module.load(args.config))
    except (LiquidError, OSError) as exc:
        answer = Answer(says=[f"slurm-liquid: {exc}; the job is submitted as asked"])
    except Exception as exc:  # noqa: BLE001 -- fail open, but say why
        logging.getLogger(__name__).debug("submit-filter failed", exc_info=True)
        answer = Answer(says=[f"slurm-liquid: internal error ({type(exc).__name__}: {exc}); "
                              "the job is submitted as asked"])
    sys.stdout.write("".join(line + "\n" for line in answer.lines()))
    return 0
