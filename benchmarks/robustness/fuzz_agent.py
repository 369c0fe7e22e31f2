"""Hostile inputs for everything the node agent reads: /proc, the devices cgroup, slurmctld's GRES
indices, the Epilog's drop files, its own state file, GPU readings, AdminComments, and whole passes.

    python benchmarks/robustness/fuzz_agent.py --count 5000 [--seed 1] [--case NAME]

`CASES` is a list of (name, make_and_feed): each callable builds one random input from the given
`random.Random` and feeds it to one agent-side parser or function. A clear project error
(LiquidError) is the right answer to garbage and returns normally; any other exception propagates
and counts as a traceback (benchmarks/robustness/fuzz.py runs N inputs of every case). The inputs
are mutations of real shapes (recorded /proc lines, `squeue --json` replies from
tests/fixtures/slurm/, what save() writes) mixed with raw bytes, so they reach the deep paths.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slurm_liquid.agent import procs
from slurm_liquid.agent.alloc import Allocation, Allocations, from_gres_detail, gpus_from_devices_list, gpus_from_epilog
from slurm_liquid.agent.cli import Agent, epilog_note
from slurm_liquid.agent.gpus import GpuProcess, GpuSample, NvmlReader, StandinReader
from slurm_liquid.agent.meter import Meters
from slurm_liquid.agent.recorder import Recorder
from slurm_liquid.config import AgentConfig
from slurm_liquid.errors import LiquidError
from slurm_liquid.ledger import Usage
from slurm_liquid.slurm.cli_backend import CliBackend
from slurm_liquid.slurm.errors import SlurmCommandError, SlurmError
from slurm_liquid.slurm.models import Job

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "slurm"

# ------------------------------------------------------------------ generators

TOKENS = [b"\0", b"=", b":", b"/", b"\n", b" ", b"(", b")", b",", b"-", b"[", b"]", b"job_", b"uid_", b"step_",
          b"slurm", b"slurmstepd.scope", b"system.slice", b"devices", b"SLURM_JOB_ID", b"SLURM_JOB_GPUS",
          b"IDX:", b"gpu", b"shard", b"195", b"\xff", b"\xfe\xfd", "\u0661\u0662".encode(), b"9" * 30,
          b"4294967296", b"0", b"7", b"N/A", b"a *:* rwm", b"c ", b"\t", b"Uid:", b"VmRSS:", b"kB"]
NUMBERS: list[Any] = [0, -1, 1, 7, 2 ** 31, 2 ** 32, 2 ** 63, 2 ** 64, 10 ** 400, 1e308, -1e308, float("nan"),
                      float("inf"), float("-inf"), -0.0, 1e-320, True, False, None, "7", "x", "1e400", [], {}]


def some_bytes(rng: random.Random, size: int = 64) -> bytes:
    """Raw bytes, structural tokens and digits, interleaved."""
    parts = []
    for _ in range(rng.randint(0, size // 4)):
        pick = rng.random()
        if pick < 0.5:
            parts.append(rng.choice(TOKENS))
        elif pick < 0.8:
            parts.append(str(rng.choice([0, 1, 7, 1234, 2 ** 32 - 1, 2 ** 32, 10 ** 20])).encode())
        else:
            parts.append(rng.randbytes(rng.randint(1, 8)))
    return b"".join(parts)


def mutate(rng: random.Random, data: bytes) -> bytes:
    """A valid input with a few random edits (cut, insert, replace, duplicate, flip a byte)."""
    data = bytearray(data)
    for _ in range(rng.randint(0, 4)):
        where = rng.randint(0, len(data))
        kind = rng.randrange(5)
        if kind == 0:
            del data[where:where + rng.randint(1, 16)]
        elif kind == 1:
            data[where:where] = rng.choice(TOKENS)
        elif kind == 2:
            data[where:where + rng.randint(1, 4)] = some_bytes(rng, 16)
        elif kind == 3 and data:
            data[where:where] = data[:rng.randint(1, len(data))]
        elif data:
            data[min(where, len(data) - 1)] ^= 1 << rng.randrange(8)
    return bytes(data)


def text(rng: random.Random, valid: str = "") -> str:
    raw = mutate(rng, valid.encode()) if valid and rng.random() < 0.7 else some_bytes(rng)
    return raw.decode("utf-8", "replace") if rng.random() < 0.5 else raw.decode("latin-1")


def number(rng: random.Random, sane: float = 1000.0) -> Any:
    return rng.choice(NUMBERS) if rng.random() < 0.4 else rng.uniform(0, sane)


def json_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 3 or pick < 0.4:
        return rng.choice(NUMBERS + ["", "gpu01", "gpu:h100:1(IDX:0)", "\x00", "liquid-used/1 by=nvml"])
    if pick < 0.7:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["job_id", "gres_detail", "nodes", "job_resources", "jobs", "errors", "name", "allocation",
            "allocated_nodes", "nodename", "gpus", "meters", "version", "peak_mib", "x"]
    return {rng.choice(keys): json_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def dumps(rng: random.Random, value: Any) -> bytes:
    """JSON as a hostile writer might give it: NaN and Infinity allowed, sometimes cut or nested deep."""
    out = json.dumps(value, allow_nan=True, default=str).encode()
    pick = rng.random()
    if pick < 0.1:
        return b"[" * rng.choice([10, 1000, 100_000]) + b"]" * rng.choice([0, 10])
    if pick < 0.3:
        return mutate(rng, out)
    return out


# ------------------------------------------------------------------ /proc

CGROUPS = ["0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n",
           "12:devices:/slurm/uid_1001/job_7/step_0/task_0\n4:freezer:/slurm/uid_1001/job_7/step_0\n",
           "0::/system.slice/gpu01_slurmstepd.scope/job_77/step_batch/slurm\n",
           "0::/user.slice/user-1001.slice/session-3.scope\n", "0::/\n"]


def stat_line(rng: random.Random, pid: int, ppid: int, comm: str) -> bytes:
    fields = [str(number(rng, 10 ** 6)) if rng.random() < 0.05 else str(v)
              for v in ("S", ppid, pid, pid, 0, -1, 0x400000, 812, 0, 0, 0, rng.randint(0, 10 ** 6), 12, 0, 0, 20)]
    line = f"{pid} ({comm}) " + " ".join(fields) + " 0 1 0 4711 123456 512 18446744073709551615 1 1 0"
    return mutate(rng, line.encode()) if rng.random() < 0.3 else line.encode()


def status_text(rng: random.Random, uid: int) -> bytes:
    line = f"Name:\tpython\nState:\tS (sleeping)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nVmRSS:\t {rng.randint(0, 10 ** 8)} kB\n"
    return mutate(rng, line.encode()) if rng.random() < 0.3 else line.encode()


def environ_bytes(rng: random.Random) -> bytes:
    pairs = [(b"SLURM_JOB_ID", rng.choice([b"7", b"8", b"1234", b"0", b"4294967296", b"9" * 5000, b"-1"])),
             (b"SLURM_STEP_ID", rng.choice([b"0", b"batch", b"x y", b"\xff"])),
             (b"SLURM_JOB_GPUS", some_bytes(rng, 16)), (b"PATH", b"/bin")]
    rng.shuffle(pairs)
    data = b"".join(k + b"=" + v + b"\0" for k, v in pairs)
    return mutate(rng, data) if rng.random() < 0.5 else data


def proc_tree(rng: random.Random) -> dict[int, dict[str, bytes]]:
    """An in-memory /proc of a few processes: job tasks, a slurmstepd, impostors, broken files."""
    files: dict[int, dict[str, bytes]] = {}
    pids = rng.sample(range(2, 60), rng.randint(1, 8))
    stepd = pids[0] if rng.random() < 0.5 else None     # a job's tree under its root-owned slurmstepd
    for pid in pids:
        ppid = stepd if stepd and pid != stepd and rng.random() < 0.8 else rng.choice([1, *pids])
        comm = "slurmstepd" if pid == stepd else rng.choice(["python", "slurmstepd", "my (evil)) job", "\u0661", "x\ny"])
        uid = 0 if pid == stepd else rng.choice([0, 1001, 1002])
        cgroup = rng.choice(CGROUPS[3:] if stepd else CGROUPS).encode()
        title = b"slurmstepd: [7.batch]\0" if pid == stepd else rng.choice(
            [b"slurmstepd: [1234.0+1]\0", b"python\0", some_bytes(rng, 24)])
        entry = {"stat": stat_line(rng, pid, ppid, comm), "status": status_text(rng, uid),
                 "cgroup": mutate(rng, cgroup) if rng.random() < 0.3 else cgroup,
                 "cmdline": mutate(rng, title) if rng.random() < 0.2 else title,
                 "environ": environ_bytes(rng)}
        for name in list(entry):
            if rng.random() < 0.05:
                del entry[name]                         # vanished or unreadable
            elif rng.random() < 0.05:
                entry[name] = some_bytes(rng, 128)      # not what proc(5) says
        files[pid] = entry
    return files


def case_scan(rng: random.Random) -> object:
    found = procs.scan_files(proc_tree(rng))
    for pid, process in found.items():
        if not (isinstance(process, procs.Process) and process.pid == pid and 0 < process.job.job_id <= procs.MAX_JOB_ID):
            raise AssertionError(f"scan gave {process!r}")
    return found


def case_cgroup(rng: random.Random) -> object:
    data = text(rng, rng.choice(CGROUPS))
    return procs.job_from_cgroup(data), procs.devices_cgroup(data)


def case_environ(rng: random.Random) -> object:
    return procs.job_from_environ(environ_bytes(rng) if rng.random() < 0.7 else some_bytes(rng, 256))


def case_stepd_title(rng: random.Random) -> object:
    return procs.job_from_stepd_cmdline(mutate(rng, b"slurmstepd: [1234.batch]\0"))


# ------------------------------------------------------------------ Slurm's and slurmd's views

def case_devices_list(rng: random.Random) -> object:
    lines = ["c 1:3 rwm", "c 195:0 rwm", "c 195:255 rw", "a *:* rwm", "c 195:* rwm", "b 8:* r"]
    valid = "\n".join(rng.choice(lines) for _ in range(rng.randint(0, 6)))
    return gpus_from_devices_list(text(rng, valid))


GRES = ["gpu:h100:2(IDX:0-1)", "shard:4(4/4,0/4,0/4,0/4)", "shard:4(IDX:0)", "gpu:a100:1(IDX:0),gpu:v100:2(IDX:1-2)",
        "gpu(IDX:4-7)", "gpu:1(IDX:N/A)", "gpu:h100:4(S:0)"]


def case_gres_detail(rng: random.Random) -> object:
    try:
        return from_gres_detail(text(rng, rng.choice(GRES)), rng.choice(["", "gpu[01-02]"]))
    except LiquidError:
        return None


_SQUEUE: dict[str, bytes] = {}


def recorded_squeue(version: str) -> bytes:
    if version not in _SQUEUE:
        _SQUEUE[version] = (FIXTURES / version / "squeue.json").read_bytes()
    return _SQUEUE[version]


def squeue_reply(rng: random.Random) -> bytes:
    """A `squeue --json` reply: a recorded one with its jobs' fields replaced by hostile values, or junk."""
    pick = rng.random()
    if pick < 0.15:
        return dumps(rng, json_value(rng))
    doc = json.loads(recorded_squeue(rng.choice(["22.05", "24.11", "26.05"])))
    for job in doc.get("jobs", []):
        if rng.random() < 0.25:
            key = rng.choice(["job_id", "gres_detail", "gres_detail", "nodes", "job_resources", "name"])
            job[key] = rng.choice([json_value(rng), [text(rng, g) for g in rng.sample(GRES, 2)], text(rng, "gpu[01-02]")])
    if rng.random() < 0.1:
        doc["errors"] = [json_value(rng)]
    return dumps(rng, doc)


