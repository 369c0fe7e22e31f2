"""Property tests: nothing the agent reads can make it raise anything but a skip with a reason.

What it reads is /proc (any process's environ, cmdline and name are its owner's to choose), the
Epilog's drop files, its own state file, Slurm's replies and GPU readings. Every parser either
returns something well-formed or raises the project's error (LiquidError); a whole pass never
raises and counts nothing it was not given. benchmarks/robustness/fuzz_agent.py runs the same
targets with many more inputs and prints the count.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_liquid.agent import procs
from slurm_liquid.agent.alloc import Allocation, Allocations, from_gres_detail, gpus_from_devices_list, gpus_from_epilog
from slurm_liquid.agent.cli import Agent, epilog_note
from slurm_liquid.agent.gpus import GpuProcess, GpuSample
from slurm_liquid.agent.meter import Meters
from slurm_liquid.config import AgentConfig
from slurm_liquid.errors import LiquidError
from slurm_liquid.slurm import CliBackend, SlurmError, parse

FUZZ = Path(__file__).resolve().parents[2] / "benchmarks" / "robustness" / "fuzz_agent.py"


def _load_fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_agent", FUZZ)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_agent", module)
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()

# /proc files: mostly-valid shapes with hostile bytes spliced in, and raw bytes
valid_cgroup = st.sampled_from(fuzz.CGROUPS).map(str.encode)
proc_bytes = st.one_of(st.binary(max_size=300), valid_cgroup,
                       st.tuples(valid_cgroup, st.binary(max_size=20), st.integers(0, 80)).map(
                           lambda t: t[0][:t[2]] + t[1] + t[0][t[2]:]))
proc_entry = st.fixed_dictionaries({}, optional={
    "stat": st.one_of(st.binary(max_size=300), st.builds(
        lambda pid, ppid, comm, flags: f"{pid} ({comm}) S {ppid} 1 1 0 -1 {flags} 0 0 0 0 5 5 0 0".encode(),
        st.integers(-2, 2 ** 70), st.integers(-2, 2 ** 70), st.text(max_size=20), st.integers(0, 2 ** 64))),
    "status": st.one_of(st.binary(max_size=200), st.builds(
        lambda uid, rss: f"Name:\tx\nUid:\t{uid}\t0\t0\t0\nVmRSS:\t{rss} kB\n".encode(),
        st.one_of(st.integers(-1, 2 ** 40), st.text(max_size=5)), st.one_of(st.integers(-1, 2 ** 70), st.text(max_size=5)))),
    "cgroup": proc_bytes,
    "cmdline": st.one_of(st.binary(max_size=60), st.builds(lambda j: f"slurmstepd: [{j}.batch]\0".encode(), st.text(max_size=30))),
    "environ": st.one_of(st.binary(max_size=300), st.builds(
        lambda job, gpus: b"SLURM_JOB_ID=" + job + b"\0SLURM_JOB_GPUS=" + gpus + b"\0",
        st.one_of(st.binary(max_size=12), st.just(b"9" * 5000), st.integers(0, 2 ** 64).map(lambda n: str(n).encode())),
        st.binary(max_size=20))),
})
proc_trees = st.dictionaries(st.integers(1, 40), proc_entry, max_size=8)


@given(proc_trees)
def test_scan_of_any_proc_contents_gives_well_formed_processes(files) -> None:
    for pid, found in procs.scan_files(files).items():
        assert found.pid == pid and 0 < found.job.job_id <= procs.MAX_JOB_ID and found.rss_kib >= 0
        assert found.job.via in ("cgroup-v1", "cgroup-v2", "slurmstepd", "environ")


@given(st.text(), st.binary())
def test_single_proc_parsers_never_raise(text: str, data: bytes) -> None:
    procs.job_from_cgroup(text), procs.devices_cgroup(text)
    procs.job_from_environ(data), procs.job_from_stepd_cmdline(data)


@given(st.text(max_size=300))
def test_devices_lists_and_epilog_notes_never_raise(text: str) -> None:
    gpus = gpus_from_devices_list(text)
    assert gpus is None or all(0 <= g <= 253 for g in gpus)
    note = epilog_note(text)
    assert set(note) <= {"gpus", "nodes"}
    assert all(0 <= g <= parse.MAX_DEVICE_INDEX for g in gpus_from_epilog(note.get("gpus", text)))


@given(st.one_of(st.text(max_size=80), st.sampled_from(fuzz.GRES)))
def test_gres_detail_gives_bounded_indices_or_a_slurm_error(detail: str) -> None:
    try:
        held = from_gres_detail(detail)
    except LiquidError:
        return
    assert all(0 <= g <= parse.MAX_DEVICE_INDEX for g in held.gpus) and held.shards >= 0


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
        st.sampled_from(["jobs", "job_id", "gres_detail", "nodes", "job_resources", "errors", "allocation",
                         "allocated_nodes", "name", "nodename", "meters", "unrecorded", "version", "gpus"]),
        inner, max_size=5)),
    max_leaves=30)


def squeue_doc(value) -> str:
    return json.dumps(value, allow_nan=True)


@given(st.one_of(json_values.map(squeue_doc), st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                 st.integers(1, 100_000).map(lambda n: "[" * n)))
def test_squeue_replies_give_gres_details_or_a_slurm_error(reply: str) -> None:
    client = CliBackend(runner=lambda argv, *, timeout, stdin=None: reply)
    try:
        details = client.gres_detail([3, 4, 5])
    except SlurmError:
        return
    assert set(details) <= {3, 4, 5}
    assert all(isinstance(n, str) and isinstance(d, str) for nodes in details.values() for n, d in nodes.items())


@given(st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=300),
                 st.builds(lambda n: b"{" + b'"a":{' * n, st.integers(1, 50_000))))
def test_a_state_file_restores_or_says_why(raw: bytes) -> None:
    agent = fuzz.new_agent("/nonexistent")
    try:
        agent.restore_data(raw)
    except LiquidError:
        return
    agent.snapshot()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=500), st.binary(max_size=40))
def test_a_state_file_on_disk_never_stops_the_agent(tmp_path: Path, raw: bytes, more: bytes) -> None:
    state = tmp_path / "state.json"
    state.write_bytes(raw + more)
    agent = fuzz.new_agent(str(tmp_path))
    agent.restore(state)
    assert set(agent.errors) <= {"state file"} and agent.last_error == {}    # refused, never a surprise


readings = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-2 ** 80, 2 ** 80),
                   st.sampled_from([10 ** 400, -(10 ** 400), True, "7"]))


@given(st.lists(st.tuples(st.integers(0, 7), readings, readings,
                          st.lists(st.tuples(st.integers(1, 5), readings, readings, readings), max_size=3)), max_size=4),
       st.dictionaries(st.integers(1, 3), st.tuples(st.lists(st.integers(0, 7), max_size=3), st.integers(0, 64)), max_size=3))
def test_any_gpu_readings_give_finite_usage(samples, held) -> None:
    jobs = {pid: procs.Process(pid, 1000 + pid, "python", procs.JobRef(1 + pid % 3, "0", "slurmstepd"), 1024, 0)
            for pid in range(1, 6)}
    gpus = [GpuSample(index, "H100", "GPU", used, 81559.0, util, tuple(GpuProcess(*p) for p in processes))
            for index, used, util, processes in samples]
    allocations = {j: Allocation(tuple(g), shards, "gpu01", "slurm") for j, (g, shards) in held.items()}
    meters = Meters()
    meters.update(0.0, jobs, gpus, allocations)
    meters.update(5.0, jobs, gpus, allocations)
    for meter in meters.jobs.values():
        usage = meter.usage("nvml", "gpu01")
        assert usage.peak_mib >= 0 and (usage.util is None or math.isfinite(usage.util))
        usage.render()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["7", "8", "0", "x", "9" * 30, ".7"]), st.binary(max_size=200)), max_size=4),
       proc_trees)
def test_a_pass_over_any_epilog_files_and_processes_counts_nothing_it_was_not_given(tmp_path_factory, notes, files) -> None:
    spool = tmp_path_factory.mktemp("spool")
    agent = Agent(AgentConfig(spool_dir=str(spool), end_grace_s=1.0), fuzz.new_agent("/x").reader,
                  fuzz.new_agent("/x").recorder, scan=lambda: procs.scan_files(files),
                  allocations=Allocations("gpu01", lambda ids: {j: {"gpu01": "gpu:1(IDX:0)"} for j in ids},
                                          cgroup_root=spool))
    agent.ended_dir.mkdir()
    for name, data in notes:
        (agent.ended_dir / name).write_bytes(data)
    for now in (1000.0, 1005.0, 1100.0):
        agent.step(now)
    agent._records.put(None)
    agent.record_forever()
    assert agent.errors == {} and list(agent.ended_dir.iterdir()) == []


@pytest.mark.parametrize("name", [name for name, _ in fuzz.CASES])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 32))
def test_every_fuzz_case_survives_hypothesis_seeds(name: str, seed: int) -> None:
    dict(fuzz.CASES)[name](random.Random(seed))
