"""What the submission benchmarks share: commands in the controller container, liquid.conf variants,
the daemon, clean-up and percentiles. Standard library only (runs before any virtual environment).

Everything that is timed runs inside the container (a Python program given to `python3 -c`), so
`docker exec` overhead never enters a measurement; this module only orchestrates.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import time
from typing import Any, Sequence

LIQUID_CONF = "/etc/slurm/liquid.conf"                   # a copy made by entrypoint.sh: safe to edit
LIQUID_CONF_SOURCE = "/etc/slurm-liquid/slurm/liquid.conf"  # the working tree's file, mounted: never edit
DAEMON_OUT = "/var/log/slurm/liquid-daemon.out"
DAEMON_LOG = "/var/log/slurm/liquid-daemon.log"
HEARTBEAT = "/var/spool/slurm-liquid/heartbeat"
USER = "alice"


def container(suite: str) -> str:
    return f"liquid-{suite}-slurmctld"


def sh(suite: str, command: str, timeout: float = 120, check: bool = True) -> str:
    """A shell command in the controller container, as root; returns stdout."""
    proc = subprocess.run(["docker", "exec", container(suite), "bash", "-c", command], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{command}` failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def py(suite: str, program: str, spec: Any, timeout: float = 900) -> Any:
    """Run `program` with `python3 -c` in the container; it gets `spec` as JSON in argv[1] and must
    print its answer as JSON on its last line."""
    proc = subprocess.run(["docker", "exec", container(suite), "python3", "-c", program, json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"in-container program failed ({proc.returncode}): {proc.stderr.strip()[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write(suite: str, path: str, text: str, mode: int = 0o644) -> None:
    """Write a file in the container atomically (a reader never sees half of it)."""
    py(suite, "import json, os, sys\n"
              "s = json.loads(sys.argv[1]); tmp = s['path'] + '.bench-tmp'\n"
              "open(tmp, 'w').write(s['text']); os.chmod(tmp, s['mode']); os.replace(tmp, s['path'])\n"
              "print('{}')", {"path": path, "text": text, "mode": mode}, timeout=60)


def liquid_conf(suite: str) -> str:
    """The shipped slurm.conf snippet (the working tree's), whatever the container's copy says now."""
    return sh(suite, f"cat {LIQUID_CONF_SOURCE}")


def without(conf: str, *keys: str) -> str:
    """The snippet without the lines that set `keys` (e.g. CliFilterPlugins)."""
    lines = conf.splitlines(keepends=True)
    return "".join(line for line in lines if line.split("=", 1)[0].strip() not in keys)


def restore_liquid_conf(suite: str, reconfigure: bool) -> None:
    sh(suite, f"cp {LIQUID_CONF_SOURCE} {LIQUID_CONF}.bench-tmp && chmod 644 {LIQUID_CONF}.bench-tmp "
              f"&& mv -f {LIQUID_CONF}.bench-tmp {LIQUID_CONF}")
    if reconfigure:
        reconfigure_and_wait(suite, "lua")


def job_submit_plugins(suite: str) -> str | None:
    out = sh(suite, "scontrol show config 2>/dev/null | grep -E '^JobSubmitPlugins' || true", check=False)
    if "=" not in out:
        return None
    value = out.split("=", 1)[1].strip()
    return None if value in ("", "(null)") else value


def reconfigure_and_wait(suite: str, want: str | None, timeout: float = 90) -> float:
    """`scontrol reconfigure` (slurmctld 24.11 restarts itself) until JobSubmitPlugins reads `want`
    and slurmctld answers; returns the seconds it took."""
    started = time.monotonic()
    sh(suite, "scontrol reconfigure")
    while time.monotonic() - started < timeout:
        try:
            if job_submit_plugins(suite) == want and sh(suite, "squeue -h -o %i >/dev/null && echo ok",
                                                        check=False).strip() == "ok":
                return time.monotonic() - started
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"JobSubmitPlugins did not become {want!r} within {timeout:.0f} s")


def daemon_stop(suite: str) -> None:
    sh(suite, "entrypoint.sh daemon-stop")
    time.sleep(0.3)


def daemon_start_default(suite: str) -> None:
    sh(suite, "entrypoint.sh daemon-start", timeout=60)


def daemon_start(suite: str, flags: Sequence[str], timeout: float = 30) -> None:
    """Start `slurm-liquid daemon FLAGS` detached, as the brief and entrypoint.sh do; wait for a new heartbeat."""
    before = sh(suite, f"stat -c %Y {HEARTBEAT} 2>/dev/null || echo 0").strip()
    command = " ".join(["slurm-liquid", "daemon", *flags])
    sh(suite, f"setsid {command} >>{DAEMON_OUT} 2>&1 </dev/null &")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sh(suite, f"stat -c %Y {HEARTBEAT} 2>/dev/null || echo 0").strip() not in ("0", before):
            return
        time.sleep(0.3)
    raise RuntimeError(f"`{command}` wrote no heartbeat within {timeout:.0f} s; see {DAEMON_OUT}")


def cancel(suite: str, name: str) -> None:
    """Cancel this benchmark's jobs (by job name, as the benchmark user) and wait until none is left
    pending or running."""
    sh(suite, f"scancel -u {USER} -n {name}", check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = sh(suite, f"squeue -h -u {USER} -n {name} -t PD,R,CG -o %i | wc -l", check=False).strip()
        if left == "0":
            return
        time.sleep(0.5)


def log_lines(suite: str, since_line: int) -> list[str]:
    """The daemon log's lines after `since_line` (see log_length)."""
    return sh(suite, f"tail -n +{since_line + 1} {DAEMON_LOG} 2>/dev/null || true", check=False).splitlines()


def log_length(suite: str) -> int:
    return int(sh(suite, f"wc -l < {DAEMON_LOG} 2>/dev/null || echo 0", check=False).strip() or 0)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (q in [0, 100]), as numpy's default."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"n": len(values), "median": statistics.median(values) if values else math.nan,
            "p90": percentile(values, 90), "mean": statistics.fmean(values) if values else math.nan,
            "min": min(values, default=math.nan), "max": max(values, default=math.nan)}


def load_average(suite: str) -> str:
    return sh(suite, "cut -d' ' -f1-3 /proc/loadavg", check=False).strip()


# The start of every in-container program: its spec (argv[1], JSON) and a login environment for the
# user it runs sbatch as. The program's own imports come first and must include json, pwd and sys.
USER_PRELUDE = """spec = json.loads(sys.argv[1])
user = pwd.getpwnam(spec["user"])
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": user.pw_dir,
       "USER": user.pw_name, "LOGNAME": user.pw_name, "LANG": "C.UTF-8"}
"""