def case_squeue_gres(rng: random.Random) -> object:
    reply = squeue_reply(rng)

    def runner(argv, *, timeout: float, stdin: str | None = None) -> str:
        if rng.random() < 0.05:
            raise SlurmCommandError(argv, "did not answer within 5 s")
        return reply.decode("utf-8", "replace")

    try:
        return CliBackend(runner=runner).gres_detail(rng.sample(range(1, 12), rng.randint(1, 4)))
    except LiquidError:
        return None


def case_epilog_note(rng: random.Random) -> object:
    note = epilog_note(text(rng, "gpus=0,1 nodes=gpu[01-02]\n"))
    return note, gpus_from_epilog(note.get("gpus", ""))


# ------------------------------------------------------------------ the agent's own state and readings

def saved_state(rng: random.Random) -> bytes:
    meter = {"job_id": 7, "first_seen": 1.0, "last_seen": 9.0, "nodelist": "gpu01", "samples": 3,
             "host_peak_mib": 100.0, "cpu_seconds": 2.0, "shards": 0, "via": "slurmstepd",
             "gpus": {"0": {"peak_mib": 1000.0, "util_sum": 90.0, "util_samples": 2, "shared": False}}}
    for key in rng.sample(sorted(meter), rng.choice([0, 0, 0, 1, 2])):
        meter[key] = json_value(rng) if rng.random() < 0.5 else number(rng)
    if rng.random() < 0.3:
        meter["gpus"] = {rng.choice(["0", "x", "99999", "-1"]): {k: number(rng) for k in ("peak_mib", "util_sum")}}
    state = {"version": rng.choice([1] * 8 + [2, "1", None]), "meters": {rng.choice(["7", "7", "7", "8", "x"]): meter},
             "unrecorded": rng.choice([{"7": meter}, {}, {}, [], json_value(rng)])}
    return dumps(rng, state if rng.random() < 0.9 else json_value(rng))


