"""`slurm-liquid doctor` on the real cluster: the set-up broken in four ways, each diagnosed with its fix,
then repaired with `slurm-liquid admin install` (and the daemon and the agent started again). Also the
daemon's start-up warning about a stale Lua file, and `daemon --check`."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration
NODE = "gpu01"


def doctor(cluster: Cluster, host: str, *args: str) -> dict:
    proc = cluster.exec(host, "slurm-liquid", "doctor", "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] == (proc.returncode == 0)
    return report


def failed(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in report["findings"]:
        if f["status"] == "fail":
            out.setdefault(f["check"], []).append(f)
    return out


def sh(cluster: Cluster, host: str, script: str) -> str:
    proc = cluster.exec(host, "sh", "-c", script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_doctor_diagnoses_a_broken_set_up_and_admin_install_repairs_it(cluster: Cluster) -> None:
    # Agents may have missed jobs of earlier tests (which stop them): that check is not under test here.
    # the controller starts the daemon after slurmctld answers: wait for its first heartbeat
    wait_for("the daemon's heartbeat", lambda: cluster.exec("slurmctld", "test", "-s",
                                                            "/var/spool/slurm-liquid/heartbeat").returncode == 0,
             timeout=60)
    healthy = doctor(cluster, "slurmctld", "--role", "controller")
    assert set(failed(healthy)) <= {"agents"}, healthy
    assert failed(doctor(cluster, NODE, "--role", "node")) == {}
    try:
        # 1. the daemon is dead: its heartbeat goes stale
        assert cluster.exec("slurmctld", "entrypoint.sh", "daemon-stop").returncode == 0
        # 2. an old cli_filter.lua (another ledger version) is what sbatch runs
        sh(cluster, "slurmctld", "sed -i 's|^local VERSION = \"liquid/1\"|local VERSION = \"liquid/0\"|' "
                                 "/etc/slurm/cli_filter.lua")
        # 3. on a GPU node: the node Epilog lost its mode, and the agent is not running
        sh(cluster, NODE, "chmod 644 /etc/slurm/liquid-node-epilog")
        assert cluster.exec(NODE, "entrypoint.sh", "agent-stop").returncode == 0
        wait_for("the agent to stop", lambda: not cluster.exec(NODE, "pgrep", "-f", "slurm-liquid agent").stdout,
                 timeout=30)
        time.sleep(9)   # the test cluster's stale_after_s is 8
        ctl = failed(doctor(cluster, "slurmctld", "--role", "controller"))
        assert "the daemon is stopped or wedged" in ctl["daemon"][0]["message"]
        assert "systemctl restart slurm-liquid-daemon" in ctl["daemon"][0]["fix"]
        [stale] = ctl["files"]
        assert stale["message"].startswith("/etc/slurm/cli_filter.lua: its ledger constants block")
        assert "slurm-liquid admin install --dest /etc/slurm" in stale["fix"]
        node = failed(doctor(cluster, NODE, "--role", "node"))
        assert node["files"][0]["message"] == "/etc/slurm/liquid-node-epilog: not executable (mode 644)"
        assert "not running" in node["agent"][0]["message"]
        # 4. a site's own Epilog= before `include liquid.conf`: Slurm keeps the last one (a copy of /etc/slurm)
        sh(cluster, "slurmctld", "rm -rf /tmp/doctor-conf && cp -a /etc/slurm /tmp/doctor-conf && "
                                 "sed -i '1i Epilog=/usr/local/sbin/site-epilog' /tmp/doctor-conf/slurm.conf")
        merged = failed(doctor(cluster, "slurmctld", "--role", "controller", "--slurm-dir", "/tmp/doctor-conf"))
        [lost] = merged["slurm.conf"]
        assert lost["message"].startswith("Epilog=/usr/local/sbin/site-epilog (/tmp/doctor-conf/slurm.conf:1) is "
                                          "replaced by Epilog=/etc/slurm/liquid-node-epilog")
        # the daemon, started on the stale file, says so in its log
        assert cluster.exec("slurmctld", "entrypoint.sh", "daemon-start").returncode == 0
        log = sh(cluster, "slurmctld", "tail -n 50 /var/log/slurm/liquid-daemon.out")
        assert "/etc/slurm/cli_filter.lua: its ledger constants block" in log and "admin install" in log
    finally:
        # repair as an admin would: the package's files back, the daemon and the agent running
        repaired = sh(cluster, "slurmctld", "slurm-liquid admin install --dest /etc/slurm --role controller "
                                            "--no-systemd --no-docs")
        sh(cluster, NODE, "slurm-liquid admin install --dest /etc/slurm --role node --no-systemd --no-docs")
        cluster.exec("slurmctld", "entrypoint.sh", "daemon-start")
        cluster.exec(NODE, "entrypoint.sh", "agent-start")
    assert "updated    /etc/slurm/cli_filter.lua" in repaired and "kept       /etc/slurm/liquid.toml" in repaired
    assert set(failed(doctor(cluster, "slurmctld", "--role", "controller"))) <= {"agents"}
    assert failed(doctor(cluster, NODE, "--role", "node")) == {}


def test_daemon_check_reads_slurm_and_writes_nothing(cluster: Cluster) -> None:
    before = sh(cluster, "slurmctld", "ls -l --time-style=+%s.%N /var/spool/slurm-liquid/events; "
                                      "ls /var/lib/slurm-liquid")
    proc = cluster.exec("slurmctld", "slurm-liquid", "daemon", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK    slurm: read 4 nodes (16 GPUs)" in proc.stdout
    assert sh(cluster, "slurmctld", "ls -l --time-style=+%s.%N /var/spool/slurm-liquid/events; "
                                    "ls /var/lib/slurm-liquid") == before
