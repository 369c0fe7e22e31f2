"""The agent's GPU readers: NVML through a fake pynvml (no GPU here), the stand-in, and the fallbacks."""

import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pynvml as real  # importing never loads libnvidia-ml; only nvmlInit does
import pytest

from slurm_liquid.agent.gpus import (
    STANDIN_NAME,
    STANDIN_TOTAL_MIB,
    GpuProcess,
    NoGpuReader,
    NvmlReader,
    StandinReader,
    open_reader,
)
from slurm_liquid.errors import UsageError

MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass
class FakeGpu:
    minor: int
    name: bytes | str = b"NVIDIA H200"
    uuid: bytes | str = b"GPU-0"
    used: int = 0
    total: int = 140 * GIB
    util: int = 0
    procs: list = field(default_factory=list)  # (pid, usedGpuMemory bytes or None)
    accounting: dict | None = None  # pid -> (maxMemoryUsage bytes, gpuUtilization, isRunning)
    errors: dict = field(default_factory=dict)  # NVML function name -> exception class it raises
    lost: bool = False  # every call on this device raises GpuIsLost


def fake_pynvml(gpus, init_error=None):
    """A pynvml module with the real error classes and constants, over fake devices."""
    nv = types.ModuleType("pynvml")
    for name in dir(real):
        if name.startswith(("NVMLError", "NVML_")):
            setattr(nv, name, getattr(real, name))
    nv.calls = []

    def nvmlInit():
        nv.calls.append("init")
        if init_error is not None:
            raise init_error()

    def nvmlShutdown():
        nv.calls.append("shutdown")

    def device(fname, result):
        def call(handle, *args):
            gpu = gpus[handle]
            if gpu.lost:
                raise real.NVMLError_GpuIsLost()
            if fname in gpu.errors:
                raise gpu.errors[fname]()
            return result(gpu, *args)
        setattr(nv, fname, call)

    nv.nvmlInit, nv.nvmlShutdown = nvmlInit, nvmlShutdown
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    device("nvmlDeviceGetMinorNumber", lambda g: g.minor)
    device("nvmlDeviceGetName", lambda g: g.name)
    device("nvmlDeviceGetUUID", lambda g: g.uuid)
    device("nvmlDeviceGetMemoryInfo", lambda g: SimpleNamespace(total=g.total, used=g.used, free=g.total - g.used))
    device("nvmlDeviceGetUtilizationRates", lambda g: SimpleNamespace(gpu=g.util, memory=0))
    device("nvmlDeviceGetComputeRunningProcesses",
           lambda g: [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in g.procs])
    device("nvmlDeviceGetAccountingMode",
           lambda g: real.NVML_FEATURE_DISABLED if g.accounting is None else real.NVML_FEATURE_ENABLED)

    def accounting_pids(g):
        if g.accounting is None:  # the real driver refuses while accounting is off
            raise real.NVMLError_NotSupported()
        return list(g.accounting)

    def accounting_stats(g, pid):
        if pid not in (g.accounting or {}):
            raise real.NVMLError_NotFound()
        peak, util, running = g.accounting[pid]
        return SimpleNamespace(gpuUtilization=util, memoryUtilization=0, maxMemoryUsage=peak,
                               time=0, startTime=0, isRunning=running)

    device("nvmlDeviceGetAccountingPids", accounting_pids)
    device("nvmlDeviceGetAccountingStats", accounting_stats)
    return nv


def nvml_reader(monkeypatch, gpus, init_error=None):
    nv = fake_pynvml(gpus, init_error)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return open_reader("nvml"), nv


# --- NVML -------------------------------------------------------------------------------------


def test_nvml_two_devices_with_processes(monkeypatch):
    # Enumeration order (PCI bus) differs from minor numbers: indices must be the minor numbers.
    gpus = [
        FakeGpu(minor=1, name=b"NVIDIA H200", uuid=b"GPU-aaa", used=3 * GIB, util=40,
                procs=[(200, 2 * GIB), (100, 1 * GIB)]),
        FakeGpu(minor=0, name="NVIDIA H100", uuid="GPU-bbb", used=512 * MIB, total=80 * GIB, util=5,
                procs=[(300, 512 * MIB)]),
    ]
    reader, _ = nvml_reader(monkeypatch, gpus)
    assert isinstance(reader, NvmlReader)
    first, second = reader.sample()
    assert (first.index, first.name, first.uuid) == (1, "NVIDIA H200", "GPU-aaa")
    assert (first.used_mib, first.total_mib, first.util) == (3072.0, 143360.0, 40.0)
    assert first.processes == (GpuProcess(100, 1024.0), GpuProcess(200, 2048.0))
    assert (second.index, second.name, second.uuid) == (0, "NVIDIA H100", "GPU-bbb")
    assert (second.used_mib, second.total_mib, second.util) == (512.0, 81920.0, 5.0)
    assert second.processes == (GpuProcess(300, 512.0),)
    assert (reader.source, reader.problem) == ("nvml", "")


