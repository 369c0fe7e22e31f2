"""`slurm-liquid agent`: measure what each Slurm job really uses on this node (etc/systemd/slurm-liquid-agent.service).

    every [agent] interval_s: the node's job processes (/proc) + the GPUs (NVML) -> per-job meters
    a job ended (the node epilog drops <spool>/ended/<job id>; or its processes are gone and
      Slurm says it is not running): its usage -> the job's AdminComment in accounting (recorder.py)

Runs as root. Without NVML it says so once and keeps measuring host memory and CPUs; no error in
one sample, one job or one Slurm command stops it (systemd would only restart it into the same
error): each is caught, counted in `errors` (and the Prometheus counter) and logged once. Every wait
is bounded: Slurm commands by their timeout, the loop by interval_s. Which GPUs a job holds comes
from Slurm's view (alloc.py), never from a process's environment. Meters are saved every minute so
that a restarted agent keeps the peaks it had seen.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from slurm_liquid import config as config_module
from slurm_liquid.agent import procs as procs_module
from slurm_liquid.agent.alloc import Allocations, gpus_from_epilog
from slurm_liquid.agent.gpus import GpuReader, open_reader
from slurm_liquid.agent.meter import GpuMeter, JobMeter, Meters, saved_meters, trusted
from slurm_liquid.agent.recorder import Recorder
from slurm_liquid.errors import LiquidError

log = logging.getLogger("slurm_liquid.agent")
SAVE_EVERY_S = 60.0
# after a job's end, its stragglers (a process the epilog raced) must not start a new meter that
# would record over the real one; a requeued run restarting later than this is measured afresh
AFTER_END_S = 15.0
SLURM_WAIT_S = 5.0          # the sampling loop asks Slurm for a new job's GPUs; never waits longer
MAX_QUESTIONS = 4           # "is it still running?" questions per pass: a pass waits at most 4 x SLURM_WAIT_S
MAX_NOTE_BYTES = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="liquid.toml (default: $SLURM_LIQUID_CONFIG or /etc/slurm/liquid.toml)")
    parser.add_argument("--gpu-source", default=None, metavar="SRC", help="override [agent] gpu_source: nvml, none, standin:DIR")
    parser.add_argument("--interval", type=float, default=None, metavar="S", help="override [agent] interval_s")
    parser.add_argument("--record", choices=config_module.AGENT_RECORDS, default=None, help="override [agent] record")
    parser.add_argument("--once", action="store_true",
                        help="take one sample and print the meters as JSON (records nothing)")
    parser.add_argument("--log-file", default=None, help="append the log here instead of stderr")


class Agent:
    def __init__(self, cfg: config_module.AgentConfig, reader: GpuReader, recorder: Recorder,
                 scan: Callable[[], dict[int, procs_module.Process]] = procs_module.scan,
                 job_running: Callable[[int], bool | None] | None = None, clock: Callable[[], float] = time.time,
                 allocations: Allocations | None = None):
        self.cfg = cfg
        self.reader = reader
        self.recorder = recorder
        self.scan = scan
        self.job_running = job_running or (lambda job_id: None)
        self.clock = clock
        self.meters = Meters(procs_module.clock_ticks())
        self.allocations = allocations or Allocations(recorder.node, None)
        self.errors: collections.Counter[str] = collections.Counter()   # caught exceptions, by where
        self.last_error: dict[str, str] = {}                             # where -> the latest one
        self.ended_dir = Path(cfg.spool_dir) / "ended"
        self.finished: dict[int, float] = {}   # job -> when it ended and was handed over
        self._errors: set[str] = set()
        self._asked: dict[int, float] = {}     # job -> when Slurm was last asked whether it still runs
        self._records: queue.Queue[tuple[int, JobMeter] | None] = queue.Queue()
        # ended jobs not yet recorded: saved with the meters, so a restart records them still
        self.unrecorded: dict[int, JobMeter] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ sampling

    def step(self, now: float) -> list[int]:
        """One pass of the loop: sample, then finish the jobs that ended. Never raises: whatever
        goes wrong is counted and logged once, and the next pass starts afresh."""
        self._guard("sample", self.sample)
        ended = self._guard("job ends", lambda: self.ended_jobs(now)) or {}
        self._guard("job ends", lambda: self.finish(ended))
        return sorted(ended)

    def sample(self) -> None:
        now = self.clock()
        try:
            self.finished = {j: t for j, t in self.finished.items() if now - t < AFTER_END_S}
            processes = {pid: p for pid, p in self.scan().items() if p.job.job_id not in self.finished}
        except OSError as exc:
            self._failed("processes", exc)
            processes = {}
        try:
            gpus = self.reader.sample()
        except Exception as exc:  # noqa: BLE001 -- a GPU that fell off the bus must not stop the agent
            self._failed("gpus", exc)
            gpus = []
        processes = trusted(processes)
        # jobs seen through root's view only: a SLURM_JOB_ID claim never makes the agent ask Slurm
        jobs: dict[int, str] = {}
        for proc in processes.values():
            if proc.job.via != "environ":
                jobs[proc.job.job_id] = jobs.get(proc.job.job_id) or proc.devices_cgroup
        self._guard("allocations", lambda: self.allocations.refresh(jobs))
        self.meters.update(now, processes, gpus, self.allocations.jobs)

    def _failed(self, where: str, exc: BaseException, job_id: int | None = None) -> None:
        """Count an exception and log it once per kind (a bad job must not flood the log)."""
        self.errors[where] += 1
        message = f"{where}{'' if job_id is None else f' (job {job_id})'}: {type(exc).__name__}: {exc}"
        self.last_error[where] = message[:300]
        key = f"{where}: {type(exc).__name__}: {exc}"[:300]
        if key not in self._errors and len(self._errors) < 1000:
            self._errors.add(key)
            log.warning("agent: %s (said once)", message[:2000], exc_info=not isinstance(exc, (OSError, LiquidError)))

    def _guard(self, where: str, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except Exception as exc:  # noqa: BLE001 -- the loop outlives any input; counted and logged
            self._failed(where, exc)
            return None

    def _once(self, message: str) -> None:
        if message not in self._errors:
            self._errors.add(message)
            log.warning("agent: %s (said once)", message)

    # ------------------------------------------------------------ job ends

    def ended_jobs(self, now: float) -> dict[int, dict[str, str]]:
        """Jobs the node epilog reported ended (with what it knows: `gpus=0,1 nodes=gpu[01-02]`), and
        jobs gone for end_grace_s that Slurm says are not running."""
        ended: dict[int, dict[str, str]] = {}
        try:
            entries = list(os.scandir(self.ended_dir))
        except FileNotFoundError:
            entries = []
        for entry in entries[:10_000]:
            job_id = procs_module.job_id_of(entry.name)
            if job_id is not None:
                ended[job_id] = _epilog_note(entry.path)
            try:
                os.unlink(entry.path)
            except OSError:
                pass
        asked = 0
        for job_id, meter in list(self.meters.jobs.items()):
            quiet = now - meter.last_seen > self.cfg.end_grace_s
            # a multi-node job between steps is quiet here for long: ask Slurm once per grace period
            if job_id not in ended and quiet and now - self._asked.get(job_id, 0.0) > self.cfg.end_grace_s:
                if asked >= MAX_QUESTIONS:
                    break               # the rest next pass: each question may wait SLURM_WAIT_S
                self._asked[job_id] = now
                asked += 1
                try:
                    running = self.job_running(job_id)
                except Exception as exc:  # noqa: BLE001 -- one job's question must not stop the others
                    self._failed("job state", exc, job_id)
                    continue
                if running is None:
                    break               # Slurm does not answer: ask the others next pass, not now
                if running is False:
                    ended[job_id] = {}
        return ended

    def finish(self, ended: Mapping[int, Mapping[str, str]]) -> None:
        for job_id, note in sorted(ended.items()):
            try:
                self._finish(job_id, note)
            except Exception as exc:  # noqa: BLE001 -- one job's end must not stop the others'
                self._failed("job end", exc, job_id)
        self.allocations.keep_only(self.meters.jobs)

    def _finish(self, job_id: int, note: Mapping[str, str]) -> None:
        self.finished[job_id] = self.clock()
        self._asked.pop(job_id, None)
        meter = self.meters.finish(job_id)
        if meter is None:
            return
        # the epilog's view comes from slurmd (root), not from the job's own environment
        for index in gpus_from_epilog(note.get("gpus", "")):
            meter.gpus.setdefault(index, GpuMeter())
        meter.nodelist = note.get("nodes") or meter.nodelist
        if not meter.gpus:
            log.debug("job %d: held no GPU here; nothing to record", job_id)
            return
        self.hand_over(job_id, meter)

    def hand_over(self, job_id: int, meter: JobMeter) -> None:
        with self._lock:
            self.unrecorded[job_id] = meter
        self._records.put((job_id, meter))

    def record_forever(self) -> None:
        """The recording thread: waits on Slurm without holding up the sampling."""
        node = self.recorder.node
        while True:
            item = self._records.get()
            if item is None:
                return
            job_id, meter = item
            try:
                self.recorder.record(job_id, meter.usage(self.reader.source, node), meter.nodelist)
            except Exception:  # noqa: BLE001 -- one job's record must not end the thread
                log.exception("job %d: recording failed", job_id)
            with self._lock:
                if self.unrecorded.get(job_id) is meter:
                    del self.unrecorded[job_id]

    # ------------------------------------------------------------ state

    def save(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with self._lock:
                unrecorded = {str(k): m.to_json() for k, m in self.unrecorded.items()}
            with os.fdopen(fd, "w") as handle:
                json.dump({"version": 1, "meters": self.meters.to_json(), "unrecorded": unrecorded}, handle)
            os.replace(tmp, path)
        except OSError as exc:
            self._once(f"cannot save meters to {path}: {exc.strerror}")

    def restore(self, path: Path) -> None:
        try:
            st = path.lstat()
            if st.st_uid != os.geteuid() or not path.is_file():
                raise ValueError("not a regular file owned by the agent's user")
            self.restore_data(path.read_bytes())
        except FileNotFoundError:
            pass
        except (OSError, ValueError, LiquidError) as exc:
            self.errors["state file"] += 1
            log.warning("agent: ignoring saved meters in %s: %s", path, exc)
        except Exception as exc:  # noqa: BLE001 -- a bug here must not become a crash loop at start
            self._failed("state file", exc)

    def restore_data(self, raw: bytes) -> None:
        """Take over saved meters (what save() writes); LiquidError when it is not that. A bad job
        entry is skipped with a warning, the others are restored."""
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("version") != 1:
                raise ValueError("not a saved agent state (version 1)")
            unrecorded, not_ended = saved_meters(data.get("unrecorded", {}))
            skipped = not_ended + self.meters.restore(data.get("meters"))
        except RecursionError:
            raise LiquidError("saved meters are nested too deeply") from None
        except ValueError as exc:       # JSON, UTF-8, or not our format
            raise LiquidError(f"saved meters unreadable: {str(exc)[:200]}") from None
        for job_id, meter in sorted(unrecorded.items()):
            self.hand_over(job_id, meter)
        if skipped:
            self.errors["state file"] += skipped
            log.warning("agent: skipped %d malformed job(s) in the saved meters", skipped)
        log.info("agent: restored the meters of %d job(s) and %d ended job(s) to record",
                 len(self.meters.jobs), len(unrecorded))

    def snapshot(self) -> dict[str, Any]:
        jobs = {}
        for job_id, meter in sorted(self.meters.jobs.items()):
            held = self.allocations.get(job_id)
            jobs[str(job_id)] = {**meter.to_json(), "usage": meter.usage(self.reader.source, self.recorder.node).render(),
                                 "gpus_from": held.via if held else None}
        return {"node": self.recorder.node, "gpu_source": self.reader.source, "problem": self.reader.problem,
                "slurm_problem": self.allocations.problem, "errors": dict(self.errors),
                "last_error": dict(self.last_error), "jobs": jobs}


def epilog_note(text: str) -> dict[str, str]:
    """`key=value` words the node epilog wrote (`gpus=0,1 nodes=gpu[01-02]`); anything else is ignored."""
    return {k: v[:MAX_NOTE_BYTES] for k, _, v in (w.partition("=") for w in text[:MAX_NOTE_BYTES].split())
            if k in ("gpus", "nodes")}


def _epilog_note(path: str) -> dict[str, str]:
    """The note in a file of the epilog's root-only drop directory; {} when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return epilog_note(handle.read(MAX_NOTE_BYTES).decode("ascii", "replace"))
    except OSError:
        return {}


