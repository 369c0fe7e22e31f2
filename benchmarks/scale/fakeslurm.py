"""A Slurm that answers instantly from generated documents, behind the daemon's real CLI backend.

`client(scenario)` is a `CliBackend` (slurm_liquid/slurm/cli_backend.py) whose command runner hands
back the scenario's texts instead of running `squeue`/`scontrol`: everything the daemon does with an
answer (JSON decode, slurm/parse.py, the models) runs as in production, and only the time Slurm takes
to answer is left out. Writes (`scontrol update`, `release`, `scancel --signal`, ...) are recorded as
argument lists and as (job id, fields) pairs, never applied: every pass sees the same cluster.
"""

from __future__ import annotations

import json
from typing import Sequence

from slurm_liquid.slurm.cli_backend import CliBackend
from slurm_liquid.slurm.errors import SlurmCommandError

try:
    from generate import Scenario
except ImportError:  # imported as benchmarks.scale.fakeslurm
    from benchmarks.scale.generate import Scenario

WRITES = {"update", "release", "hold", "requeuehold"}


class RecordedSlurm:
    """A `CommandRunner`: reads answered from `scenario`, writes recorded in `calls` / `updates`."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.calls: list[list[str]] = []
        self.updates: list[tuple[int, dict[str, str]]] = []     # scontrol update JobId=N K=V ...
        self.actions: list[tuple[str, int]] = []                # (release | hold | requeuehold | signal, job id)

    def __call__(self, argv: Sequence[str], *, timeout: float, stdin: str | None = None) -> str:
        argv = list(argv)
        self.calls.append(argv)
        command, args = argv[0], argv[1:]
        if "--version" in args:
            return self.scenario.version
        if command == "squeue":
            ids = next((a.split("=", 1)[1] for a in args if a.startswith("--jobs=")), None)
            if ids is None:
                return self.scenario.squeue_text
            wanted = {int(i) for i in ids.split(",")}
            jobs = [j for j in self.scenario.squeue["jobs"] if j["job_id"] in wanted]
            if not jobs:
                raise SlurmCommandError(argv, "failed with exit code 1", 1, "slurm_load_jobs error: Invalid job id specified")
            return json.dumps(dict(self.scenario.squeue, jobs=jobs))
        if command == "scontrol" and args[:3] == ["show", "nodes", "--json"]:
            return self.scenario.nodes_text
        if command == "scontrol" and args[:2] == ["show", "topology"]:
            return self.scenario.scontrol_topology
        if command == "scontrol" and args[:2] == ["show", "partition"]:
            return self.scenario.partitions
        if command == "scontrol" and args[:2] == ["write", "batch_script"]:
            return "#!/bin/sh\n#LIQUID model=resnet50 batch-size=32\nsrun python train.py\n"
        if command == "scontrol" and args and args[0] == "update":   # JobId=N or JobId=A,B,...
            for job_id in args[1].split("=", 1)[1].split(","):
                self.updates.append((int(job_id), dict(a.split("=", 1) for a in args[2:])))
            return ""
        if command == "scontrol" and args and args[0] in WRITES:
            self.actions.append((args[0], int(args[-1])))
            return ""
        if command == "scancel":
            self.actions.append(("signal" if any(a.startswith("--signal=") for a in args) else "cancel", int(args[-1])))
            return ""
        if command == "sacct":
            return json.dumps({"jobs": [], "meta": self.scenario.squeue["meta"], "errors": [], "warnings": []})
        raise SlurmCommandError(argv, "the benchmark's Slurm does not know this command", 1, "")

    def of(self, job_id: int) -> list[dict[str, str]]:
        return [fields for jid, fields in self.updates if jid == job_id]


def client(scenario: Scenario) -> tuple[CliBackend, RecordedSlurm]:
    runner = RecordedSlurm(scenario)
    return CliBackend(runner=runner, timeout_s=10.0), runner
