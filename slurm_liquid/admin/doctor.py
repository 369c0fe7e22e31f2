"""`slurm-liquid doctor`: is this controller, GPU node or login node set up right? Each finding says
what is wrong and how to fix it; the exit status is 1 when anything fails, `--json` for machines.

Read-only: it reads files, /proc, and asks Slurm (`scontrol ping`, `sacct`) with timeouts; it never
writes. `slurm-liquid daemon --check` runs the controller's checks that need no running daemon, plus
one read of Slurm through the daemon's own client.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from slurm_liquid import __version__
from slurm_liquid import config as config_module
from slurm_liquid.admin import files, slurmconf
from slurm_liquid.admin.probe import detect_roles, expand, importable, processes, run_command
from slurm_liquid.errors import LiquidError

FULL_INSTALL = ("numpy", "scipy", "sklearn", "networkx", "hostlist", "msgspec", "prometheus_client")


@dataclass(frozen=True)
class Finding:
    check: str
    status: str          # ok | warn | fail
    message: str
    fix: str = ""


class Doctor:
    def __init__(self, roles: tuple[str, ...], slurm_dir: str, config_path: str | None,
                 run: Callable[[list[str]], subprocess.CompletedProcess] | None = None, since_days: int = 2):
        self.roles, self.slurm_dir, self.config_path = roles, Path(slurm_dir), config_path
        self.run = run or run_command
        self.since_days = since_days
        self.findings: list[Finding] = []
        self.config = config_module.Config()

    def add(self, check: str, status: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(check, status, message, fix))

    # -------------------------------------------------------------- every host

    def check_install(self) -> None:
        self.add("python", "ok" if sys.version_info >= (3, 10) else "fail",
                 f"Python {sys.version.split()[0]} at {sys.executable}, slurm-liquid {__version__}",
                 "slurm-liquid needs Python 3.10 or newer")
        missing = [name for name in FULL_INSTALL if not importable(name)]
        if missing:
            self.add("install", "fail", f"the light install (progress API only): {', '.join(missing)} missing",
                     f"{sys.executable} -m pip install 'slurm-liquid[site]=={__version__}'")
        else:
            self.add("install", "ok", "the site install (estimator, daemon, agent)")

    def check_config(self) -> None:
        try:
            self.config = config_module.load(self.config_path)
        except LiquidError as exc:
            self.add("config", "fail", str(exc), "fix the named setting (docs/admin.md, 'Configure')")
            return
        where = self.config.path or f"{config_module.DEFAULT_PATH} (absent: the defaults)"
        self.add("config", "ok", f"{where}: submit {self.config.submit.mode}, daemon {self.config.daemon.mode}")

    def check_files(self) -> None:
        before = len(self.findings)
        chosen = files.chosen(self.roles, ("slurm",))
        for item in chosen:
            path = files.destination(item, self.slurm_dir)
            drift = files.compare(item, path)
            fix = f"slurm-liquid admin install --dest {self.slurm_dir} --role {_role_arg(item)} (add --dry-run to see the diff)"
            if drift is None:
                self._check_owner(path)
            elif drift.problem == "missing":
                if not item.keep:
                    self.add("files", "fail", f"{path}: {drift.detail}", fix)
            elif drift.problem == "differs":
                self.add("files", "warn", f"{path}: {drift.detail} (fine if you edited its paths on purpose)", fix)
                self._check_owner(path)
            else:
                self.add("files", "fail", f"{path}: {drift.detail}", fix)
        if len(self.findings) == before:
            self.add("files", "ok", f"{len(chosen)} Slurm files in {self.slurm_dir} are this package's")

    def _check_owner(self, path: Path) -> None:
        try:
            st = path.stat()
        except OSError:
            return
        if st.st_uid != 0 or st.st_mode & 0o022:
            self.add("files", "fail", f"{path}: owned by uid {st.st_uid}, mode {st.st_mode & 0o7777:o}: Slurm runs it "
                     "as root or SlurmUser, so only root may write it", f"chown root:root {path}; chmod go-w {path}")

    def check_paths(self) -> None:
        """The spool path job_submit.lua and liquid-epilog carry must be liquid.toml's [daemon] spool_dir."""
        spool = self.config.daemon.spool_dir.rstrip("/")
        for name, pattern in (("job_submit.lua", r'^local SPOOL = "([^"]*)"'),
                              ("liquid-epilog", r"^: > (\S+)/events/ended")):
            try:
                match = re.search(pattern, (self.slurm_dir / name).read_text(errors="replace"), re.M)
            except OSError:
                continue
            if match and match.group(1).rstrip("/") != spool:
                self.add("paths", "fail", f"{self.slurm_dir / name} uses the spool {match.group(1)}, liquid.toml "
                         f"says {spool}: the daemon is never woken and job_submit.lua never sees its heartbeat",
                         f"make them the same (edit {name}, or [daemon] spool_dir)")

    def check_slurm_conf(self) -> None:
        conf = self.slurm_dir / "slurm.conf"
        if not conf.is_file():
            status = "warn" if "controller" not in self.roles else "fail"
            self.add("slurm.conf", status, f"{conf}: not found (a configless node reads it from slurmctld)",
                     "run `slurm-liquid doctor` on the controller, or pass --slurm-dir")
            return
        settings = slurmconf.read(conf)
        ours = {s.key.lower(): s.value for s in slurmconf.read(self.slurm_dir / "liquid.conf")}
        for early, late in slurmconf.overridden(settings):
            if early.key.lower() in ours or late.key.lower() in ours:
                self.add("slurm.conf", "fail", f"{early.key}={early.value} ({early.where}) is replaced by "
                         f"{late.key}={late.value} ({late.where}): Slurm keeps the last one",
                         _merge_fix(early.key.lower(), early.value, late.value, self.slurm_dir))
        wanted = {"controller": ("clifilterplugins", "jobsubmitplugins", "epilogslurmctld"),
                  "node": ("epilog", "taskprolog"), "login": ("clifilterplugins",)}
        for key in sorted({k for role in self.roles for k in wanted[role]}):
            setting = slurmconf.last(settings, key)
            value = setting.value if setting else ""
            name = _KEY_NAMES[key]
            if key in slurmconf.PLUGIN_LISTS:
                plugin = slurmconf.PLUGIN_LISTS[key]
                if plugin not in [v.strip() for v in value.split(",")]:
                    self.add("slurm.conf", "fail", f"{name} does not list {plugin} ({value or 'unset'})",
                             f"add `include {self.slurm_dir / 'liquid.conf'}` to {conf}, or {name}={_joined(value, plugin)}")
                    continue
            elif not setting:
                self.add("slurm.conf", "fail", f"{name} is not set: slurm-liquid's script never runs",
                         f"add `include {self.slurm_dir / 'liquid.conf'}` to {conf}")
                continue
            elif Path(value).name != f"liquid-{_SCRIPT_OF[key]}":
                self.add("slurm.conf", "warn", f"{name}={value} is the site's own script ({setting.where})",
                         f"make it call {self.slurm_dir / ('liquid-' + _SCRIPT_OF[key])} (docs/admin.md, 'Install')")
                continue
            self.add("slurm.conf", "ok", f"{name}={value} ({setting.where})")
        if "controller" in self.roles:
            flags = slurmconf.last(settings, "AccountingStoreFlags")
            if not flags or "job_comment" not in flags.value:
                self.add("slurm.conf", "warn", "AccountingStoreFlags lacks job_comment: sacct shows no records",
                         "AccountingStoreFlags=job_comment")

    # -------------------------------------------------------------- controller

    def check_helper(self) -> None:
        path = self.slurm_dir / "cli_filter.lua"
        try:
            match = re.search(r'^local HELPER = "([^"]*)"', path.read_text(errors="replace"), re.M)
        except OSError:
            return
        helper = Path(match.group(1)) if match else None
        if helper is None or not os.access(helper, os.X_OK):
            self.add("helper", "fail", f"cli_filter.lua calls {helper}, which is not an executable: no advice at sbatch",
                     f"ln -sf {Path(sys.executable).parent / 'slurm-liquid'} {helper}")
        else:
            self.add("helper", "ok", f"cli_filter.lua calls {helper}")

    def check_spool(self, heartbeat: bool = True) -> None:
        d = self.config.daemon
        spool, events = Path(d.spool_dir), Path(d.spool_dir) / "events"
        try:
            owner = pwd.getpwuid(events.stat().st_uid).pw_name
        except (OSError, KeyError):
            owner = None
        if owner != d.slurm_user:
            self.add("spool", "fail", f"{events}: " + (f"owned by {owner}" if owner else "missing") +
                     f"; slurmctld and the epilog write there as {d.slurm_user}",
                     f"start the daemon (it makes it), or install -d -o {d.slurm_user} -m 755 {events}")
        else:
            self.add("spool", "ok", f"{events} owned by {owner}")
        if not heartbeat:
            return
        beat = spool / "heartbeat"
        try:
            fields = beat.read_text().split()
            age = time.time() - int(fields[0])
        except (OSError, ValueError, IndexError):
            fields, age = [], None
        if d.mode == "off":
            self.add("daemon", "ok", "[daemon] mode is off: nothing is held")
        elif age is None:
            self.add("daemon", "fail", f"{beat}: no heartbeat: the daemon is not running (jobs are not placed)",
                     "systemctl enable --now slurm-liquid-daemon; journalctl -u slurm-liquid-daemon")
        elif age > d.stale_after_s:
            self.add("daemon", "fail", f"heartbeat {age:.0f} s old (stale after {d.stale_after_s:.0f} s): the daemon "
                     "is stopped or wedged; job_submit.lua holds nothing new", "systemctl restart slurm-liquid-daemon; "
                     "journalctl -u slurm-liquid-daemon")
        elif fields[1:2] != [d.mode]:
            self.add("daemon", "warn", f"the daemon runs in {fields[1]} mode, liquid.toml says {d.mode}",
                     "systemctl restart slurm-liquid-daemon")
        else:
            self.add("daemon", "ok", f"heartbeat {age:.0f} s old, {d.mode} mode")

    def check_slurm(self) -> None:
        out = self.run(["scontrol", "ping"])
        if out.returncode != 0 or "UP" not in out.stdout:
            self.add("slurm", "fail", f"scontrol ping: {(out.stdout + out.stderr).strip()[:200] or 'no answer'}",
                     "check slurmctld and munge on this host")
        else:
            self.add("slurm", "ok", out.stdout.strip().splitlines()[0])

    def check_agents(self) -> None:
        """GPU nodes that ran GPU jobs lately but have no agent record (liquid-used/1 ... nodes=) of any."""
        out = self.run(["sacct", "-a", "-X", "-n", "-P", "-S", f"now-{self.since_days}days", "-E", "now",
                        "-s", "CD,F,TO,OOM,CA,NF", "-o", "JobID,NodeList,AllocTRES,AdminComment%4000"])
        if out.returncode != 0:
            self.add("agents", "warn", f"sacct failed: {out.stderr.strip()[:200]}", "check slurmdbd")
            return
        ran: dict[str, int] = {}
        recorded: set[str] = set()
        for line in out.stdout.splitlines():
            parts = line.split("|", 3)
            if len(parts) < 4 or "gres/gpu" not in parts[2]:
                continue
            for node in expand(parts[1]):
                ran[node] = ran.get(node, 0) + 1
            match = re.search(r"liquid-used/1 [^;]*?nodes=(\S+)", parts[3])
            if match:
                recorded.update(expand(match.group(1)))
        silent = sorted(n for n in ran if n not in recorded)
        if not ran:
            self.add("agents", "warn", f"no GPU job ended in the last {self.since_days} days: agents not checked")
        elif silent:
            self.add("agents", "fail", f"no agent record from {', '.join(silent[:20])}"
                     f"{' ...' if len(silent) > 20 else ''} in the last {self.since_days} days though GPU jobs ended there",
                     "on each: systemctl enable --now slurm-liquid-agent; slurm-liquid doctor --role node")
        else:
            self.add("agents", "ok", f"agents recorded jobs on all {len(ran)} GPU nodes that ran some")

    # -------------------------------------------------------------- GPU node

    def check_agent_here(self) -> None:
        running = processes("slurm-liquid", "agent")
        ended = Path(self.config.agent.spool_dir) / "ended"
        if not running:
            self.add("agent", "fail", "slurm-liquid agent is not running on this node: jobs here are not measured",
                     "systemctl enable --now slurm-liquid-agent; journalctl -u slurm-liquid-agent")
        elif not ended.is_dir():
            self.add("agent", "fail", f"{ended} is missing: the node Epilog cannot tell the agent a job ended",
                     "systemctl restart slurm-liquid-agent (RuntimeDirectory=slurm-liquid-agent)")
        else:
            self.add("agent", "ok", f"running (pid {running[0]})")
        if self.config.agent.gpu_source != "nvml":
            self.add("nvml", "ok", f"[agent] gpu_source = {self.config.agent.gpu_source}")
            return
        try:
            import pynvml
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            pynvml.nvmlShutdown()
            self.add("nvml", "ok", f"NVML sees {count} GPU(s)")
        except Exception as exc:  # noqa: BLE001 -- any NVML failure is the finding
            self.add("nvml", "fail", f"NVML: {exc}: GPU memory is not measured",
                     "install the NVIDIA driver, or set [agent] gpu_source = \"none\" on a node without GPUs")

    def run_all(self, heartbeat: bool = True) -> list[Finding]:
        self.check_install()
        self.check_config()
        self.check_files()
        self.check_slurm_conf()
        if set(self.roles) & {"controller", "login"}:
            self.check_helper()
        if "controller" in self.roles:
            self.check_paths()
            self.check_slurm()
            self.check_spool(heartbeat)
            if heartbeat:
                self.check_agents()
        if "node" in self.roles:
            self.check_agent_here()
        return self.findings


