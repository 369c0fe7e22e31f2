"""No user can stop, stall or steer the daemon: a pass and a slot over hostile jobs, hostile progress
reports and poisoned Slurm answers never raise, and the healthy job beside them is still placed.

In process (hypothesis over Job objects and reports, through the real Admitter and Adjuster), and as
a whole process: `slurm-liquid daemon --once` against a fake Slurm CLI (tests/unit/fakeslurm.py) whose
squeue answer carries the poison the findings named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from slurm_liquid.config import parse
from slurm_liquid.daemon.admit import Admitter
from slurm_liquid.daemon.elastic import Adjuster
from slurm_liquid.daemon.journal import Journal
from slurm_liquid.ledger.placed import parse_placed
from slurm_liquid.slurm import Job, SlurmError
from slurm_liquid.topology import Topology
from tests.unit import fakeslurm
from tests.unit.hostile_daemon import NOW, healthy_held, hostile_jobs, nodes

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = Topology.from_topology_conf((ROOT / "containers" / "slurm" / "topology.conf").read_text())
CONFIG = parse('[daemon]\nmode = "enforce"\nplacer = "auto"\n[elastic]\npolicy = "drf"\n')


class Client:
    """An in-memory Slurm that answers whatever it is given and takes any update."""

    def __init__(self, jobs: list[Job]):
        self._jobs = jobs
        self.updates: list[tuple[int, dict]] = []

    def jobs(self, job_ids=None):
        return list(self._jobs)

    def job(self, job_id):
        return next((j for j in self._jobs if j.job_id == job_id), None)

    def nodes(self):
        return nodes()

    def topology(self):
        return TOPOLOGY

    def batch_script(self, job_id):
        return "#!/bin/sh\n#LIQUID model=resnet50 batch-size=32 elastic=1:4\npython train.py '" + "x " * 5000

    def update_job(self, job_id, **fields):
        if any("\n" in str(v) or len(str(v)) > 1024 for v in fields.values()):
            raise SlurmError("scontrol refused the field")
        self.updates.append((job_id, fields))

    def update_jobs(self, job_ids, **fields) -> None:
        """As scontrol: every job it can update is updated; one that fails fails the command."""
        failures = []
        for job_id in job_ids:
            try:
                self.update_job(job_id, **fields)
            except SlurmError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def signal(self, job_id, signal, batch_only=False):
        pass

    def requeue_hold(self, job_id):
        pass

    def release(self, job_id):
        pass

    def resize(self, job_id, gpus_per_node, num_nodes=None, nodes=None, gpu_type=None):
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_jobs(), max_size=12))
def test_a_pass_over_hostile_jobs_never_raises_and_places_the_healthy_one(others: list[Job]) -> None:
    client = Client([healthy_held(1), *(o for o in others if o.job_id != 1)])
    report = Admitter(client, CONFIG, TOPOLOGY, now=lambda: NOW).run_pass()
    taken = sum(sum(parse_placed(p).values()) for j, p in report.placed.items() if j != 1 and ":shard" not in p)
    assert 1 in report.placed or taken >= 13, (report, taken)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_jobs(), max_size=8), st.lists(st.one_of(
    st.none(), st.text(max_size=5), st.dictionaries(st.sampled_from(["step", "total", "epoch", "checkpoint_time"]),
                                                    st.one_of(st.integers(), st.floats(), st.text(max_size=3),
                                                              st.booleans(), st.none()))), min_size=1, max_size=3))
def test_a_slot_over_hostile_jobs_and_reports_never_raises(others: list[Job], reports: list) -> None:
    client = Client(others)
    work = Adjuster(client, CONFIG, TOPOLOGY, Journal(":memory:", now=lambda: NOW),
                    progress=lambda job: reports[job.job_id % len(reports)], now=lambda: NOW)
    work.run_slot()
    work.resizer.step()


# ---------------------------------------------------------------- the whole process, fake Slurm CLI

def test_daemon_once_survives_the_poisoned_queue_and_places_the_healthy_job(tmp_path: Path) -> None:
    """Findings: a far-future begin time, non-UTF-8 bytes in a name or comment, 400-digit numbers and
    NaN in squeue's answer, placers that raise: each crashed the daemon at every start."""
    fake = fakeslurm.install(tmp_path / "bin", tmp_path / "calls.jsonl", fakeslurm.poisoned_queue())
    config = tmp_path / "liquid.toml"
    config.write_text(f'[daemon]\nmode = "enforce"\nspool_dir = "{tmp_path}/spool"\nslurm_user = "root"\n'
                      f'[elastic]\npolicy = "drf"\njournal = "{tmp_path}/journal.sqlite"\n'
                      f'progress_dir = "{tmp_path}/progress"\n')
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "slurm_liquid", "daemon", "--once", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert seconds < 30
    beat = (tmp_path / "spool" / "heartbeat").read_text().split()
    assert abs(int(beat[0]) - time.time()) < 60 and beat[1] == "enforce"
    updates = [c for c in fakeslurm.calls(tmp_path / "calls.jsonl") if c[:2] == ["scontrol", "update"]]
    healthy = [c for c in updates if f"JobId={fakeslurm.HEALTHY}" in c]
    assert healthy and any(a.startswith("ReqNodeList=gpu") for a in healthy[0]), updates


def test_the_daemon_honours_sigterm_within_seconds_while_a_resize_waits(tmp_path: Path) -> None:
    """Finding 2: SIGTERM was ignored for the whole checkpoint wait. Now the wait is between turns of
    the loop: the heartbeat goes on, and SIGTERM ends the daemon (and removes the heartbeat) at once."""
    import signal

    queue = fakeslurm.with_elastic_running(fakeslurm.recorded_queue(), grace_s=300)
    fake = fakeslurm.install(tmp_path / "bin", tmp_path / "calls.jsonl", queue)
    config = tmp_path / "liquid.toml"
    config.write_text(f'[daemon]\nmode = "enforce"\nspool_dir = "{tmp_path}/spool"\nslurm_user = "root"\n'
                      f'heartbeat_s = 1\nstale_after_s = 4\npoll_s = 2\nlease_s = 10\n'
                      f'[elastic]\npolicy = "drf"\njournal = "{tmp_path}/journal.sqlite"\n'
                      # the resize's wait is under test, not whether the change pays for its restart
                      f'payback = 0\nprogress_dir = "{tmp_path}/progress"\n')
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    proc = subprocess.Popen([sys.executable, "-m", "slurm_liquid", "daemon", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, stdin=subprocess.DEVNULL)
    heartbeat = tmp_path / "spool" / "heartbeat"
    try:
        deadline = time.monotonic() + 60
        while not any(c[:2] == ["scancel", "--signal=USR1"] for c in fakeslurm.calls(tmp_path / "calls.jsonl")):
            assert time.monotonic() < deadline and proc.poll() is None, "no resize started"
            time.sleep(0.2)
        first = heartbeat.read_text().split()[0]
        time.sleep(3)                                   # the resize waits; the heartbeat does not
        assert heartbeat.read_text().split()[0] != first
        assert not any(c[:2] == ["scontrol", "requeuehold"] for c in fakeslurm.calls(tmp_path / "calls.jsonl"))
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert time.monotonic() - stopped < 5 and proc.returncode == 0
        assert not heartbeat.exists()                   # a clean stop: job_submit.lua holds nothing new
    finally:
        if proc.poll() is None:
            proc.kill()
        stderr = proc.stderr.read().decode(errors="replace")
    assert "Traceback" not in stderr, stderr[-2000:]