def new_agent(spool: str, **kwargs: Any) -> Agent:
    class Quiet:
        node = "gpu01"

        def record(self, job_id: int, usage: Usage, nodelist: str = "") -> None:
            usage.render()

    class NoGpus:
        source, problem = "nvml", ""

        def sample(self) -> list[GpuSample]:
            return []

        def close(self) -> None:
            pass

    return Agent(AgentConfig(spool_dir=spool, end_grace_s=1.0), kwargs.pop("reader", NoGpus()), Quiet(), **kwargs)


def case_state_file(rng: random.Random) -> object:
    agent = new_agent("/nonexistent")
    try:
        agent.restore_data(saved_state(rng))
    except LiquidError:
        return None
    snapshot = agent.snapshot()                 # what restored values are used for: usage lines
    agent._records.put(None)
    agent.record_forever()
    return snapshot


def gpu_samples(rng: random.Random, pids: list[int]) -> list[GpuSample]:
    out = []
    for index in rng.sample(range(8), rng.randint(0, 4)):
        processes = tuple(GpuProcess(rng.choice(pids or [1]), number(rng, 80000), number(rng, 80000) if rng.random() < 0.5 else None,
                                     number(rng, 100) if rng.random() < 0.5 else None)
                          for _ in range(rng.randint(0, 3)))
        out.append(GpuSample(index, "NVIDIA H100", f"GPU-{index}", number(rng, 80000), 81559.0,
                             number(rng, 100) if rng.random() < 0.8 else None, processes))
    return out


