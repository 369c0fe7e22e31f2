"""A fake Slurm command line for whole-process tests of the daemon: `install()` writes `squeue`,
`scontrol`, `sinfo`, `sacct`, `scancel` and `sacctmgr` executables that answer from a scenario file
(the real commands' output shapes, from tests/fixtures/slurm/24.11) and log every argument list."""

from __future__ import annotations

import base64
import copy
import json
import os
import stat
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "slurm" / "24.11"
COMMANDS = ("squeue", "scontrol", "sinfo", "sacct", "scancel", "sacctmgr")
HEALTHY = 7001
BAD_BYTE = "@@NON-UTF8@@"


def _number(value) -> dict:
    return {"set": True, "infinite": False, "number": value}


def recorded_queue() -> dict:
    return json.loads((FIXTURES / "squeue.json").read_text())


def poisoned_queue() -> dict:
    """The fixture's queue plus one healthy held liquid job and the poison of the findings."""
    doc = json.loads((FIXTURES / "squeue.json").read_text())
    base = next(j for j in doc["jobs"] if j["job_id"] == 7)
    now = int(time.time())

    def liquid(job_id: int, **changes) -> dict:
        job = copy.deepcopy(base)
        job.update(job_id=job_id, name=f"job{job_id}", hold=False, priority=_number(1000), state_reason="BeginTime",
                   comment={"job": "liquid/1 mode=adjust | model=resnet50 batch-size=32", "administrator": "liquid/1 state=held",
                            "system": ""} if isinstance(base.get("comment"), dict) else "liquid/1 mode=adjust",
                   admin_comment="liquid/1 state=held", submit_time=_number(now - 5), eligible_time=_number(now + 50))
        job.update(changes)
        return job

    poison = [
        liquid(7002, eligible_time=_number(99999999999999)),            # --begin=uts99999999999999
        liquid(7003, name=f"bad{BAD_BYTE}name"),                         # non-UTF-8 in the name
        liquid(7004, comment={"job": f"liquid/1 | model=x{BAD_BYTE}", "administrator": "", "system": ""}),
        liquid(7005, priority=_number(int("9" * 400))),                  # a 400-digit number
        liquid(7006, cpus=_number(float("nan"))),
        liquid(7007, tres_req_str="cpu=1,mem=1000M,node=1,gres/gpu=99999999999999999999"),
        liquid(7008, admin_comment="liquid/1 state=placed placed=gpu[0-99999999]:4 at=99999999999"),
        liquid(7009, nodes={"a": {"b": [1, 2, {"c": None}]}}, job_state=[42]),
        liquid(7010, comment={"job": "liquid: elastic=4:4 signal=USR1@86400", "administrator": "liquid/1 state=held",
                              "system": ""}),
    ]
    doc["jobs"] = [j for j in doc["jobs"] if j["job_id"] != 7] + [liquid(HEALTHY)] + poison
    return doc


def with_elastic_running(doc: dict, grace_s: int) -> dict:
    """Job 3 (running on gpu[01-02], 8 GPUs) as an elastic job the daemon placed, range 1:1: any
    policy shrinks it, so a resize starts and waits `grace_s` for a checkpoint that never comes."""
    doc = copy.deepcopy(doc)
    for job in doc["jobs"]:
        if job["job_id"] == 3:
            tag = f"liquid/1 state=placed placed=gpu[01-02]:4 at=1 elastic=1:1 sig=USR1 grace={grace_s}"
            if isinstance(job.get("comment"), dict):
                job["comment"]["administrator"] = tag
            job["admin_comment"] = tag
    return doc


def install(bin_dir: Path, calls: Path, squeue: dict) -> Path:
    """Write the fake commands into `bin_dir` (put it first on PATH); returns `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(squeue).replace(BAD_BYTE, "\\u0000").encode()   # placeholder, bytes below
    raw = raw.replace(b"\\u0000", b"\xff\xfe")
    scenario = bin_dir / "scenario.json"
    scenario.write_text(json.dumps({
        "squeue": base64.b64encode(raw).decode(),
        "nodes": (FIXTURES / "scontrol_nodes.json").read_text(),
        "topology": (FIXTURES / "topology.txt").read_text(),
        "partitions": (FIXTURES / "partitions.txt").read_text(),
        "version": (FIXTURES / "version.txt").read_text(),
    }))
    for name in COMMANDS:
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                        f"from tests.unit.fakeslurm import main\nmain({name!r}, {str(scenario)!r}, {str(calls)!r})\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def calls(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main(command: str, scenario_path: str, calls_path: str) -> None:
    argv = [command, *sys.argv[1:]]
    with open(calls_path, "a") as log:
        log.write(json.dumps(argv) + "\n")
    scenario = json.loads(Path(scenario_path).read_text())
    out = sys.stdout.buffer
    if "--version" in argv:
        out.write(scenario["version"].encode())
    elif command == "squeue":
        out.write(base64.b64decode(scenario["squeue"]))
    elif argv[1:4] == ["show", "nodes", "--json"] or command == "sinfo":
        out.write(scenario["nodes"].encode())
    elif argv[1:3] == ["show", "topology"]:
        out.write(scenario["topology"].encode())
    elif argv[1:3] == ["show", "partition"]:
        out.write(scenario["partitions"].encode())
    elif argv[1:3] == ["write", "batch_script"]:
        out.write(b"#!/bin/sh\n#LIQUID model=resnet50 batch-size=32\npython train.py '" + b"x " * 100000)
    elif command == "sacct":
        out.write(json.dumps({"jobs": [], "meta": {}, "errors": [], "warnings": []}).encode())
    os._exit(0)
