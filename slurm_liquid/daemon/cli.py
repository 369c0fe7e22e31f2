"""`slurm-liquid daemon`: the placement loop and the elastic slot (etc/systemd/slurm-liquid-daemon.service).

    wait for an event (a submission, a job end), the poll interval or the next elastic slot
      -> every slot: finish half-done resizes, ask the policy, resize elastic jobs (daemon/elastic.py)
      -> gather the events of one burst (batch_window_s)
      -> one placement pass (held jobs -> nodes -> Slurm)
    and, all the while, a heartbeat that tells job_submit.lua the daemon is alive and in which mode.
"""

from __future__ import annotations

import argparse
import logging
import signal
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="liquid.toml (default: $SLURM_LIQUID_CONFIG or /etc/slurm/liquid.toml)")
    parser.add_argument("--mode", choices=config_module.DAEMON_MODES, default=None, help="override [daemon] mode")
    parser.add_argument("--policy", choices=config_module.ELASTIC_POLICIES, default=None,
                        help="override [elastic] policy")
    parser.add_argument("--once", action="store_true", help="one elastic slot and one placement pass, then exit")
    parser.add_argument("--poll", type=float, default=None, metavar="S",
                        help="override [daemon] poll_s (with --no-events: the polling baseline)")
    parser.add_argument("--no-events", action="store_true",
                        help="ignore spool events and only poll (for measuring what events buy)")
    parser.add_argument("--log-file", default=None, help="append the log here instead of stderr")


def run(args: argparse.Namespace) -> int:
    config = config_module.with_overrides(config_module.load(args.config), mode=args.mode, poll_s=args.poll)
    config = config_module.with_overrides(config, "elastic", policy=args.policy)
    cfg = config.daemon
    from slurm_liquid.cli import log_to_file
    from slurm_liquid.slurm import connect

    if args.log_file or cfg.log_file:
        log_to_file(args.log_file or cfg.log_file)

    client = connect("auto")
    admitter = Admitter(client, config)
    adjuster = _adjuster(client, config, admitter)
    spool = Spool(cfg.spool_dir, owner=cfg.slurm_user)
    spool.prepare()
    metrics = Metrics(config.elastic.metrics_port, cfg.mode, config.elastic.policy)
    if args.once:
        _slot(adjuster, metrics)   # reconciles first: nothing stays requeue-held
        _pass(admitter, metrics)
        return 0
    retrainer = Retrainer(config.estimate)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    log.info("daemon: %s mode, placer %s, elastic policy %s every %.0f s, spool %s", cfg.mode, cfg.placer,
             config.elastic.policy, config.elastic.slot_s, cfg.spool_dir)
    _slot(adjuster, metrics)
    next_poll = 0.0
    next_slot = time.monotonic() + config.elastic.slot_s
    recheck_at = None
    try:
        while not stopping:
            spool.beat(cfg.mode, cfg.lease_s, cfg.stale_after_s)
            now = time.monotonic()
            wake_at = min(next_poll, next_slot, recheck_at or next_poll, now + cfg.heartbeat_s)
            events = spool.wait(max(wake_at - now, 0)) if not args.no_events else _sleep(wake_at - now)
            if events:
                events |= spool.drain(cfg.batch_window_s)
            retrainer.tick()
            if cfg.mode == "off":
                continue
            if time.monotonic() >= next_slot:
                _slot(adjuster, metrics)
                next_slot = time.monotonic() + config.elastic.slot_s
                events.add("slot")   # a resize frees or takes GPUs: place held jobs now
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
        spool.stop_beating()
        log.info("daemon: stopped")
    return 0


def _adjuster(client, config, admitter: Admitter) -> Adjuster:
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
        except KeyError:
            return None
        return progress.read_report(directory, job.job_id, uid)

    return Adjuster(client, config, admitter.topology, Journal(config.elastic.journal), progress=report_of)


def _sleep(seconds: float) -> set[str]:
    time.sleep(max(seconds, 0))
    return set()


def _slot(adjuster: Adjuster, metrics: Metrics) -> SlotReport:
    try:
        report = adjuster.run_slot()
    except LiquidError as exc:  # Slurm unreachable for a moment: the next slot tries again
        log.warning("elastic slot failed: %s", exc)
        metrics.error()
        return SlotReport()
    if report.resized or report.reconciled:
        log.info("slot in %.2f s: resized %s, skipped %s, reconciled %s", report.seconds, report.resized,
                 report.skipped, report.reconciled)
    metrics.slot(report)
    return report


def _pass(admitter: Admitter, metrics: Metrics) -> PassReport:
    started = time.monotonic()
    try:
        report = admitter.run_pass()
    except LiquidError as exc:  # Slurm unreachable for a moment: held jobs keep their leases
        log.warning("pass failed: %s", exc)
        metrics.error()
        return PassReport(errors=[str(exc)])
    for error in report.errors:
        log.warning("%s", error)
    if report.placed or report.released or report.renewed:
        log.info("pass in %.2f s: placed %s, waiting %s, renewed %s, released %s",
                 time.monotonic() - started, report.placed, report.waiting, report.renewed, report.released)
    metrics.placement_pass(report, time.monotonic() - started)
    return report
