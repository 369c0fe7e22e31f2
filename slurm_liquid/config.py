"""The one configuration file of a site: /etc/slurm/liquid.toml (or $SLURM_LIQUID_CONFIG).

Every part reads it through `load()`: the cli_filter helper (submit mode), the daemon (placement mode,
timings, placer) and `explain`. A missing file means the defaults: advise at submission, shadow
placement, so that installing the package changes no job until an admin says so.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from slurm_liquid.errors import UsageError
from slurm_liquid.ledger.limits import MAX_LEASE_S
from slurm_liquid.policy.registry import ELASTIC_POLICIES  # the one list of policy names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_ENV = "SLURM_LIQUID_CONFIG"
DEFAULT_PATH = Path("/etc/slurm/liquid.toml")
SUBMIT_MODES = ("off", "advise", "adjust")
DAEMON_MODES = ("off", "shadow", "enforce")
PLACERS = ("liquid", "ga", "auto")
AGENT_RECORDS = ("sacct", "log", "off")


@dataclass(frozen=True)
class SubmitConfig:
    """What cli_filter does with the estimate: nothing, print advice, or rewrite the request."""

    mode: str = "advise"
    timeout_s: float = 2.0


@dataclass(frozen=True)
class DaemonConfig:
    mode: str = "shadow"
    spool_dir: str = "/var/spool/slurm-liquid"
    slurm_user: str = "slurm"          # job_submit.lua and EpilogSlurmctld write events as this user
    heartbeat_s: float = 5.0
    stale_after_s: float = 20.0        # job_submit.lua treats an older heartbeat as "daemon down"
    lease_s: float = 60.0              # a held job starts by itself after this unless the daemon renews
    max_hold_s: float = 600.0          # never hold longer: then Slurm's own scheduler takes the job
    poll_s: float = 30.0               # safety net when no event arrives
    batch_window_s: float = 0.5        # submissions arriving this close together form one batch
    placer: str = "auto"               # liquid (best fit per job), ga (grouping GA), auto
    batch_min: int = 3                 # auto: the GA for batches of at least this many jobs
    batch_max: int = 64                # the GA plans the first this many held jobs; the rest go one by one
    spread_after_s: float = 120.0      # a job that fits under one leaf switch waits this long for it
    slurm_timeout_s: float = 10.0      # no Slurm command the daemon runs may take longer
    stall_after_s: float = 120.0       # the heartbeat stops when the loop has not come round for this long
    log_file: str = ""


@dataclass(frozen=True)
class ElasticConfig:
    """Resizing running elastic jobs (`#LIQUID elastic=MIN:MAX`) every slot, in the daemon's mode."""

    policy: str = "dl2"                # dl2, optimus, drf, static (never resize)
    policy_file: str = ""              # a trained DL2 policy; default: the shipped one (policy/dl2/io.py shipped_for)
    # slot_s, restart_penalty_s and min_change_interval_s were chosen with `slurm-liquid simulate --rules
    # daemon` on validation live-replay workloads (seeds 2000-2007; benchmarks/live/rules.md): slot 30 s,
    # 60 s between changes and a 30 s penalty (the live replay measured 17-25 s from requeue to the first
    # step again) let DL2 gain 17% on plain Slurm there, against 11% with 60 / 300 / 150.
    slot_s: float = 30.0
    restart_penalty_s: float = 30.0    # what one change costs a job under Slurm (checkpoint, requeue, restart)
    max_grace_s: float = 300.0         # a job's checkpoint grace (signal=USR1@N) is capped at this
    min_change_interval_s: float = 60.0
    max_changes_per_hour: int = 6      # per job
    # A running job is resized only if the change saves it this x restart_penalty_s (0: always). Unset:
    # the policy's own guard (`loop.rules.Rules.guard`): DRF and Optimus 2.0 (the best of 1, 2, 3 on
    # held-out live-replay workloads, benchmarks/live/sweep.py), DL2 none (it prices restarts itself).
    payback: float | None = None
    # An elastic job that is the only GPU job waiting starts at up to one node's free GPUs inside its
    # range instead of its ask: set before it ever runs, the width costs no restart, where growing it
    # later costs one: 7% -> 17% below plain Slurm on held-out live-replay workloads (benchmarks/live).
    start_wider: bool = True
    progress_dir: str = "/shared/slurm-liquid/progress"   # world-writable + sticky, on a shared file system
    journal: str = "/var/lib/slurm-liquid/journal.sqlite"
    speed_journal: str = "/var/lib/slurm-liquid/speed.jsonl"   # the jobs' measured speeds (root-owned)
    metrics_port: int = 0              # older place of [metrics] port (kept for existing files)


