"""Prometheus metrics of the daemon (`[elastic] metrics_port`; off at 0).

prometheus-client is imported only when metrics are on, so that the daemon runs without it."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class Metrics:
    """Counters and gauges the loops update; a no-op stand-in when metrics are off."""

    def __init__(self, port: int = 0, mode: str = "", policy: str = ""):
        self.enabled = port > 0
        if not self.enabled:
            return
        from prometheus_client import Counter, Gauge, Histogram, Info, start_http_server

        self.held = Gauge("liquid_held_jobs", "jobs held for placement, waiting for GPUs")
        self.placements = Counter("liquid_placements_total", "jobs placed and started by the daemon")
        self.released = Counter("liquid_released_total", "held jobs given to Slurm unplaced (max_hold_s)")
        self.resizes = Counter("liquid_resizes_total", "resizes of elastic jobs by result", ["result"])
        self.errors = Counter("liquid_errors_total", "failed Slurm commands and passes")
        self.job_errors = Counter("liquid_job_errors_total", "jobs skipped after their handling raised, by stage",
                                  ["stage"])
        self.beats = Counter("liquid_heartbeats_total", "heartbeats written")
        self.pass_seconds = Histogram("liquid_placement_pass_seconds", "seconds per placement pass")
        self.slot_seconds = Histogram("liquid_elastic_slot_seconds", "seconds per elastic slot (decision + changes)")
        Info("liquid_daemon", "daemon configuration").info({"mode": mode, "policy": policy})
        start_http_server(port)
        log.info("metrics on port %d", port)

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
            self.job_errors.labels("slot").inc(len(report.failed))
            self.slot_seconds.observe(report.seconds)

    def error(self) -> None:
        if self.enabled:
            self.errors.inc()

    def beat(self) -> None:
        if self.enabled:
            self.beats.inc()
