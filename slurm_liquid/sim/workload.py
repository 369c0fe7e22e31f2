"""Workload loaders: the Pollux CSV format and Philly-derived synthetic workloads.

A workload is a list of `JobSpec`s sorted by arrival time (stable, so ties keep file
order, which the artifact's tie-breaking depends on). Every bad row is reported as one
`UsageError` naming the file and line.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from slurm_liquid.errors import UsageError
from slurm_liquid.sim.apps import APPLICATIONS, DATA_DIR, load_app

POLLUX_COLUMNS = ("time", "application", "num_replicas", "batch_size")
PHILLY_CSV = DATA_DIR / "philly.csv"
BUNDLED_WORKLOADS = DATA_DIR / "workloads"

# The artifact's "TunedJobs" configurations (SIMULATOR.md section 9): (replicas, total batch).
TUNED = {
    "ncf": ((1, 32768),),
    "cifar10": ((6, 2048), (8, 2048), (12, 4096), (16, 4096)),
    "bert": ((6, 384), (8, 384), (12, 384), (16, 384)),
    "deepspeech2": ((6, 320), (8, 320), (12, 640)),
    "yolov3": ((4, 64),),
    "imagenet": ((24, 3200), (32, 6400), (48, 6400)),
}
MAX_MEASURED_GPUS = 64  # the traces' scalability data stop at 64 replicas


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a workload, as submitted."""

    name: str
    time: float  # arrival, seconds from the start
    application: str
    num_replicas: int  # the GPU count the user asked for
    batch_size: int  # the total batch the job trains at
    source: str = ""  # "file:line", for error messages


def _int(value: str, field: str, where: str) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {field}={value!r} is not a number") from None
    if not math.isfinite(f) or f != int(f):
        raise UsageError(f"{where}: {field}={value!r} is not a whole number")
    return int(f)


def _check(spec: JobSpec) -> JobSpec:
    where = spec.source or spec.name
    if not math.isfinite(spec.time) or spec.time < 0:
        raise UsageError(f"{where}: time={spec.time:g} must be a non-negative number of seconds")
    if spec.application not in APPLICATIONS:
        raise UsageError(f"{where}: unknown application {spec.application!r} (known: {', '.join(APPLICATIONS)})")
    if spec.num_replicas <= 0:
        raise UsageError(f"{where}: num_replicas={spec.num_replicas} must be positive")
    app = load_app(spec.application)
    if not 0 < spec.batch_size <= app.max_bsz:
        raise UsageError(f"{where}: batch_size={spec.batch_size} must lie in [1, {app.max_bsz}] for {spec.application}")
    if spec.batch_size < spec.num_replicas * app.min_local_bsz:
        raise UsageError(f"{where}: batch_size={spec.batch_size} is too small for {spec.num_replicas} GPUs "
                         f"(at least {app.min_local_bsz} per GPU for {spec.application})")
    return spec


def load_pollux_csv(path: str | Path) -> list[JobSpec]:
    """Read a Pollux workload file (name,time,application,num_replicas,batch_size)."""
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames
            rows = list(reader)
    except OSError as exc:
        raise UsageError(f"cannot read workload {path}: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a CSV file ({exc})") from None
    if not header:
        raise UsageError(f"{path}: the file is empty")
    missing = [c for c in POLLUX_COLUMNS if c not in header]
    if missing:
        raise UsageError(f"{path}: missing column(s) {', '.join(missing)} (expected name,{','.join(POLLUX_COLUMNS)})")
    if not rows:
        raise UsageError(f"{path}: no jobs (only a header)")
    specs = []
    for i, row in enumerate(rows):
        where = f"{path.name}:{i + 2}"
        if None in row.values() or None in row:
            raise UsageError(f"{where}: wrong number of fields")
        try:
            t = float(row["time"])
        except ValueError:
            raise UsageError(f"{where}: time={row['time']!r} is not a number") from None
        app = row["application"].strip()
        specs.append(_check(JobSpec(
            name=(row.get("name") or f"{app}-{i}").strip(), time=t, application=app,
            num_replicas=_int(row["num_replicas"], "num_replicas", where),
            batch_size=_int(row["batch_size"], "batch_size", where), source=where)))
    return sorted(specs, key=lambda s: s.time)


def philly_app(gpu_hours: float, rng: np.random.Generator) -> str:
    """The artifact's mapping from a Philly job's GPU time to a measured application."""
    if gpu_hours < 1:
        return str(rng.choice(["cifar10", "ncf"]))
    if gpu_hours < 10:
        return "bert" if rng.random() < 0.5 else "deepspeech2"
    return "yolov3" if gpu_hours < 100 else "imagenet"


