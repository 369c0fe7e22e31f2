"""The node agent's GPU readings: per device memory, utilisation and the processes using it.

`open_reader(spec)` gives one of three readers, chosen by the agent's `gpu_source` setting:

* "nvml": the NVIDIA driver's NVML library (package nvidia-ml-py). If the library cannot be
  imported or initialised, the agent still runs on host measurements: `open_reader` never raises
  for that, it returns a NoGpuReader whose `problem` tells the admin why there are no GPU readings.
  With accounting mode on (`nvidia-smi -am 1`), each process also gets its true peak memory.
* "none": no GPU readings, on purpose.
* "standin:DIR": a stand-in FOR TESTING ONLY, on clusters whose GPUs are emulated device files
  (e.g. the containerised test cluster) and have no NVML. Devices are the /dev/nvidiaN files; the
  processes "using" them are the JSON records that test jobs write into DIR. It measures nothing
  real, so it is labelled in every record: source "standin", device name "stand-in (no NVML)",
  uuid "STANDIN-<N>".

This module only reads; which Slurm job a process belongs to is decided elsewhere.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from slurm_liquid.errors import UsageError

MIB = 1024 * 1024
STANDIN_NAME = "stand-in (no NVML)"
STANDIN_TOTAL_MIB = 81559.0  # an 80 GB A100/H100, as NVML reports it
NO_READINGS = "no GPU readings, host measurements only"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: float | None  # current used memory (NVML may not know it: None)
    peak_mib: float | None = None  # accounting mode: maxMemoryUsage of the process (true peak between samples)
    # % SM utilisation of this process when known; from accounting mode this is NVML's average over
    # the process's lifetime so far, not the current value
    util: float | None = None


@dataclass(frozen=True)
class GpuSample:
    index: int  # the device minor number (/dev/nvidiaN): what Slurm's gres indices refer to
    name: str
    uuid: str
    used_mib: float
    total_mib: float
    util: float | None  # % GPU utilisation
    processes: tuple[GpuProcess, ...]


class GpuReader(Protocol):
    source: str  # "nvml", "nvml-acct", "standin" or "none"
    problem: str  # "" when readings work; else one sentence for the admin

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NoGpuReader:
    source = "none"

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def sample(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        pass


def open_reader(spec: str, dev_root: Path = Path("/dev")) -> GpuReader:
    """The reader for `spec`: "nvml", "none" or "standin:DIR" (UsageError for anything else)."""
    kind, _, directory = spec.partition(":")
    if spec == "nvml":
        return _open_nvml()
    if spec == "none":
        return NoGpuReader("GPU readings turned off ([agent] gpu_source = none)")
    if kind == "standin" and directory:
        return StandinReader(Path(directory), dev_root)
    raise UsageError(f"unknown GPU source {spec!r}: expected 'nvml', 'none' or 'standin:DIR'")


def _open_nvml() -> GpuReader:
    try:
        import pynvml
    except ImportError as e:
        return NoGpuReader(f"NVML unavailable: cannot import pynvml (nvidia-ml-py): {e}; {NO_READINGS}")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:  # library not found, driver not loaded, no permission...
        return NoGpuReader(f"NVML unavailable: {e}; {NO_READINGS}")
    return NvmlReader(pynvml)


def _mib(n_bytes: int | None) -> float | None:
    return None if n_bytes is None else n_bytes / MIB


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Reads every GPU through an initialised pynvml module (passed in, so tests can fake it)."""

    def __init__(self, nvml: Any) -> None:
        self._nv = nvml
        self._open = True
        self.source = "nvml"
        self.problem = ""
        # Errors that mean "this GPU or driver cannot tell us that": the field is None, the rest of
        # the reading stands. NotFound: an accounting pid evicted between listing and reading it.
        self._unknown = tuple(
            getattr(nvml, "NVMLError_" + name)
            for name in ("NotSupported", "NoPermission", "FunctionNotFound", "NotFound")
        )

    def _optional(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except self._unknown:
            return None

    def sample(self) -> list[GpuSample]:
        nv = self._nv
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError:
            return []
        samples, accounting = [], False
        for i in range(count):
            try:
                sample, device_accounting = self._device(i)
            except nv.NVMLError:
                continue  # lost or failing GPU: left out of this sample, the caller sees it missing
            samples.append(sample)
            accounting = accounting or device_accounting
        self.source = "nvml-acct" if accounting else "nvml"
        return samples

    def _device(self, i: int) -> tuple[GpuSample, bool]:
        nv, opt = self._nv, self._optional
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        minor = opt(nv.nvmlDeviceGetMinorNumber, handle)
        memory = nv.nvmlDeviceGetMemoryInfo(handle)
        rates = opt(nv.nvmlDeviceGetUtilizationRates, handle)
        processes = {
            p.pid: GpuProcess(p.pid, _mib(p.usedGpuMemory))
            for p in opt(nv.nvmlDeviceGetComputeRunningProcesses, handle) or ()
        }
        accounting = opt(nv.nvmlDeviceGetAccountingMode, handle) == nv.NVML_FEATURE_ENABLED
        if accounting:
            # Only running processes: the buffer also keeps up to thousands of finished pids (one
            # NVML call each, every sample), which no live process of a job can be matched to.
            # A running process's maxMemoryUsage is its peak since it started, between samples too.
            for pid in list(processes):
                stats = opt(nv.nvmlDeviceGetAccountingStats, handle, pid)
                if stats is not None:
                    processes[pid] = replace(
                        processes.get(pid, GpuProcess(pid, None)),
                        peak_mib=_mib(stats.maxMemoryUsage),
                        util=float(stats.gpuUtilization),
                    )
        sample = GpuSample(
            index=i if minor is None else minor,
            name=_text(nv.nvmlDeviceGetName(handle)),
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            used_mib=memory.used / MIB,
            total_mib=memory.total / MIB,
            util=None if rates is None else float(rates.gpu),
            processes=tuple(sorted(processes.values(), key=lambda p: p.pid)),
        )
        return sample, accounting

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nv.nvmlShutdown()
            except self._nv.NVMLError:
                pass  # nothing left that we could release


def _number(value: Any, kinds: tuple[type, ...] = (int, float)) -> bool:
    """A finite non-negative JSON number (true is not one; NaN, Infinity and 1e400 are not readings)."""
    if not isinstance(value, kinds) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value) and 0 <= value < 2 ** 53
    except OverflowError:       # an integer too large for a float
        return False