def allocations(rng: random.Random, jobs: list[int]) -> dict[int, Allocation]:
    return {j: Allocation(tuple(rng.sample(range(8), rng.randint(0, 3))), rng.choice([0, 0, 4]),
                          rng.choice(["", "gpu01", "gpu[01-02]"]), "slurm")
            for j in jobs if rng.random() < 0.7}


def case_meters(rng: random.Random) -> object:
    meters = Meters(100)
    for step in range(rng.randint(1, 4)):
        found = procs.scan_files(proc_tree(rng))
        jobs = sorted({p.job.job_id for p in found.values()})
        meters.update(float(step), found, gpu_samples(rng, list(found)), allocations(rng, jobs))
    return [m.usage("nvml", "gpu01").render() for m in meters.jobs.values()]


def case_agent_pass(rng: random.Random) -> object:
    """Whole passes over hostile /proc, GPU readings, Slurm answers and Epilog files. The pass
    itself never raises; an error it had to count that was not an injected failure is a bug."""
    trees = [proc_tree(rng) for _ in range(3)]
    gpu_failures = 0

    class Reader:
        source, problem = "nvml", ""

        def sample(self) -> list[GpuSample]:
            nonlocal gpu_failures
            if rng.random() < 0.1:
                gpu_failures += 1
                raise RuntimeError("injected: GPU fell off the bus")
            return gpu_samples(rng, rng.sample(range(2, 60), 5))

        def close(self) -> None:
            pass

    def lookup(ids: list[int]) -> dict[int, dict[str, str]]:
        if rng.random() < 0.2:
            raise SlurmError("injected: squeue did not answer")
        return {j: {rng.choice(["gpu01", "gpu02"]): text(rng, rng.choice(GRES))} for j in ids if rng.random() < 0.7}

    with tempfile.TemporaryDirectory() as spool:
        clock = [1000.0]
        agent = new_agent(spool, reader=Reader(), scan=lambda: procs.scan_files(rng.choice(trees)),
                          job_running=lambda job_id: rng.choice([True, False, None]), clock=lambda: clock[0],
                          allocations=Allocations("gpu01", lookup, cgroup_root=Path(spool), clock=lambda: clock[0]))
        agent.ended_dir.mkdir()
        for _ in range(rng.randint(1, 4)):
            for _ in range(rng.randint(0, 2)):
                name = rng.choice(["7", "1234", "77", "0", "x", "9" * 30, ".7"])
                (agent.ended_dir / name).write_bytes(mutate(rng, b"gpus=0,1 nodes=gpu[01-02]\n"))
            agent.step(clock[0])
            clock[0] += rng.choice([1.0, 5.0, 100.0])
        agent._records.put(None)
        agent.record_forever()
    unexpected = {k: v for k, v in agent.errors.items() if k != "gpus"}
    if unexpected or agent.errors.get("gpus", 0) != gpu_failures:
        raise AssertionError(f"the pass counted errors nobody injected: {dict(agent.errors)} {agent.last_error}")
    return agent.snapshot()