def _philly_batch(app_name: str, gpus: int) -> tuple[int, int]:
    """GPUs and batch for `app_name` near `gpus`: the nearest tuned config's per-GPU batch, made to fit."""
    app = load_app(app_name)
    gpus = max(1, min(gpus, MAX_MEASURED_GPUS, app.max_bsz // app.min_local_bsz))
    if app_name == "ncf":  # the artifact runs ncf on one GPU only
        return 1, 32768
    replicas, batch = min(TUNED[app_name], key=lambda rb: (abs(rb[0] - gpus), rb[0]))
    scaled = batch * gpus // replicas
    return gpus, int(min(app.max_bsz, max(scaled, app.init_bsz, gpus * app.min_local_bsz)))


@lru_cache(maxsize=4)
def _philly_rows(path: Path) -> tuple[tuple[float, int, float], ...]:
    """(arrival, GPUs, GPU-seconds) of the usable Philly jobs, sorted; parsed once per process."""
    import datetime as dt

    rows = []
    try:
        with path.open(newline="") as fh:
            for i, row in enumerate(csv.DictReader(fh)):
                where = f"{path.name}:{i + 2}"
                try:
                    duration, gpus, gpu_time = float(row["duration"]), int(row["num_gpus"]), float(row["gpu_time"])
                    ts = dt.datetime.fromisoformat(row["timestamp"]).replace(tzinfo=dt.timezone.utc).timestamp()
                except (KeyError, TypeError, ValueError) as exc:
                    raise UsageError(f"{where}: bad Philly row ({exc})") from None
                # The artifact's filter: real jobs (>= 1 min) that are not runaway (< 1000 GPU-hours).
                if duration >= 60 and gpu_time < 1000 * 3600 and gpus > 0:
                    rows.append((ts, gpus, gpu_time))
    except OSError as exc:
        raise UsageError(f"cannot read Philly trace {path}: {exc.strerror or exc}") from None
    if not rows:
        raise UsageError(f"{path}: no usable Philly jobs")
    return tuple(sorted(rows))


def load_philly(path: str | Path = PHILLY_CSV, jobs: int = 1000, seed: int = 0,
                time_scale: float = 1.0, max_gpus: int | None = None) -> list[JobSpec]:
    """A synthetic workload: `jobs` consecutive Philly jobs mapped onto the measured applications.

    Arrivals keep the trace's gaps multiplied by `time_scale` (< 1 compresses the trace to
    raise the load); the GPU count comes from the trace (capped at 64, the measured range,
    and at `max_gpus`); the application follows the artifact's GPU-time bands.
    """
    path = Path(path)
    if jobs <= 0:
        raise UsageError(f"philly: jobs={jobs} must be positive")
    if not time_scale > 0:
        raise UsageError(f"philly: time_scale={time_scale} must be positive")
    rows = _philly_rows(Path(path).resolve())
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, max(1, len(rows) - jobs + 1)))
    window = rows[start:start + jobs]
    t0 = window[0][0]
    specs = []
    for i, (ts, gpus, gpu_time) in enumerate(window):
        app = philly_app(gpu_time / 3600, rng)
        n, batch = _philly_batch(app, min(gpus, max_gpus or gpus))
        specs.append(_check(JobSpec(f"{app}-{i}", round((ts - t0) * time_scale, 3), app, n, batch,
                                    source=f"philly job {i}")))
    return specs


def sample_philly(path: str | Path = PHILLY_CSV, jobs: int = 160, seed: int = 0, start_hour: int = 2,
                  hours: int = 8, time_scale: float = 1.0) -> list[JobSpec]:
    """A workload drawn the way the Pollux artifact's generator drew its 8 (SIMULATOR.md 2).

    `jobs` Philly jobs sampled at random among those submitted, once the clock is shifted back
    `start_hour` hours, in the first `hours` hours of a day; each arrives at that time of day
    (times `time_scale`: 0.25 keeps the load of 160 jobs with 40); its application follows the
    GPU-time bands and its (GPUs, batch) is one of the application's tuned configurations, chosen
    at random. Same sampler, different seeds: what a policy is trained on has the evaluation
    workloads' job mix without being one of them.
    """
    if jobs <= 0:
        raise UsageError(f"philly: jobs={jobs} must be positive")
    if not time_scale > 0:
        raise UsageError(f"philly: time_scale={time_scale} must be positive")
    if not 0 < hours <= 24:
        raise UsageError(f"philly: hours={hours} must lie in (0, 24]")
    rows = _philly_rows(Path(path).resolve())
    day = 24 * 3600
    in_window = [(ts, gpu_time) for ts, _, gpu_time in rows if (ts - start_hour * 3600) % day < hours * 3600]
    if len(in_window) < jobs:
        raise UsageError(f"philly: only {len(in_window)} jobs in the {hours} h window, {jobs} asked")
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(in_window), size=jobs, replace=False)
    drawn = []
    for i in picks:
        ts, gpu_time = in_window[i]
        app = philly_app(gpu_time / 3600, rng)
        replicas, batch = TUNED[app][int(rng.integers(len(TUNED[app])))]
        drawn.append(((ts - start_hour * 3600) % day * time_scale, app, replicas, batch))
    drawn.sort(key=lambda d: d[0])
    return [_check(JobSpec(f"{app}-{k}", round(t, 3), app, n, b, source=f"philly sample {k}"))
            for k, (t, app, n, b) in enumerate(drawn)]


def load_workload(path: str | Path) -> dict[str, list[JobSpec]]:
    """A file gives one workload; a directory gives each of its *.csv files, by stem."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.csv"), key=lambda p: (len(p.stem), p.stem))
        if not files:
            raise UsageError(f"{path}: no *.csv workload files in this directory")
        return {f.stem: load_pollux_csv(f) for f in files}
    if not path.exists():
        raise UsageError(f"workload {path} does not exist")
    return {path.stem: load_pollux_csv(path)}


def check_fits(specs: Sequence[JobSpec], total_gpus: int) -> None:
    """Fail on the first job that asks for more GPUs than the cluster has."""
    for spec in specs:
        if spec.num_replicas > total_gpus:
            raise UsageError(f"{spec.source or spec.name}: {spec.name} asks for {spec.num_replicas} GPUs, "
                             f"the cluster has {total_gpus}")