class StandinReader:
    """Test stand-in: emulated /dev/nvidiaN files plus JSON records written by test jobs in DIR."""

    source = "standin"
    problem = ""

    def __init__(self, directory: Path, dev_root: Path) -> None:
        self.directory = directory
        self.dev_root = dev_root

    def _total_mib(self) -> float:
        try:
            total = json.loads((self.directory / "devices.json").read_text())["total_mib"]
        except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
            return STANDIN_TOTAL_MIB
        return float(total) if _number(total) else STANDIN_TOTAL_MIB

    def _processes(self) -> list[tuple[int, GpuProcess]]:
        """(device index, process) for every well-formed record whose process is alive."""
        found = []
        for path in sorted(self.directory.glob("*.json")):
            if path.name == "devices.json":
                continue
            try:
                with open(path, "rb") as handle:
                    record = json.loads(handle.read(64 * 1024))
                pid, gpu, used, util = record["pid"], record["gpu"], record["used_mib"], record.get("util")
            except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError):
                continue  # half-written or malformed: a test job's file, not worth stopping for
            well_formed = (
                _number(pid, (int,)) and 0 < pid < 2 ** 22 and _number(gpu, (int,)) and gpu < 1024
                and _number(used) and (util is None or _number(util))
            )
            if well_formed and Path(f"/proc/{pid}").exists():
                found.append((gpu, GpuProcess(pid, float(used), util=None if util is None else float(util))))
        return found

    def sample(self) -> list[GpuSample]:
        indices = sorted(
            int(m.group(1))
            for path in self.dev_root.glob("nvidia*")
            if (m := re.fullmatch(r"nvidia(\d+)", path.name))
        )
        total = self._total_mib()
        processes = self._processes()
        samples = []
        for index in indices:
            mine = tuple(p for gpu, p in processes if gpu == index)
            samples.append(GpuSample(
                index=index,
                name=STANDIN_NAME,
                uuid=f"STANDIN-{index}",
                used_mib=sum(p.used_mib or 0.0 for p in mine),
                total_mib=total,
                util=min(100.0, sum(p.util or 0.0 for p in mine)),
                processes=mine,
            ))
        return samples

    def close(self) -> None:
        pass