@dataclass(frozen=True)
class EstimateConfig:
    site: str = ""                     # GPU types and catalog additions
    correction: str = ""               # fitted correction model (JSON)
    busy_util: float = 60.0            # % measured median GPU utilisation above which a model never shares a GPU
    retrain_every_h: float = 0.0       # the daemon refits `correction` from sacct this often (0: never)
    retrain_since_days: int = 90       # ... from the jobs of this many past days
    retrain_allow_standin: bool = False   # learn from stand-in readings too (test clusters only)
    risk: float = 0.05                 # stated risk that a job exceeds the memory it is given (docs/estimate.md)
    risk_file: str = ""                # calibration scores (`estimate calibrate`); "" = the shipped ones

    def kwargs(self) -> dict[str, Any]:
        """The settings `estimate.api.estimate` takes, as every caller passes them."""
        return {"site": self.site or None, "correction": self.correction or None, "busy_util": self.busy_util,
                "risk": self.risk, "risk_file": self.risk_file or None}


@dataclass(frozen=True)
class AgentConfig:
    """The node agent (`slurm-liquid agent`, root on every GPU node): what jobs really used."""

    gpu_source: str = "nvml"           # nvml | none | standin:DIR (emulated GPUs in tests, labelled)
    interval_s: float = 5.0
    spool_dir: str = "/run/slurm-liquid-agent"       # the node epilog drops ended/<job id> here
    state_file: str = "/var/lib/slurm-liquid/agent-meters.json"   # meters survive an agent restart
    record: str = "sacct"              # sacct (AdminComment via sacctmgr) | log | off
    order_wait_s: float = 20.0         # a multi-node job's agents record in node order, waiting this long
    ended_wait_s: float = 120.0        # for the job's end to reach slurmdbd before recording
    end_grace_s: float = 60.0          # without the epilog: a job gone this long is asked about
    metrics_port: int = 0              # older place of [metrics] agent_port (kept for existing files)
    log_file: str = ""


@dataclass(frozen=True)
class StagingConfig:
    """Staging datasets to node-local disk before jobs start (slurm_liquid/staging, docs/staging.md)."""

    enabled: bool = False              # the agents stage and the daemon predicts only when true
    dir: str = "/var/tmp/slurm-liquid-staging"   # node-local staging area (root-owned; u<uid>/ per user)
    quota_gb: float = 100.0            # all staged copies on a node together; LRU eviction beyond
    max_files: int = 5_000_000         # per dataset: files, directories and links (archive members)
    user_share: float = 0.5            # one user's copies and copies in progress: this part of quota_gb
    stall_s: float = 60.0              # a staging worker silent this long (stopped, hung fs) is killed
    transfers: int = 2                 # concurrent copies per node
    bandwidth_mb_s: float = 0.0        # cap per node over all transfers, MB/s (0: none)
    timeout_s: float = 3600.0          # one dataset's copy
    poll_s: float = 3.0                # how often the agent asks Slurm which jobs want data here
    retry_s: float = 300.0             # a failed dataset is tried again after this
    predict: bool = True               # the daemon names predicted nodes of jobs waiting for GPUs


@dataclass(frozen=True)
class MetricsConfig:
    """Prometheus metrics of the daemon and the node agent (etc/monitoring has the dashboard and alerts)."""

    address: str = "127.0.0.1"         # the interface both listen on ("0.0.0.0": every interface)
    port: int = 0                      # the daemon's port (0: off)
    agent_port: int = 0                # the node agent's port (0: off)


