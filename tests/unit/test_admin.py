"""`slurm-liquid admin install` and `slurm-liquid doctor` on a scratch /etc/slurm, and the start-up
warning of the daemon and the agent when the installed Slurm files are not this package's."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_liquid.admin import doctor as doctor_module
from slurm_liquid.admin import files, slurmconf
from slurm_liquid.cli import main

REPO = Path(__file__).resolve().parents[2]


def install(tmp_path: Path, *extra: str) -> int:
    return main(["admin", "install", "--dest", str(tmp_path / "slurm"), "--systemd-dir", str(tmp_path / "systemd"),
                 "--doc-dir", str(tmp_path / "doc"), *extra])


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    (tmp_path / "slurm").mkdir()
    assert install(tmp_path, "--quiet") == 0
    return tmp_path / "slurm"


def test_install_writes_every_file_with_its_mode_and_a_second_run_changes_nothing(tmp_path, etc, capsys) -> None:
    for item in files.SITE_FILES:
        path = files.destination(item, etc, tmp_path / "systemd", tmp_path / "doc")
        assert path.read_text() == (REPO / item.source).read_text()
        assert path.stat().st_mode & 0o777 == item.mode
    capsys.readouterr()
    assert install(tmp_path) == 0
    assert "0 file(s) changed" in capsys.readouterr().out
    assert files.drift(files.ROLES, etc) == []


def test_dry_run_shows_a_diff_and_writes_nothing(tmp_path, etc, capsys) -> None:
    lua = etc / "job_submit.lua"
    lua.write_text(lua.read_text().replace('local VERSION = "liquid/1"', 'local VERSION = "liquid/0"'))
    capsys.readouterr()
    assert install(tmp_path, "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"would update {lua}" in out and '-local VERSION = "liquid/0"' in out and '+local VERSION = "liquid/1"' in out
    assert "liquid/0" in lua.read_text()


def test_the_sites_liquid_toml_is_never_replaced(tmp_path, etc, capsys) -> None:
    toml = etc / "liquid.toml"
    toml.write_text('[daemon]\nmode = "enforce"\n')
    capsys.readouterr()
    assert install(tmp_path) == 0
    out = capsys.readouterr().out
    assert toml.read_text() == '[daemon]\nmode = "enforce"\n' and f"kept       {toml}" in out


def test_drift_names_stale_constants_edits_and_missing_files(etc) -> None:
    lua = etc / "cli_filter.lua"
    lua.write_text(lua.read_text().replace("MAX_LEASE_S = 3600", "MAX_LEASE_S = 60"))
    (etc / "liquid-epilog").write_text((etc / "liquid-epilog").read_text() + "# site edit\n")
    (etc / "liquid-node-epilog").unlink()
    found = {d.path.name: d.problem for d in files.drift(files.ROLES, etc)}
    assert found == {"cli_filter.lua": "constants", "liquid-epilog": "differs", "liquid-node-epilog": "missing"}
    # each role checks only its own files
    assert {d.path.name for d in files.drift(("login",), etc)} == {"cli_filter.lua"}


def test_the_start_up_warning_says_what_differs_and_never_raises(etc, caplog) -> None:
    (etc / "job_submit.lua").write_text("-- an old copy\n")
    with caplog.at_level(logging.WARNING, logger="slurm_liquid.admin.files"):
        found = files.warn_at_start("controller", etc)
    assert [d.path.name for d in found] == ["job_submit.lua"]
    assert "ledger constants" in caplog.text and "admin install" in caplog.text
    assert files.warn_at_start("controller", etc / "nowhere")  # missing files: warned, no exception


SLURM_CONF = """\
ClusterName=test
SlurmctldHost=ctl
Epilog=/usr/local/sbin/site-epilog
AccountingStoreFlags=job_comment
NodeName=gpu[01-02] Gres=gpu:4 State=UNKNOWN
include {etc}/liquid.conf
"""


class FakeSlurm:
    def __init__(self, sacct: str = "", ping: str = "Slurmctld(primary) at ctl is UP\n"):
        self.sacct, self.ping = sacct, ping

    def __call__(self, argv):
        out = {"scontrol": self.ping, "sacct": self.sacct}[argv[0]]
        return subprocess.CompletedProcess(argv, 0, out, "")


def run_doctor(etc: Path, roles=("controller",), **kwargs) -> dict[str, list[doctor_module.Finding]]:
    doc = doctor_module.Doctor(roles, str(etc), str(etc / "liquid.toml"), run=kwargs.pop("run", FakeSlurm()))
    found: dict[str, list] = {}
    for f in doc.run_all(**kwargs):
        found.setdefault(f.check, []).append(f)
    return found


def bad(found, check: str) -> list[str]:
    return [f.message for f in found.get(check, []) if f.status == "fail"]


def healthy_spool(etc: Path, tmp_path: Path, age: float = 0, mode: str = "shadow") -> None:
    spool = tmp_path / "spool"
    (spool / "events").mkdir(parents=True, exist_ok=True)
    (spool / "heartbeat").write_text(f"{int(time.time() - age)} {mode} 60 20\n")
    user = __import__("pwd").getpwuid(os.getuid()).pw_name
    (etc / "liquid.toml").write_text(f'[daemon]\nspool_dir = "{spool}"\nslurm_user = "{user}"\n')


def test_doctor_finds_the_epilog_that_liquid_conf_silently_replaces(tmp_path, etc) -> None:
    (etc / "slurm.conf").write_text(SLURM_CONF.format(etc=etc))
    settings = slurmconf.read(etc / "slurm.conf")
    assert slurmconf.last(settings, "JobSubmitPlugins").value == "lua"     # the include is followed
    healthy_spool(etc, tmp_path)
    found = run_doctor(etc, roles=("controller", "node"))
    [message] = bad(found, "slurm.conf")
    assert "Epilog=/usr/local/sbin/site-epilog" in message and "replaced by Epilog=/etc/slurm/liquid-node-epilog" in message
    fix = next(f.fix for f in found["slurm.conf"] if f.status == "fail")
    assert "liquid-node-epilog" in fix


def test_doctor_on_a_healthy_controller_and_its_json(tmp_path, etc, capsys, monkeypatch) -> None:
    (etc / "slurm.conf").write_text(SLURM_CONF.format(etc=etc).replace("Epilog=/usr/local/sbin/site-epilog\n", ""))
    healthy_spool(etc, tmp_path)
    for name in ("job_submit.lua", "liquid-epilog"):   # the site's spool, as docs/admin.md says to set it
        path = etc / name
        path.write_text(path.read_text().replace("/var/spool/slurm-liquid", str(tmp_path / "spool")))
    sacct = ("1|gpu01|cpu=4,gres/gpu=1|liquid/1 state=placed; liquid-used/1 by=nvml gpus=1 peak=900 util=50 "
             "host=1 cpu=1 shared=0 secs=9 n=2 nodes=gpu01\n2|gpu02|cpu=1|\n")
    found = run_doctor(etc, run=FakeSlurm(sacct))
    failed = {check: bad(found, check) for check in found if bad(found, check)}
    # the helper path of cli_filter.lua (/usr/local/bin/slurm-liquid) is this machine's business
    assert set(failed) <= {"helper", "files", "install"}, failed
    assert not [m for m in failed.get("files", []) if "owned by" not in m]   # a test runs as a user
    assert [f.status for f in found["agents"]] == ["ok"] and [f.status for f in found["daemon"]] == ["ok"]


def test_doctor_sees_a_dead_daemon_a_bad_spool_and_a_silent_agent(tmp_path, etc) -> None:
    (etc / "slurm.conf").write_text(SLURM_CONF.format(etc=etc))
    healthy_spool(etc, tmp_path, age=400)
    (tmp_path / "spool" / "events").rmdir()
    sacct = "7|gpu[01-02]|cpu=8,gres/gpu=8|liquid/1 state=placed; liquid-used/1 by=nvml gpus=8 peak=1 util=1 " \
            "host=1 cpu=1 shared=0 secs=9 n=2 nodes=gpu01\n"
    found = run_doctor(etc, run=FakeSlurm(sacct))
    assert re.search(r"heartbeat 40[01] s old \(stale after 20 s\)", bad(found, "daemon")[0])
    assert "missing" in bad(found, "spool")[0]
    assert bad(found, "agents") == ["no agent record from gpu02 in the last 2 days though GPU jobs ended there"]


def test_doctor_command_exits_1_and_prints_json(tmp_path, etc, capsys) -> None:
    (etc / "liquid.toml").write_text('[daemon]\nmode = "sometimes"\n')
    code = main(["doctor", "--role", "login", "--slurm-dir", str(etc), "--config", str(etc / "liquid.toml"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["ok"] is False and out["roles"] == ["login"]
    [config] = [f for f in out["findings"] if f["check"] == "config"]
    assert config["status"] == "fail" and "[daemon] mode = 'sometimes'" in config["message"] and config["fix"]


def test_daemon_check_reads_slurm_and_changes_nothing(tmp_path, etc, monkeypatch, capsys) -> None:
    healthy_spool(etc, tmp_path)
    monkeypatch.setenv("SLURM_CONF", str(etc / "slurm.conf"))
    before = sorted(p.name for p in tmp_path.rglob("*"))

    class Client:
        def nodes(self):
            from slurm_liquid.slurm.models import Node
            return [Node("gpu01", "idle", gpus=4), Node("gpu02", "idle", gpus=4)]

        def topology(self):
            return None

    assert doctor_module.daemon_check(str(etc / "liquid.toml"), Client) in (0, 1)
    out = capsys.readouterr().out
    assert "OK    slurm: read 2 nodes (8 GPUs)" in out and "daemon:" not in out and "agents:" not in out
    assert sorted(p.name for p in tmp_path.rglob("*")) == before

    def broken():
        raise OSError("slurmctld unreachable")
    assert doctor_module.daemon_check(str(etc / "liquid.toml"), broken) == 1
    assert "the daemon cannot read Slurm: slurmctld unreachable" in capsys.readouterr().out


def test_the_light_install_needs_none_of_the_scientific_packages(tmp_path) -> None:
    """progress and the framework callbacks import with numpy, scipy, scikit-learn and networkx missing."""
    block = ("import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] in {'numpy', 'scipy', 'sklearn', 'networkx', 'hostlist', 'msgspec'}:\n"
             "            raise ImportError('blocked: ' + name)\nsys.meta_path.insert(0, Block())\n"
             "import slurm_liquid.progress, slurm_liquid.integrations, slurm_liquid.integrations._common\n"
             "import slurm_liquid.integrations._lightning_callback\nprint('ok')\n")
    # (the frameworks themselves, transformers and lightning, bring numpy: what is light is our part)
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
    import tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert all(dep.startswith(("tomli", "python-hostlist")) for dep in project["dependencies"])
    assert {"numpy>=1.24", "scipy>=1.10"} <= set(project["optional-dependencies"]["site"])
    makefile = (REPO / "Makefile").read_text()
    assert "'.[site,test,plot]'" in makefile   # make venv installs everything


def test_doctor_sees_a_spool_path_that_is_not_liquid_tomls(tmp_path, etc) -> None:
    (etc / "slurm.conf").write_text(SLURM_CONF.format(etc=etc))
    healthy_spool(etc, tmp_path)   # liquid.toml's spool_dir is tmp_path/spool; the Lua files say /var/spool/...
    found = run_doctor(etc)
    assert sorted(m.split(" uses")[0] for m in bad(found, "paths")) == [f"{etc}/job_submit.lua", f"{etc}/liquid-epilog"]
    assert "/var/spool/slurm-liquid" in bad(found, "paths")[0]
