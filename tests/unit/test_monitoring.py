"""etc/monitoring: every metric the alert rules and the dashboard name is one the daemon, the agent or
the staging threads export (built here in a fresh process, as they are at start), and the rules load."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "etc" / "monitoring"

EXPORTED = r"""
import types
from prometheus_client import REGISTRY
from slurm_liquid.daemon.metrics import Metrics
from slurm_liquid.agent.cli import _metrics
from slurm_liquid.staging.agent import _Metrics

daemon = Metrics(9, "shadow", "dl2", serve=False)
_metrics("127.0.0.1", 9, types.SimpleNamespace(), serve=False)
_Metrics()
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""], "info": ["_info"]}
for registry in (daemon.registry, REGISTRY):
    for family in registry.collect():
        if family.name.startswith("liquid_"):
            for suffix in SUFFIXES[family.type]:
                print(family.name + suffix)
"""


@pytest.fixture(scope="module")
def exported() -> set[str]:
    out = subprocess.run([sys.executable, "-c", EXPORTED], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def named(text: str) -> set[str]:
    return set(re.findall(r"\bliquid_[a-z_]+", text))


def test_the_alert_rules_and_the_dashboard_name_only_exported_metrics(exported) -> None:
    rules = (MONITORING / "prometheus-rules.yml").read_text()
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    assert named(rules) and named(exprs)
    assert named(rules) - exported == set()
    assert named(exprs) - exported == set()
    # what the issue asks the alerts to cover
    for metric in ("liquid_heartbeat_timestamp_seconds", "liquid_errors_total", "liquid_released_total",
                   "liquid_held_jobs", "liquid_resizes_total", "liquid_staging_failures_total",
                   "liquid_agent_errors_total", "liquid_agent_under_estimates_total"):
        assert metric in rules


def test_counts_are_counters(exported) -> None:
    assert "liquid_agent_errors_total" in exported and "liquid_agent_errors" not in exported
    assert {"liquid_placements_total", "liquid_job_errors_total", "liquid_staging_copies_total"} <= exported


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus) not installed")
def test_promtool_accepts_the_rules() -> None:
    out = subprocess.run(["promtool", "check", "rules", str(MONITORING / "prometheus-rules.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