@dataclass(frozen=True)
class Config:
    submit: SubmitConfig = field(default_factory=SubmitConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    estimate: EstimateConfig = field(default_factory=EstimateConfig)
    elastic: ElasticConfig = field(default_factory=ElasticConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    staging: StagingConfig = field(default_factory=StagingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    path: str = ""


def _section(cls: type, raw: Any, name: str, where: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: [{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    values = {}
    for key, value in raw.items():
        attr = key.replace("-", "_")
        if attr not in known:
            raise UsageError(f"{where}: [{name}] {key}: unknown setting; known: {', '.join(known)}")
        values[attr] = _typed(value, known[attr].default, f"{where}: [{name}] {key}")
    return cls(**values)


def _typed(value: Any, default: Any, where: str) -> Any:
    """`value` checked against the type of the setting's default (ints stay whole, numbers >= 0)."""
    if default is None:   # an optional number: unset means "the part's own default"
        ok, kind = type(value) in (int, float) and 0 <= value < 1e12, "non-negative number"
        if ok:
            return float(value)
    elif isinstance(default, bool) or type(value) is bool:
        ok, kind = type(value) is type(default), type(default).__name__
    elif isinstance(default, int):
        ok, kind = type(value) is int and 0 <= value < 10**12, "non-negative whole number"
    elif isinstance(default, float):
        ok, kind = type(value) in (int, float) and 0 <= value < 1e12, "non-negative number"
    else:
        ok, kind = isinstance(value, str), "string"
    if not ok:
        raise UsageError(f"{where}: {value!r} is not a {kind}")
    return type(default)(value)


def _choice(value: str, allowed: tuple[str, ...], what: str, where: str) -> None:
    if value not in allowed:
        raise UsageError(f"{where}: {what} = {value!r}; choose one of {', '.join(allowed)}")


def parse(text: str, where: str = "liquid.toml") -> Config:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: not valid TOML: {exc}") from None
    sections = {f.name: f.default_factory for f in fields(Config) if f.name != "path"}
    unknown = set(raw) - set(sections)
    if unknown:
        raise UsageError(f"{where}: unknown section [{sorted(unknown)[0]}]; sections are {', '.join(sections)}")
    config = Config(**{name: _section(cls, raw.get(name), name, where) for name, cls in sections.items()},
                    path=where)
    return validate(config)


def validate(config: Config) -> Config:
    """The checks that span settings; raises UsageError naming the file and setting."""
    where = config.path or "settings"
    _choice(config.submit.mode, SUBMIT_MODES, "[submit] mode", where)
    _choice(config.daemon.mode, DAEMON_MODES, "[daemon] mode", where)
    _choice(config.daemon.placer, PLACERS, "[daemon] placer", where)
    _choice(config.elastic.policy, ELASTIC_POLICIES, "[elastic] policy", where)
    _choice(config.agent.record, AGENT_RECORDS, "[agent] record", where)
    source = config.agent.gpu_source
    if source not in ("nvml", "none") and not (source.startswith("standin:") and len(source) > 8):
        raise UsageError(f"{where}: [agent] gpu_source = {source!r}; choose nvml, none or standin:DIR")
    if config.agent.interval_s < 0.1:
        raise UsageError(f"{where}: [agent] interval_s must be at least 0.1")
    st = config.staging   # [staging]
    if not st.dir.startswith("/") or st.transfers < 1 or st.poll_s < 0.5:
        raise UsageError(f"{where}: [staging] needs an absolute dir, transfers >= 1 and poll_s >= 0.5")
    if not 0 < st.user_share <= 1 or st.stall_s < 1:
        raise UsageError(f"{where}: [staging] needs 0 < user_share <= 1 and stall_s >= 1")
    d = config.daemon
    if d.lease_s < 2 * max(d.poll_s, d.heartbeat_s) or d.stale_after_s <= d.heartbeat_s:
        raise UsageError(f"{where}: [daemon] needs lease_s >= 2 x poll_s and heartbeat_s (renewals come in "
                         "time) and stale_after_s > heartbeat_s")
    if d.lease_s > MAX_LEASE_S:
        raise UsageError(f"{where}: [daemon] lease_s must be at most {MAX_LEASE_S} (a held job must start "
                         "soon after the daemon dies)")
    if not 1 <= d.slurm_timeout_s <= 120 or d.stall_after_s < 2 * d.slurm_timeout_s:
        raise UsageError(f"{where}: [daemon] needs 1 <= slurm_timeout_s <= 120 and stall_after_s >= "
                         "2 x slurm_timeout_s")
    return config


def metrics_endpoint(config: Config, who: str) -> tuple[str, int]:
    """(address, port) of the daemon's (`who` = "daemon") or the agent's metrics; port 0: off.
    `[elastic] metrics_port` and `[agent] metrics_port`, the older places, count when [metrics] has none."""
    if who == "daemon":
        return config.metrics.address, config.metrics.port or config.elastic.metrics_port
    return config.metrics.address, config.metrics.agent_port or config.agent.metrics_port


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """The site's config: `path`, else $SLURM_LIQUID_CONFIG, else /etc/slurm/liquid.toml, else defaults."""
    chosen = path or os.environ.get(CONFIG_ENV)
    target = Path(chosen) if chosen else DEFAULT_PATH
    try:
        text = target.read_text()
    except FileNotFoundError:
        if chosen:
            raise UsageError(f"config file {target} does not exist") from None
        return Config()
    except OSError as exc:
        raise UsageError(f"config file {target}: {exc.strerror}") from None
    return parse(text, str(target))


def with_overrides(config: Config, section: str = "daemon", **settings: Any) -> Config:
    """The config with settings of one section replaced (command-line flags win over the file), checked again."""
    current = getattr(config, section)
    known = {f.name: f.default for f in fields(current)}
    values = {k: _typed(v, known[k], f"[{section}] {k} (command line)") for k, v in settings.items() if v is not None}
    return validate(replace(config, **{section: replace(current, **values)})) if values else config