def case_standin_reader(rng: random.Random) -> object:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / "dev").mkdir()
        for i in range(rng.randint(0, 3)):
            (root / "dev" / f"nvidia{i}").touch()
        (root / "devices.json").write_bytes(dumps(rng, {"total_mib": number(rng, 90000)}))
        for i in range(rng.randint(0, 4)):
            record = {"pid": rng.choice([1, 2 ** 40, -1, "1", 10 ** 400]), "gpu": rng.choice([0, 1, 2 ** 63, True]),
                      "used_mib": number(rng, 80000), "util": number(rng, 100)}
            (root / f"job-{i}.json").write_bytes(dumps(rng, record))
        return StandinReader(root, root / "dev").sample()


class FakeNvml:
    """pynvml as a hostile or broken driver might answer it."""

    class NVMLError(Exception):
        pass

    NVML_FEATURE_ENABLED = 1

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        for name in ("NotSupported", "NoPermission", "FunctionNotFound", "NotFound"):
            setattr(self, "NVMLError_" + name, type(name, (self.NVMLError,), {}))

    def _maybe(self, value: Any) -> Any:
        if self.rng.random() < 0.1:
            raise self.rng.choice([self.NVMLError, self.NVMLError_NotSupported, self.NVMLError_NotFound])("injected")
        return value

    def nvmlDeviceGetCount(self) -> int:
        return self._maybe(self.rng.randint(0, 3))

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return self._maybe(i)

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:
        return self._maybe(self.rng.choice([handle, 255, 2 ** 31]))

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return self._maybe(type("Memory", (), {"used": self.rng.choice([0, 2 ** 40, 2 ** 64 - 1]), "total": 2 ** 36})())

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return self._maybe(type("Rates", (), {"gpu": self.rng.choice([0, 100, 2 ** 32 - 1])})())

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> Any:
        return self._maybe([type("P", (), {"pid": self.rng.randint(1, 100),
                                           "usedGpuMemory": self.rng.choice([None, 0, 2 ** 64 - 1])})()
                            for _ in range(self.rng.randint(0, 3))])

    def nvmlDeviceGetAccountingMode(self, handle: int) -> int:
        return self._maybe(self.rng.choice([0, 1]))

    def nvmlDeviceGetAccountingStats(self, handle: int, pid: int) -> Any:
        return self._maybe(type("S", (), {"maxMemoryUsage": self.rng.choice([0, 2 ** 64 - 1]), "gpuUtilization": 50})())

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self._maybe(self.rng.choice([b"NVIDIA H100", b"\xff\xfe", "H100"]))

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return self._maybe(self.rng.choice([b"GPU-0", b"\x80", "GPU-1"]))

    def nvmlShutdown(self) -> None:
        self._maybe(None)