def test_nvml_unknown_process_memory_is_none(monkeypatch):
    reader, _ = nvml_reader(monkeypatch, [FakeGpu(minor=0, procs=[(100, None)])])
    [gpu] = reader.sample()
    assert gpu.processes == (GpuProcess(100, None),)


def test_nvml_accounting_gives_peaks_of_running_processes_only(monkeypatch):
    gpus = [
        FakeGpu(minor=0, procs=[(100, 1 * GIB)],
                accounting={100: (6 * GIB, 70, 1), 200: (9 * GIB, 55, 0)}),  # 200 ended
        FakeGpu(minor=1, procs=[(300, 2 * GIB)]),  # accounting off on this one
    ]
    reader, _ = nvml_reader(monkeypatch, gpus)
    first, second = reader.sample()
    # 200 ended: no live process of a job can be matched to it, and the buffer may hold thousands
    assert first.processes == (GpuProcess(100, used_mib=1024.0, peak_mib=6144.0, util=70.0),)
    assert second.processes == (GpuProcess(300, 2048.0),)
    assert reader.source == "nvml-acct"


def test_nvml_source_follows_accounting_being_turned_off(monkeypatch):
    gpus = [FakeGpu(minor=0, accounting={100: (GIB, 10, 1)})]
    reader, _ = nvml_reader(monkeypatch, gpus)
    reader.sample()
    assert reader.source == "nvml-acct"
    gpus[0].accounting = None
    reader.sample()
    assert reader.source == "nvml"


def test_nvml_unsupported_fields_are_none(monkeypatch):
    gpus = [FakeGpu(minor=7, util=50, used=GIB, procs=[(100, GIB)],
                    errors={"nvmlDeviceGetUtilizationRates": real.NVMLError_NotSupported,
                            "nvmlDeviceGetMinorNumber": real.NVMLError_NotSupported,
                            "nvmlDeviceGetAccountingMode": real.NVMLError_NoPermission})]
    reader, _ = nvml_reader(monkeypatch, gpus)
    [gpu] = reader.sample()
    assert gpu.util is None
    assert gpu.index == 0  # no minor number: the enumeration index stands in
    assert (gpu.used_mib, gpu.processes) == (1024.0, (GpuProcess(100, 1024.0),))
    assert reader.source == "nvml"


def test_nvml_unsupported_process_list_gives_no_processes(monkeypatch):
    gpus = [FakeGpu(minor=0, used=GIB, procs=[(100, GIB)],
                    errors={"nvmlDeviceGetComputeRunningProcesses": real.NVMLError_FunctionNotFound})]
    reader, _ = nvml_reader(monkeypatch, gpus)
    [gpu] = reader.sample()
    assert (gpu.used_mib, gpu.processes) == (1024.0, ())


def test_nvml_lost_gpu_is_skipped(monkeypatch):
    gpus = [FakeGpu(minor=0, uuid="GPU-lost", lost=True), FakeGpu(minor=1, uuid="GPU-ok")]
    reader, _ = nvml_reader(monkeypatch, gpus)
    assert [g.uuid for g in reader.sample()] == ["GPU-ok"]


def test_nvml_required_field_failing_skips_the_device(monkeypatch):
    # Memory is not optional: a device that cannot say it is left out, not reported as 0 MiB.
    gpus = [FakeGpu(minor=0, uuid="GPU-bad", errors={"nvmlDeviceGetMemoryInfo": real.NVMLError_NotSupported}),
            FakeGpu(minor=1, uuid="GPU-ok")]
    reader, _ = nvml_reader(monkeypatch, gpus)
    assert [g.uuid for g in reader.sample()] == ["GPU-ok"]


@pytest.mark.parametrize("error, says", [
    (real.NVMLError_LibraryNotFound, "NVML Shared Library Not Found"),
    (real.NVMLError_DriverNotLoaded, "Driver Not Loaded"),
    (real.NVMLError_NoPermission, "Insufficient Permissions"),
])
def test_nvml_init_failure_gives_no_gpu_reader(monkeypatch, error, says):
    reader, _ = nvml_reader(monkeypatch, [FakeGpu(minor=0)], init_error=error)
    assert isinstance(reader, NoGpuReader)
    assert reader.source == "none"
    assert reader.problem == f"NVML unavailable: {says}; no GPU readings, host measurements only"
    assert reader.sample() == []
    reader.close()


