"""liquid.toml: defaults, the shipped files, and one clear error per bad setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_liquid import config
from slurm_liquid.config import Config, load, parse, with_overrides
from slurm_liquid.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "etc" / "slurm" / "liquid.toml"
TEST_CLUSTER = ROOT / "containers" / "slurm" / "liquid.toml"


def test_defaults_change_no_job() -> None:
    assert parse("") == Config(path="liquid.toml")
    cfg = Config()
    assert cfg.submit.mode == "advise" and cfg.daemon.mode == "shadow"
    # the defaults satisfy the rule that parse() enforces on files
    d = cfg.daemon
    assert d.lease_s >= 2 * max(d.poll_s, d.heartbeat_s) and d.stale_after_s > d.heartbeat_s


def test_missing_default_file_means_defaults(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(config.CONFIG_ENV, raising=False)
    monkeypatch.setattr(config, "DEFAULT_PATH", tmp_path / "absent.toml")
    assert load() == Config()


def test_shipped_config_parses_and_is_safe() -> None:
    cfg = load(SHIPPED)
    assert cfg.submit.mode == "advise" and cfg.daemon.mode == "shadow"
    # every setting the file writes out equals the built-in default: the file documents them
    assert (cfg.submit, cfg.daemon, cfg.estimate) == (Config().submit, Config().daemon, Config().estimate)


def test_test_cluster_config_parses() -> None:
    cfg = load(TEST_CLUSTER)
    assert cfg.submit.mode == "adjust" and cfg.daemon.mode == "enforce"
    assert cfg.daemon.lease_s == 20 and cfg.daemon.batch_window_s == 0.3
    assert isinstance(cfg.daemon.heartbeat_s, float) and cfg.path == str(TEST_CLUSTER)
    assert cfg.estimate.site == "/etc/slurm/liquid-site.toml"


def test_environment_variable_is_honoured(monkeypatch, tmp_path) -> None:
    path = tmp_path / "site.toml"
    path.write_text('[submit]\nmode = "off"\n')
    monkeypatch.setenv(config.CONFIG_ENV, str(path))
    assert load().submit.mode == "off"
    assert load(TEST_CLUSTER).submit.mode == "adjust"          # an explicit path wins
    monkeypatch.setenv(config.CONFIG_ENV, str(tmp_path / "missing.toml"))
    with pytest.raises(UsageError, match="missing.toml does not exist"):
        load()                                                 # a named file must exist


def test_unreadable_file_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(UsageError, match=re.escape(str(tmp_path))):
        load(tmp_path)                                         # a directory


def test_keys_may_use_dashes_and_ints_become_floats() -> None:
    cfg = parse("[daemon]\nlease-s = 100\npoll_s = 10\nbatch_min = 5\n")
    assert cfg.daemon.lease_s == 100.0 and isinstance(cfg.daemon.lease_s, float)
    assert cfg.daemon.batch_min == 5 and isinstance(cfg.daemon.batch_min, int)


@pytest.mark.parametrize("text, named", [
    ("[submit]\nmoed = 'adjust'\n", "[submit] moed: unknown setting"),
    ("[daemon]\nlease = 10\n", "[daemon] lease: unknown setting"),
    ("[estimate]\nsites = 'x'\n", "[estimate] sites: unknown setting"),
    ("[submitt]\nmode = 'adjust'\n", "unknown section [submitt]"),
    ("submit = 3\n", "[submit] must be a table"),
    ("[submit]\nmode = 'enforce'\n", "[submit] mode = 'enforce'"),
    ("[daemon]\nmode = 'adjust'\n", "[daemon] mode = 'adjust'"),
    ("[daemon]\nplacer = 'best'\n", "[daemon] placer = 'best'"),
    ("[submit]\nmode = 2\n", "[submit] mode: 2 is not a str"),
    ("[submit]\ntimeout_s = '2'\n", "[submit] timeout_s: '2' is not a non-negative number"),
    ("[daemon]\npoll_s = -1\n", "[daemon] poll_s: -1 is not a non-negative number"),
    ("[daemon]\nheartbeat_s = true\n", "[daemon] heartbeat_s: True"),
    ("[estimate]\nsite = 1\n", "[estimate] site: 1 is not a str"),
    ("[daemon]\nlease_s = 50\npoll_s = 30\n", "[daemon] needs lease_s >= 2 x poll_s"),
    ("[daemon]\nlease_s = 60\nheartbeat_s = 40\npoll_s = 5\nstale_after_s = 90\n", "[daemon] needs lease_s"),
    ("[daemon]\nstale_after_s = 5\n", "stale_after_s > heartbeat_s"),
    ("[submit\n", "not valid TOML"),
])
def test_bad_values_name_the_setting(text: str, named: str) -> None:
    with pytest.raises(UsageError) as err:
        parse(text, where="/etc/slurm/liquid.toml")
    message = str(err.value)
    assert message.startswith("/etc/slurm/liquid.toml: ") and named in message


def test_with_overrides_replaces_only_given_daemon_settings() -> None:
    cfg = parse("[daemon]\nmode = 'enforce'\npoll_s = 10\n")
    assert with_overrides(cfg) is cfg
    assert with_overrides(cfg, mode=None, poll_s=None) is cfg
    over = with_overrides(cfg, mode="off", poll_s=2.0)
    assert over.daemon.mode == "off" and over.daemon.poll_s == 2.0
    assert over.daemon.lease_s == cfg.daemon.lease_s and over.submit == cfg.submit