_KEY_NAMES = {"clifilterplugins": "CliFilterPlugins", "jobsubmitplugins": "JobSubmitPlugins",
              "epilogslurmctld": "EpilogSlurmctld", "epilog": "Epilog", "taskprolog": "TaskProlog"}
_SCRIPT_OF = {"epilogslurmctld": "epilog", "epilog": "node-epilog", "taskprolog": "task-prolog"}


def _merge_fix(key: str, early: str, late: str, slurm_dir: Path) -> str:
    if key in slurmconf.PLUGIN_LISTS:
        return f"one line: {_KEY_NAMES.get(key, key)}={_joined(early, slurmconf.PLUGIN_LISTS[key])}, and delete the other"
    return (f"keep the site's script and make it run ours ({slurm_dir}/liquid-{_SCRIPT_OF.get(key, 'epilog')}); "
            f"delete the {_KEY_NAMES.get(key, key)} line of liquid.conf")


def _joined(value: str, plugin: str) -> str:
    return ",".join([v for v in value.split(",") if v.strip()] + [plugin])


def _role_arg(item: files.SiteFile) -> str:
    return item.roles[0] if len(item.roles) == 1 else "all"


def report(findings: list[Finding], verbose: bool) -> str:
    lines = []
    for f in findings:
        if f.status == "ok" and not verbose:
            continue
        lines.append(f"{f.status.upper():<5} {f.check}: {f.message}")
        if f.fix and f.status != "ok":
            lines.append(f"      fix: {f.fix}")
    fails = sum(f.status == "fail" for f in findings)
    warns = sum(f.status == "warn" for f in findings)
    lines.append(f"{len(findings)} checks: {fails} failed, {warns} warnings" + ("" if verbose else " (--all shows the ok ones)"))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", choices=("auto", *files.ROLES), action="append",
                        help="what this host is (repeatable; default auto: controller where slurmctld runs, "
                             "node where slurmd runs, else login)")
    parser.add_argument("--slurm-dir", default=None, help="Slurm's configuration directory (default: that of "
                        "$SLURM_CONF, else /etc/slurm)")
    parser.add_argument("--config", default=None, help="liquid.toml (default: $SLURM_LIQUID_CONFIG or /etc/slurm/liquid.toml)")
    parser.add_argument("--since-days", type=int, default=2, help="how far back sacct is read for agent records")
    parser.add_argument("--json", action="store_true", help="one JSON object: version, roles, findings, ok")
    parser.add_argument("--all", action="store_true", help="also print the checks that passed")