def test_nvml_import_failure_gives_no_gpu_reader(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    reader = open_reader("nvml")
    assert isinstance(reader, NoGpuReader)
    assert reader.problem.startswith("NVML unavailable: cannot import pynvml")
    assert reader.problem.endswith("no GPU readings, host measurements only")
    assert reader.sample() == []


def test_nvml_close_shuts_down_once(monkeypatch):
    reader, nv = nvml_reader(monkeypatch, [FakeGpu(minor=0)])
    reader.close()
    reader.close()
    assert nv.calls == ["init", "shutdown"]


# --- the other specs ----------------------------------------------------------------------------


def test_none_spec():
    reader = open_reader("none")
    assert (reader.source, reader.sample()) == ("none", [])
    assert reader.problem == "GPU readings turned off ([agent] gpu_source = none)"


@pytest.mark.parametrize("spec", ["nvml-acct", "standin", "standin:", "NVML", "cuda:0", ""])
def test_unknown_spec_is_a_usage_error(spec):
    with pytest.raises(UsageError) as caught:
        open_reader(spec)
    assert repr(spec) in str(caught.value)


# --- the stand-in ---------------------------------------------------------------------------------


@pytest.fixture
def dev(tmp_path):
    root = tmp_path / "dev"
    root.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (root / name).touch()
    (root / "nvidia-caps").mkdir()
    return root


@pytest.fixture
def records(tmp_path):
    directory = tmp_path / "standin"
    directory.mkdir()

    def write(name, content):
        path = directory / name
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    write.directory = directory
    return write


@pytest.fixture
def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: /proc/<pid> is gone
    assert not Path(f"/proc/{child.pid}").exists()
    return child.pid


@pytest.fixture
def live_pid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield child.pid
    child.kill()
    child.wait()


def test_standin_devices_are_the_numbered_dev_files(dev, records):
    reader = open_reader(f"standin:{records.directory}", dev_root=dev)
    assert isinstance(reader, StandinReader)
    assert (reader.source, reader.problem) == ("standin", "")
    samples = reader.sample()
    assert [(s.index, s.name, s.uuid) for s in samples] == [
        (0, STANDIN_NAME, "STANDIN-0"), (1, STANDIN_NAME, "STANDIN-1")]
    for s in samples:
        assert (s.used_mib, s.total_mib, s.util, s.processes) == (0.0, STANDIN_TOTAL_MIB, 0.0, ())
    assert STANDIN_TOTAL_MIB == 81559.0


def test_standin_counts_only_live_processes(dev, records, live_pid, dead_pid):
    me = os.getpid()
    records("me.json", {"pid": me, "gpu": 1, "used_mib": 1000, "util": 30})
    records("other.json", {"pid": live_pid, "gpu": 1, "used_mib": 500.5})  # util optional
    records("dead.json", {"pid": dead_pid, "gpu": 0, "used_mib": 4000, "util": 90})
    gpu0, gpu1 = open_reader(f"standin:{records.directory}", dev_root=dev).sample()
    assert (gpu0.used_mib, gpu0.util, gpu0.processes) == (0.0, 0.0, ())
    assert sorted(gpu1.processes, key=lambda p: p.pid) == sorted(
        [GpuProcess(me, 1000.0, util=30.0), GpuProcess(live_pid, 500.5)], key=lambda p: p.pid)
    assert (gpu1.used_mib, gpu1.util) == (1500.5, 30.0)


def test_standin_utilisation_is_capped_at_100(dev, records, live_pid):
    records("a.json", {"pid": os.getpid(), "gpu": 0, "used_mib": 10, "util": 60})
    records("b.json", {"pid": live_pid, "gpu": 0, "used_mib": 20, "util": 70})
    gpu0, _ = open_reader(f"standin:{records.directory}", dev_root=dev).sample()
    assert (gpu0.used_mib, gpu0.util) == (30.0, 100.0)


@pytest.mark.parametrize("content", [
    "{not json",
    "",
    [1, 2],
    {"gpu": 0, "used_mib": 100},
    {"pid": "PID", "gpu": 0, "used_mib": 100},
    {"pid": "SELF", "gpu": "0", "used_mib": 100},
    {"pid": "SELF", "gpu": 0, "used_mib": "100"},
    {"pid": "SELF", "gpu": 0, "used_mib": 100, "util": "high"},
    {"pid": "SELF", "gpu": True, "used_mib": 100},  # JSON true is not GPU 1
])
def test_standin_ignores_malformed_records(dev, records, content):
    if isinstance(content, dict) and content.get("pid") == "SELF":
        content = {**content, "pid": os.getpid()}
    records("bad.json", content)
    records("good.json", {"pid": os.getpid(), "gpu": 0, "used_mib": 7})
    gpu0, gpu1 = open_reader(f"standin:{records.directory}", dev_root=dev).sample()
    assert gpu0.processes == (GpuProcess(os.getpid(), 7.0),)
    assert (gpu0.used_mib, gpu1.processes) == (7.0, ())


def test_standin_total_from_devices_json(dev, records):
    records("devices.json", {"total_mib": 40960})
    assert [s.total_mib for s in open_reader(f"standin:{records.directory}", dev_root=dev).sample()] == [
        40960.0, 40960.0]


def test_standin_process_on_a_missing_device_is_not_reported(dev, records):
    records("me.json", {"pid": os.getpid(), "gpu": 5, "used_mib": 100})
    assert all(s.processes == () for s in open_reader(f"standin:{records.directory}", dev_root=dev).sample())
