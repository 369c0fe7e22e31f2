"""Prometheus metrics of the daemon (`[metrics] address`, `port`; off at port 0).

prometheus-client is imported only when metrics are on, so that the daemon runs without it. Every
metric lives in the instance's own registry: two daemons in one process (tests) never collide, and a
port already taken is a warning, never a reason for the daemon to stop. etc/monitoring has the
dashboard and the alert rules over these names (tests/unit/test_monitoring.py holds them together)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class Metrics:
    """Counters and gauges the loops update; a no-op stand-in when metrics are off."""

    def __init__(self, port: int = 0, mode: str = "", policy: str = "", address: str = "127.0.0.1",
                 serve: bool = True):
        self.enabled = port > 0
        if not self.enabled:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

        self.registry = r = CollectorRegistry()
        self.held = Gauge("liquid_held_jobs", "jobs held for placement, waiting for GPUs", registry=r)
        self.placements = Counter("liquid_placements_total", "jobs placed and started by the daemon", registry=r)
        self.released = Counter("liquid_released_total", "held jobs given to Slurm unplaced (max_hold_s)", registry=r)
        self.resizes = Counter("liquid_resizes_total", "resizes of elastic jobs by result", ["result"], registry=r)
        self.errors = Counter("liquid_errors_total", "failed Slurm commands and passes", registry=r)
        self.job_errors = Counter("liquid_job_errors_total", "jobs skipped after their handling raised, by stage",
                                  ["stage"], registry=r)
        self.beats = Counter("liquid_heartbeats_total", "heartbeats written", registry=r)
        self.last_beat = Gauge("liquid_heartbeat_timestamp_seconds", "when the last heartbeat was written (Unix time)",
                               registry=r)
        self.pass_seconds = Histogram("liquid_placement_pass_seconds", "seconds per placement pass", registry=r)
        self.slot_seconds = Histogram("liquid_elastic_slot_seconds", "seconds per elastic slot (decision + changes)",
                                      registry=r)
        Info("liquid_daemon", "daemon configuration", registry=r).info({"mode": mode, "policy": policy})
        for result in ("done", "skipped", "started", "failed"):   # every series exists from the start
            self.resizes.labels(result)
        for stage in ("pass", "slot"):
            self.job_errors.labels(stage)
        if not serve:
            return
        try:
            start_http_server(port, addr=address, registry=r)
            log.info("metrics on %s:%d", address, port)
        except OSError as exc:
            log.warning("metrics not served on %s:%d: %s", address, port, exc)

    def placement_pass(self, report, seconds: float) -> None:
        if self.enabled:
            self.held.set(len(report.waiting))
            self.placements.inc(len(report.placed))
            self.released.inc(len(report.released))
            self.errors.inc(len(report.errors))
            self.job_errors.labels("pass").inc(len(report.failed))
            self.pass_seconds.observe(seconds)

    def slot(self, report) -> None:
        if self.enabled:
            self.resizes.labels("done").inc(len(report.resized))
            self.resizes.labels("skipped").inc(len(report.skipped))
            self.resizes.labels("started").inc(len(report.started))
            self.resizes.labels("failed").inc(len(report.failed))
            self.job_errors.labels("slot").inc(len(report.failed))
            self.slot_seconds.observe(report.seconds)

    def error(self) -> None:
        if self.enabled:
            self.errors.inc()

    def beat(self) -> None:
        if self.enabled:
            self.beats.inc()
            self.last_beat.set_to_current_time()