def _job_running(client) -> Callable[[int], bool | None]:
    def running(job_id: int) -> bool | None:
        try:
            jobs = client.jobs([job_id])
        except LiquidError:
            return None           # Slurm unreachable: ask again later, never guess "ended"
        return bool(jobs) and jobs[0].state in ("RUNNING", "COMPLETING", "SUSPENDED")
    return running


def run(args: argparse.Namespace) -> int:
    config = config_module.load(args.config)
    config = config_module.with_overrides(config, "agent", gpu_source=args.gpu_source, interval_s=args.interval,
                                          record=args.record)
    cfg = config.agent
    from slurm_liquid.cli import log_to_file
    from slurm_liquid.slurm import connect

    if args.log_file or cfg.log_file:
        log_to_file(args.log_file or cfg.log_file)
    reader = open_reader(cfg.gpu_source)
    if reader.problem:
        log.warning("agent: %s", reader.problem)
    node = socket.gethostname().split(".")[0]
    client = connect("cli")
    recorder = Recorder(client, node, cfg.record, cfg.order_wait_s, cfg.ended_wait_s)
    # the sampling loop's own client: a short timeout, so a slow slurmctld delays one sample only
    quick = connect("cli", timeout_s=SLURM_WAIT_S)
    agent = Agent(cfg, reader, recorder, job_running=_job_running(quick),
                  allocations=Allocations(node, quick.gres_detail))
    if args.once:
        agent.sample()
        print(json.dumps(agent.snapshot(), indent=1))
        reader.close()
        return 0
    (agent.ended_dir).mkdir(parents=True, exist_ok=True)
    os.chmod(agent.ended_dir, 0o755)           # only root (the epilog) drops files here
    state = Path(cfg.state_file)
    agent.restore(state)
    threading.Thread(target=agent.record_forever, name="recorder", daemon=True).start()
    if config.staging.enabled:   # staging (slurm_liquid/staging): its own threads, never in this loop
        from slurm_liquid.staging.agent import start as start_staging
        start_staging(config.staging, client, node, cfg.spool_dir)
    from slurm_liquid.admin.files import warn_at_start
    warn_at_start("node")   # the node's Epilog and TaskProlog are this package's, or a warning says how not
    metrics = _metrics(*config_module.metrics_endpoint(config, "agent"), agent)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    log.info("agent on %s: GPUs from %s, every %.1f s, recording to %s", node, reader.source, cfg.interval_s,
             cfg.record)
    saved_at = time.monotonic()
    try:
        while not stopping:
            started = time.monotonic()
            ended = agent.step(time.time())
            agent._guard("metrics", lambda: metrics(time.monotonic() - started))
            if ended or time.monotonic() - saved_at >= SAVE_EVERY_S:
                agent._guard("state file", lambda: agent.save(state))
                saved_at = time.monotonic()
            # at least a tenth of interval_s between passes: a pass that keeps failing is not retried hot
            time.sleep(max(cfg.interval_s - (time.monotonic() - started), cfg.interval_s / 10, 0.05))
    except KeyboardInterrupt:
        pass
    finally:
        agent.save(state)
        reader.close()
        log.info("agent: stopped")
    return 0