def case_nvml_reader(rng: random.Random) -> object:
    reader = NvmlReader(FakeNvml(rng))
    samples = reader.sample()
    reader.close()
    return samples


def case_recorder(rng: random.Random) -> object:
    """Recording against an accounting that answers hostile AdminComments, or fails."""
    comments = ["liquid/1 state=placed", "liquid-used/1 by=nvml gpus=2 peak=31000 util=80 host=9216 cpu=5.8 shared=0 "
                "secs=3611 n=722 nodes=gpu02", ""]

    class Accounting:
        """slurmdbd: keeps what was written, but may fail, lag or hold someone else's text."""
        stored = text(rng, rng.choice(comments))

        def accounting(self, job_ids: Any) -> list[Job]:
            if rng.random() < 0.1:
                raise SlurmError("injected: sacct failed")
            state = rng.choice(["COMPLETED"] * 4 + ["RUNNING", "FAILED"])
            comment = self.stored if rng.random() < 0.8 else text(rng, rng.choice(comments))
            return [Job(7, "x", "alice", state, admin_comment=comment)] if rng.random() < 0.95 else []

        def set_recorded_admin_comment(self, job_id: int, line: str) -> None:
            if rng.random() < 0.2:
                raise SlurmError("injected: sacctmgr failed")
            self.stored = line

    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    recorder = Recorder(Accounting(), "gpu01", order_wait_s=5.0, ended_wait_s=5.0, clock=lambda: now[0], sleep=sleep)
    usage = Usage("nvml", rng.randint(0, 8), rng.randint(0, 80000), rng.choice([None, 50.0]), nodes=("gpu01",))
    try:
        return recorder.record(7, usage, text(rng, rng.choice(["gpu[01-02]", "gpu01", "gpu[00-99999999]"])))
    except LiquidError:
        return None


CASES: list[tuple[str, Callable[[random.Random], object]]] = [
    ("agent.proc.scan", case_scan),
    ("agent.proc.cgroup", case_cgroup),
    ("agent.proc.environ", case_environ),
    ("agent.proc.stepd_title", case_stepd_title),
    ("agent.devices_list", case_devices_list),
    ("agent.gres_detail", case_gres_detail),
    ("agent.squeue_gres_detail", case_squeue_gres),
    ("agent.epilog_note", case_epilog_note),
    ("agent.state_file", case_state_file),
    ("agent.meters", case_meters),
    ("agent.pass", case_agent_pass),
    ("agent.standin_reader", case_standin_reader),
    ("agent.nvml_reader", case_nvml_reader),
    ("agent.recorder", case_recorder),
]


def main(argv: list[str] | None = None) -> int:
    import argparse
    import logging
    import time
    import traceback

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="inputs per case")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case", default=None, help="run only the cases whose name contains this")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)        # the agent logs what it skips; here only tracebacks count
    total = failures = 0
    started = time.monotonic()
    for name, feed in CASES:
        if args.case and args.case not in name:
            continue
        rng = random.Random(f"{args.seed}:{name}")
        bad: dict[str, int] = {}
        case_started = time.monotonic()
        for _ in range(args.count):
            try:
                feed(rng)
            except Exception:  # noqa: BLE001 -- what this benchmark counts
                lines = traceback.format_exc().strip().splitlines()
                bad[lines[-1][:200]] = bad.get(lines[-1][:200], 0) + 1
                if len(bad) == 1 and sum(bad.values()) == 1:
                    print(traceback.format_exc(), file=sys.stderr)
        total += args.count
        failures += sum(bad.values())
        print(f"{name:28} {args.count:7d} inputs  {sum(bad.values()):5d} tracebacks  "
              f"{time.monotonic() - case_started:6.1f} s")
        for message, count in sorted(bad.items(), key=lambda kv: -kv[1]):
            print(f"    {count:5d} x {message}")
    print(f"total: {total} inputs, {failures} tracebacks, {time.monotonic() - started:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