def run(args: argparse.Namespace) -> int:
    roles = tuple(r for r in (args.role or ["auto"]) if r != "auto") or detect_roles()
    doctor = Doctor(roles, args.slurm_dir or files.default_slurm_dir(), args.config, since_days=args.since_days)
    findings = doctor.run_all()
    ok = not any(f.status == "fail" for f in findings)
    if args.json:
        print(json.dumps({"version": __version__, "roles": list(roles), "ok": ok,
                          "findings": [asdict(f) for f in findings]}, indent=1))
    else:
        print(report(findings, args.all))
    return 0 if ok else 1


def daemon_check(config_path: str | None, client_factory: Callable[[], object]) -> int:
    """`slurm-liquid daemon --check`: the controller's checks that need no running daemon, and one read
    of Slurm's nodes and topology through the daemon's client. Changes nothing."""
    doctor = Doctor(("controller",), files.default_slurm_dir(), config_path)
    doctor.check_install()
    doctor.check_config()
    if doctor.findings[-1].status == "ok":
        doctor.check_files()
        doctor.check_paths()
        doctor.check_spool(heartbeat=False)
        try:
            client = client_factory()
            nodes = client.nodes()
            topology = client.topology()
            gpus = sum(n.gpus for n in nodes)
            doctor.add("slurm", "ok", f"read {len(nodes)} nodes ({gpus} GPUs) and a topology of "
                       f"{len(getattr(topology, 'switches', ()) or ())} switches")
        except Exception as exc:  # noqa: BLE001 -- whatever fails is what the admin must see
            doctor.add("slurm", "fail", f"the daemon cannot read Slurm: {exc}", "check slurmctld, munge, and "
                       "[daemon] slurm_timeout_s")
    print(report(doctor.findings, True))
    return 0 if not any(f.status == "fail" for f in doctor.findings) else 1
