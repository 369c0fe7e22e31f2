"""The daemon's retrain schedule: when it starts the fit, what it runs, how it ends a stuck one."""

from __future__ import annotations

import os
from pathlib import Path

from slurm_liquid.config import EstimateConfig
from slurm_liquid.daemon import retrain
from slurm_liquid.daemon.retrain import Retrainer


class FakeChild:
    def __init__(self, argv, stdout, **_):
        self.argv, self.stdout, self.code, self.killed = argv, stdout, None, False
        stdout.write("installed: mean error 5.9% < 26.0% (the prior alone)\n")
        stdout.flush()

    def poll(self):
        return self.code

    def kill(self):
        self.killed = True

    def wait(self):
        return -9


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, **settings) -> tuple[Retrainer, list[FakeChild], Clock]:
    cfg = EstimateConfig(correction=str(tmp_path / "correction.json"), retrain_every_h=24, **settings)
    children: list[FakeChild] = []
    clock = Clock()

    def popen(argv, **kw):
        children.append(FakeChild(argv, **kw))
        return children[-1]

    return Retrainer(cfg, clock=clock, popen=popen), children, clock


def test_off_without_a_period_or_a_correction_path(tmp_path: Path) -> None:
    for cfg in (EstimateConfig(correction="/x.json"), EstimateConfig(retrain_every_h=1)):
        assert not Retrainer(cfg, popen=lambda *a, **k: 1 / 0).enabled


def test_starts_when_the_installed_model_is_older_than_the_period(tmp_path: Path, caplog) -> None:
    caplog.set_level("INFO")
    r, children, clock = make(tmp_path, site="/etc/slurm/site.toml", retrain_since_days=30, retrain_allow_standin=True)
    model = tmp_path / "correction.json"
    model.write_text("{}")
    os.utime(model, (clock.now - 3600, clock.now - 3600))     # refit an hour ago: not due
    r.tick()
    assert children == []
    os.utime(model, (clock.now - 25 * 3600,) * 2)
    r.tick()
    argv = children[0].argv
    assert argv[-7:] == ["train", "--from-sacct", "--since", "30d", "--install", str(model), "--allow-standin"]
    assert argv[argv.index("--site") + 1] == "/etc/slurm/site.toml"
    r.tick()                                   # still running: nothing new
    assert len(children) == 1
    children[0].code = 0
    r.tick()
    assert "mean error 5.9%" in caplog.text and r.child is None
    clock.now += 3600
    r.tick()                                   # the last try counts even if it installed nothing
    assert len(children) == 1


def test_a_stuck_fit_is_killed(tmp_path: Path) -> None:
    r, children, clock = make(tmp_path)
    r.tick()                                   # no model yet: due at once
    clock.now += retrain.TIMEOUT_S + 1
    r.tick()
    assert children[0].killed and r.child is None
