"""`slurm-liquid daemon`: the placement loop and the elastic slot (etc/systemd/slurm-liquid-daemon.service).

    wait for an event (a submission, a job end), the poll interval or the next elastic slot (at most 1 s)
      -> every turn: advance resizes in flight a step (daemon/resize.py: never a wait)
      -> every slot: ask the policy, start resizes of elastic jobs (daemon/elastic.py)
      -> gather the events of one burst (batch_window_s)
      -> one placement pass (held jobs -> nodes -> Slurm)
    and, on a thread of its own, a heartbeat that tells job_submit.lua the daemon is alive and in which
    mode, written while the loop keeps coming round (`[daemon] stall_after_s`).

Nothing a user submits can stop or stall it: every Slurm command has a timeout (`slurm_timeout_s`),
every job's work is guarded (an error skips that job, counted, not the pass), a pass or slot that
raises anything is logged and counted and the loop goes on, and SIGTERM ends it within about a second
plus the Slurm command in flight.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time

from slurm_liquid import config as config_module
from slurm_liquid.daemon.admit import Admitter, PassReport
from slurm_liquid.daemon.elastic import Adjuster, SlotReport
from slurm_liquid.daemon.journal import Journal
from slurm_liquid.daemon.metrics import Metrics
from slurm_liquid.daemon.retrain import Retrainer
from slurm_liquid.daemon.spool import Spool
from slurm_liquid.errors import LiquidError

log = logging.getLogger("slurm_liquid.daemon")
# After a submission event the job may not be in squeue yet (job_submit.lua runs before the job
# exists): look again this much later when a pass found nothing to do.
RECHECK_S = 1.0
TURN_S = 1.0     # the longest the loop sleeps: how soon SIGTERM and resize steps are seen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="liquid.toml (default: $SLURM_LIQUID_CONFIG or /etc/slurm/liquid.toml)")
    parser.add_argument("--mode", choices=config_module.DAEMON_MODES, default=None, help="override [daemon] mode")
    parser.add_argument("--policy", choices=config_module.ELASTIC_POLICIES, default=None,
                        help="override [elastic] policy")
    parser.add_argument("--payback", type=float, default=None, metavar="F",
                        help="override [elastic] payback (0: every change the policy asks for, "
                             "without weighing the restart)")
    parser.add_argument("--start-wider", action=argparse.BooleanOptionalAction, default=None,
                        help="override [elastic] start_wider (an elastic job alone in the queue starts at up to "
                             "one node's free GPUs)")
    parser.add_argument("--once", action="store_true", help="one elastic slot and one placement pass, then exit")
    parser.add_argument("--check", action="store_true", help="check the config, files and Slurm access, change nothing")
    parser.add_argument("--poll", type=float, default=None, metavar="S",
                        help="override [daemon] poll_s (with --no-events: the polling baseline)")
    parser.add_argument("--no-events", action="store_true",
                        help="ignore spool events and only poll (for measuring what events buy)")
    parser.add_argument("--log-file", default=None, help="append the log here instead of stderr")


class Heartbeat:
    """Writes the heartbeat every `heartbeat_s` on its own thread, as long as the loop has come round
    within `stall_after_s` (`tick()`): a wedged loop stops the heartbeat, and job_submit.lua stops
    holding new jobs (fail open) instead of holding them for a daemon that does nothing."""

    def __init__(self, spool: Spool, cfg, metrics: Metrics, clock=time.monotonic):
        self.spool, self.cfg, self.metrics, self.clock = spool, cfg, metrics, clock
        self._last_turn = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def tick(self) -> None:
        self._last_turn = self.clock()

    def beat_once(self) -> bool:
        if self.clock() - self._last_turn > self.cfg.stall_after_s:
            return False
        try:
            self.spool.beat(self.cfg.mode, self.cfg.lease_s, self.cfg.stale_after_s)
            self.metrics.beat()
            return True
        except OSError as exc:
            log.warning("heartbeat not written: %s", exc)
            return False

    def start(self) -> None:
        self.beat_once()
        self._thread.start()

    def _run(self) -> None:
        stalled = False
        while not self._stop.wait(self.cfg.heartbeat_s):
            beat = self.beat_once()
            if not beat and not stalled:
                log.error("loop has not come round for %.0f s: heartbeat stopped, new jobs are not held",
                          self.cfg.stall_after_s)
            stalled = not beat

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.spool.stop_beating()


def run(args: argparse.Namespace) -> int:
    config = config_module.with_overrides(config_module.load(args.config), mode=args.mode, poll_s=args.poll)
    config = config_module.with_overrides(config, "elastic", policy=args.policy, payback=args.payback,
                                          start_wider=args.start_wider)
    cfg = config.daemon
    from slurm_liquid.cli import log_to_file
    from slurm_liquid.slurm import connect

    if args.check:   # read-only: slurm_liquid/admin/doctor.py
        from slurm_liquid.admin.doctor import daemon_check
        return daemon_check(args.config, lambda: connect("auto", timeout_s=cfg.slurm_timeout_s))
    if args.log_file or cfg.log_file:
        log_to_file(args.log_file or cfg.log_file)
    from slurm_liquid.admin.files import warn_at_start
    warn_at_start("controller")   # the Lua files slurmctld runs are this package's, or a warning says how not

    client = connect("auto", timeout_s=cfg.slurm_timeout_s)
    adjuster = _adjuster(client, config)
    admitter = Admitter(client, config, adjuster.topology, promised=adjuster.resizer.in_flight)
    spool = Spool(cfg.spool_dir, owner=cfg.slurm_user)
    spool.prepare()
    address, port = config_module.metrics_endpoint(config, "daemon")
    metrics = Metrics(port, cfg.mode, config.elastic.policy, address)
    if args.once:
        _slot(adjuster, metrics)   # steps resizes first: nothing stays requeue-held
        _pass(admitter, metrics)
        # Alive a moment ago: job_submit.lua may hold new jobs until the heartbeat is stale, and
        # their leases run out by themselves if no daemon follows.
        Heartbeat(spool, cfg, metrics).beat_once()
        return 0
    retrainer = Retrainer(config.estimate)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    heartbeat = Heartbeat(spool, cfg, metrics)
    log.info("daemon: %s mode, placer %s, elastic policy %s every %.0f s, spool %s", cfg.mode, cfg.placer,
             config.elastic.policy, config.elastic.slot_s, cfg.spool_dir)
    heartbeat.start()
    _slot(adjuster, metrics)
    next_poll = 0.0
    next_slot = time.monotonic() + config.elastic.slot_s
    recheck_at = None
    try:
        while not stopping.is_set():
            heartbeat.tick()
            now = time.monotonic()
            wake_at = min(next_poll, next_slot, recheck_at or next_poll, now + TURN_S)
            events = spool.wait(max(wake_at - now, 0)) if not args.no_events else _sleep(wake_at - now)
            if stopping.is_set():
                break
            if events:
                events |= spool.drain(cfg.batch_window_s)
            _guarded("retrain", retrainer.tick, metrics)
            if cfg.mode == "off":
                continue
            if time.monotonic() >= next_slot:
                _slot(adjuster, metrics)
                next_slot = time.monotonic() + config.elastic.slot_s
                events.add("slot")   # a resize frees or takes GPUs: place held jobs now
            elif _steps(adjuster, metrics):
                events.add("resized")
            now = time.monotonic()
            due = events or now >= next_poll or (recheck_at is not None and now >= recheck_at)
            if not due:
                continue
            report = _pass(admitter, metrics)
            next_poll = time.monotonic() + cfg.poll_s
            recheck_at = time.monotonic() + RECHECK_S if "submitted" in events and not report.busy else None
    except KeyboardInterrupt:
        pass
    finally:
        heartbeat.stop()
        log.info("daemon: stopped")
    return 0


def _adjuster(client, config) -> Adjuster:
    import pwd

    from slurm_liquid import progress

    directory = config.elastic.progress_dir
    try:
        progress.ensure_directory(directory)
    except OSError as exc:
        log.warning("progress directory %s: %s; elastic jobs are judged without their reports", directory, exc)

    def report_of(job):
        try:
            uid = pwd.getpwnam(job.user).pw_uid
        except (KeyError, ValueError):   # unknown user, or a name with a NUL byte
            return None
        return progress.read_report(directory, job.job_id, uid)

    from slurm_liquid.speed import MeasuredSpeedModel

    # GPUs per node: set from Slurm's nodes every slot (the adjuster's observe).
    speed = MeasuredSpeedModel(1, journal=config.elastic.speed_journal or None)
    return Adjuster(client, config, client.topology(), Journal(config.elastic.journal), progress=report_of,
                    speed=speed)


def _sleep(seconds: float) -> set[str]:
    time.sleep(max(seconds, 0))
    return set()


def _guarded(what: str, action, metrics: Metrics, default=None):
    """Run one stage of the loop; whatever it raises is logged and counted, and the loop goes on."""
    try:
        return action()
    except LiquidError as exc:  # Slurm unreachable for a moment: the next turn tries again
        log.warning("%s failed: %s", what, exc)
    except Exception:  # noqa: BLE001 -- a bug or a poison input must not end the daemon
        log.exception("%s failed with an unexpected error; the loop goes on", what)
    metrics.error()
    return default


def _steps(adjuster: Adjuster, metrics: Metrics) -> bool:
    """Advance resizes in flight; True when one became final (GPUs changed hands)."""
    if not adjuster.resizer.busy():
        return False
    return bool(_guarded("resize step", adjuster.resizer.step, metrics, []))


def _slot(adjuster: Adjuster, metrics: Metrics) -> SlotReport:
    report = _guarded("elastic slot", adjuster.run_slot, metrics, SlotReport())
    if report.resized or report.reconciled or report.started or report.failed:
        log.info("slot in %.2f s: resized %s, started %s, skipped %s, failed %s, closed %s", report.seconds,
                 report.resized, report.started, report.skipped, report.failed, report.reconciled)
    metrics.slot(report)
    return report


def _pass(admitter: Admitter, metrics: Metrics) -> PassReport:
    started = time.monotonic()
    report = _guarded("placement pass", admitter.run_pass, metrics, None)
    if report is None:
        return PassReport(errors=["pass failed"])
    for error in report.errors:
        log.warning("%s", error)
    if report.placed or report.released or report.renewed or report.failed:
        log.info("pass in %.2f s: placed %s, waiting %s, renewed %s, released %s, failed %s",
                 time.monotonic() - started, report.placed, report.waiting, report.renewed, report.released,
                 report.failed)
    metrics.placement_pass(report, time.monotonic() - started)
    return report