def _metrics(address: str, port: int, agent: Agent, serve: bool = True) -> Callable[[float], None]:
    """Prometheus metrics of the agent's own cost, its errors and each job's peaks; a no-op at port 0.
    In the default registry, which the staging threads' counters share (one port per node)."""
    if port <= 0:
        return lambda seconds: None
    from prometheus_client import Counter, Gauge, Histogram, start_http_server

    sample_seconds = Histogram("liquid_agent_sample_seconds", "seconds per sample (processes + GPUs)")
    errors = Counter("liquid_agent_errors_total", "exceptions caught and skipped, by where", ["where"])
    peak = Gauge("liquid_agent_job_gpu_peak_mib", "peak GPU memory per GPU of a running job", ["job"])
    jobs = Gauge("liquid_agent_jobs", "jobs measured on this node")
    under = Counter("liquid_agent_under_estimates_total",
                    "jobs whose measured peak GPU memory per GPU exceeded the estimate in their record")
    counted: dict[str, int] = {}
    if serve:
        try:
            start_http_server(port, addr=address)
        except OSError as exc:
            log.warning("metrics not served on %s:%d: %s", address, port, exc)

    def update(seconds: float) -> None:
        sample_seconds.observe(seconds)
        jobs.set(len(agent.meters.jobs))
        for where, count in list(agent.errors.items()):   # a Counter grows by what was added since
            errors.labels(where).inc(max(count - counted.get(where, 0), 0))
            counted[where] = count
        recorder = getattr(agent, "recorder", None)
        seen = getattr(recorder, "under_estimated", 0)
        under.inc(max(seen - counted.get("", 0), 0))
        counted[""] = seen
        peak.clear()
        for job_id, meter in agent.meters.jobs.items():
            peak.labels(str(job_id)).set(max((g.peak_mib for g in meter.gpus.values()), default=0))
    return update
