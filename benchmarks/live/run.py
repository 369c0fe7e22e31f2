#!/usr/bin/env python3
"""The live replay: one workload, four ways of running it, on the containerized Slurm cluster.

    containers/cluster up
    python benchmarks/live/run.py --arms plain,liquid,drf,dl2 --workload benchmarks/live/workload-seed0.json \\
        --out-dir benchmarks/live/runs
    python benchmarks/live/run.py --smoke ...      # 4 jobs at half their steps, a few minutes per arm

Arms (the daemon restarted with the arm's policy before each, under the shipped [elastic] settings:
the test cluster's liquid.toml with its [elastic] rules replaced by etc/slurm/liquid.toml's, so that
the live numbers are those a site gets; `--elastic cluster` keeps the test cluster's):

- plain:  jobs submitted without opting in (no #LIQUID line): plain Slurm, its own placement;
- liquid: opted in and rigid (`elastic=G:G`: never a share of a GPU, never resized), Liquid placement
          by the daemon, no resizing (`--policy static`);
- drf:    opted in, elastic 1:max_gpus, the daemon resizes every slot by DRF (`--policy drf`);
- dl2:    the same under DL2 (`--policy dl2`).

Every job is the stand-in trainer following its own drawn curve (`standin_trainer.py --curve`),
submitted with sbatch as its user at its (compressed) arrival time. Per arm: clean /shared state,
submit, wait (bounded by --timeout), read every run of every job from `sacct --json --duplicates`,
and the trainers' event lines (start, first step, checkpoint) from their output. Results:
<out-dir>/<arm>.json (resumable: an arm whose file exists is skipped unless --force) and
<out-dir>/summary.md. Exit 0 when every arm ran to completion, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_liquid.sim.livegen import smoke as smoke_workload  # noqa: E402

from slurm_liquid.config import Config  # noqa: E402
from slurm_liquid.errors import LiquidError  # noqa: E402
from slurm_liquid.ledger import Record  # noqa: E402
from slurm_liquid.slurm import CliBackend, ContainerRunner  # noqa: E402
from slurm_liquid.slurm.parse import latest_runs, runs_from_document  # noqa: E402

CLUSTER = REPO / "containers" / "cluster"
TRAINER = "/opt/slurm-liquid/examples/elastic/standin_trainer.py"
PYTHON = "/opt/slurm-liquid/bin/python"
BASE = "/shared/live"
PROGRESS = "/shared/slurm-liquid/progress"
ARMS = ("plain", "liquid", "drf", "dl2")
GPUS = 16   # the test cluster: 4 nodes x 4 GPUs
POLICY = {"plain": "static", "liquid": "static", "drf": "drf", "dl2": "dl2"}
PAYBACK = None   # the shipped one: each policy's own guard
SHIPPED = REPO / "etc" / "slurm" / "liquid.toml"
RULE_KEYS = ("slot_s", "restart_penalty_s", "min_change_interval_s", "max_changes_per_hour", "payback", "start_wider")
LIVE_CONFIG = "/shared/live/liquid.toml"


def with_shipped_elastic(text: str) -> str:
    """The cluster's liquid.toml with its [elastic] rules (RULE_KEYS) replaced by the shipped file's."""
    shipped = {k: v for k, v in vars(Config().elastic).items() if k in RULE_KEYS and v is not None}
    shipped_text = SHIPPED.read_text()
    import tomllib

    shipped.update({k: v for k, v in tomllib.loads(shipped_text).get("elastic", {}).items() if k in RULE_KEYS})
    out, section = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
            out.append(line)
            if section == "[elastic]":
                out += [f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in shipped.items()]
            continue
        if section == "[elastic]" and stripped.split("=")[0].strip() in RULE_KEYS:
            continue
        out.append(line)
    return "\n".join(out) + "\n"
EVENT = re.compile(r"^standin-trainer: event=(\S+) t=([0-9.]+)(.*)$")
WRITER = ("import json, os, sys\n"
          "for path, text in json.load(sys.stdin).items():\n"
          "    open(path, 'w').write(text); os.chmod(path, 0o644)\n")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Live:
    """The cluster's login host, through `containers/cluster exec` (argument lists, timeouts)."""

    def __init__(self, suite: str) -> None:
        self.suite = suite
        self.client = CliBackend(ContainerRunner(f"liquid-{suite}-slurmctld"), timeout_s=60)

    def exec(self, *argv: str, stdin: str | None = None, timeout: float = 120, check: bool = True
             ) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run([sys.executable, str(CLUSTER), "--suite", self.suite, "exec", "slurmctld", "--",
                                   *argv], input=stdin, capture_output=True, text=True, timeout=timeout,
                                  stdin=None if stdin is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            proc = subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")
        if check and proc.returncode:
            raise SystemExit(f"run: `{' '.join(argv[:4])}` failed on slurmctld (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[-400:]}")
        return proc

    def our_jobs(self) -> list[int]:
        out = self.exec("squeue", "-h", "-u", "alice,bob", "-o", "%i").stdout
        return [int(x) for x in out.split() if x.isdigit()]

    def drain(self, timeout: float = 180) -> None:
        """Cancel what alice and bob still have, and wait until Slurm has let it go."""
        if self.our_jobs():
            self.exec("scancel", "-u", "alice", check=False)
            self.exec("scancel", "-u", "bob", check=False)
        deadline = time.monotonic() + timeout
        while self.our_jobs():
            if time.monotonic() > deadline:
                raise SystemExit(f"run: jobs of alice/bob still in the queue {timeout:.0f} s after scancel")
            time.sleep(3)

    def restart_daemon(self, policy: str, payback: float | None = PAYBACK, elastic: str = "shipped") -> None:
        self.exec("entrypoint.sh", "daemon-stop", check=False)
        argv = ["--policy", policy] + (["--payback", f"{payback:g}"] if payback is not None else [])
        if elastic == "shipped":   # the shipped [elastic] rules, whatever the test cluster's file says
            text = with_shipped_elastic(self.exec("cat", "/etc/slurm/liquid.toml").stdout)
            self.exec("python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", LIVE_CONFIG, text)
            argv = ["--config", LIVE_CONFIG, *argv]
        self.exec("entrypoint.sh", "daemon-start", *argv, timeout=60)


def job_files(arm: str, job: dict, steps: int) -> tuple[dict[str, str], list[str]]:
    """The batch script and curve of one job, and its sbatch arguments (besides the script)."""
    where = f"{BASE}/{arm}"
    gpus, per_node = job["gpus"], 4
    nodes = math.ceil(gpus / per_node)
    curve_path = f"{where}/curves/{job['name']}.json"
    trainer = (f"{PYTHON} {TRAINER} --curve {curve_path} --steps {steps} --batch-size {job['batch_size']} "
               f"--checkpoint-dir {where}/checkpoints --report-interval 1 || exit $?\n")
    if arm == "plain":
        header = ""
    else:
        elastic = f"{gpus}:{gpus}" if arm == "liquid" else f"1:{job['max_gpus']}"
        header = f"#LIQUID model={job['model']} batch-size={job['batch_size']} elastic={elastic} signal=USR1@15\n"
    # The daemon signals the whole job: the shell ignores USR1 (else it dies of it), the trainer catches it.
    script = f"#!/bin/bash\n{header}trap '' USR1\n{trainer}"
    argv = ["-J", job["name"], "-N", str(nodes), f"--gres=gpu:{gpus // nodes}", "--requeue",
            f"--output={where}/out/%j.out", "--open-mode=append", f"--chdir={where}"]
    return {f"{where}/scripts/{job['name']}.sh": script, curve_path: json.dumps(job["curve"])}, argv


def prepare(live: Live, arm: str, jobs: list[dict], steps: dict[str, int]) -> dict[str, list[str]]:
    where = f"{BASE}/{arm}"
    live.exec("rm", "-rf", where, PROGRESS)
    for sub in ("", "/scripts", "/curves", "/out", "/checkpoints"):
        live.exec("install", "-d", "-m", "1777", where + sub)
    live.exec("install", "-d", "-m", "1777", PROGRESS)
    files, argvs = {}, {}
    for job in jobs:
        written, argv = job_files(arm, job, steps[job["name"]])
        files.update(written)
        argvs[job["name"]] = argv
    live.exec("python3", "-c", WRITER, stdin=json.dumps(files))
    return argvs


def submit(live: Live, arm: str, job: dict, argv: list[str], attempts: int = 3) -> int:
    """sbatch as the job's user; a refusal (exit code, not a timeout) is tried again twice."""
    command = ["runuser", "-u", job["user"], "--", "sbatch", "--parsable", *argv, f"{BASE}/{arm}/scripts/{job['name']}.sh"]
    for attempt in range(attempts):
        proc = live.exec(*command, timeout=60, check=attempt == attempts - 1)
        if proc.returncode == 0:
            return int(proc.stdout.strip().split(";")[0])
        say(f"arm {arm}: sbatch of {job['name']} failed ({proc.stderr.strip()[-200:]}); trying again")
        time.sleep(2)
    raise AssertionError("unreachable")


def run_arm(live: Live, arm: str, workload: dict, smoke: bool, timeout: float, payback: float | None = PAYBACK,
            elastic: str = "shipped") -> dict:
    jobs = (smoke_workload(workload) if smoke else workload)["jobs"]
    steps = {j["name"]: j["steps"] for j in jobs}
    say(f"arm {arm}: draining the queue, cleaning {BASE}/{arm}, daemon --policy {POLICY[arm]}")
    live.exec("entrypoint.sh", "daemon-stop", check=False)
    live.drain()
    argvs = prepare(live, arm, jobs, steps)
    live.restart_daemon(POLICY[arm], payback, elastic)
    order = sorted(jobs, key=lambda j: j["arrival_s"])
    ids: dict[str, int] = {}
    t0 = time.time()
    deadline = time.monotonic() + timeout
    last_note = last_poll = 0.0
    finished = 0
    while time.monotonic() < deadline:
        now = time.time() - t0
        while len(ids) < len(order) and order[len(ids)]["arrival_s"] <= now:
            job = order[len(ids)]
            ids[job["name"]] = submit(live, arm, job, argvs[job["name"]])
        if ids and time.monotonic() - last_poll > 5:
            last_poll = time.monotonic()
            try:
                finished = sum(j.is_finished for j in live.client.accounting(list(ids.values())))
            except LiquidError as exc:          # slurmdbd busy for a moment: ask again at the next poll
                say(f"arm {arm}: sacct did not answer ({exc}); trying again")
            if len(ids) == len(order) and finished == len(order):
                break
            if time.monotonic() - last_note > 30:
                last_note = time.monotonic()
                try:
                    queue = live.client.jobs(list(ids.values()))
                    say(f"arm {arm}: t={now:.0f}s submitted {len(ids)}/{len(order)}, running "
                        f"{sum(j.is_running for j in queue)}, pending {sum(j.is_pending for j in queue)}, "
                        f"finished {finished}")
                except LiquidError as exc:
                    say(f"arm {arm}: squeue did not answer ({exc})")
        time.sleep(1)
    complete = len(ids) == len(order) and finished == len(order)
    if not complete:
        say(f"arm {arm}: not finished within {timeout:.0f} s; cancelling what is left")
        live.drain()
    live.exec("entrypoint.sh", "daemon-stop", check=False)
    result = measure(live, arm, order, ids, t0, steps)
    result.update(complete=complete, smoke=smoke, timeout_s=timeout, payback=payback, elastic=elastic)
    return result


def trainer_events(live: Live, arm: str, job_id: int) -> list[tuple[str, float, str]]:
    proc = live.exec("cat", f"{BASE}/{arm}/out/{job_id}.out", check=False)
    events = []
    for line in proc.stdout.splitlines():
        m = EVENT.match(line.strip())
        if m:
            events.append((m.group(1), float(m.group(2)), m.group(3).strip()))
    return events


def restart_costs(runs: list, events: list[tuple[str, float, str]]) -> list[float]:
    """Seconds from each requeue (the end of a run that did not finish the job) to the first step of
    the trainer's next start."""
    firsts = [t for name, t, _ in events if name == "first-step"]
    costs = []
    for run in runs[:-1]:
        if run.end_time is None:
            continue
        ended = run.end_time.timestamp()
        after = [t for t in firsts if t >= ended - 1.0]   # sacct's times are whole seconds
        if after:
            costs.append(round(after[0] - ended, 1))
    return costs


def measure(live: Live, arm: str, order: list[dict], ids: dict[str, int], t0: float, steps: dict[str, int]) -> dict:
    if not ids:
        return {"arm": arm, "jobs": []}
    doc = json.loads(live.exec("sacct", "--json", "--allocations", "--duplicates", "-j",
                               ",".join(map(str, ids.values())), timeout=120).stdout)
    runs: dict[int, list] = {}
    for run in runs_from_document(doc):
        runs.setdefault(run.job_id, []).append(run)
    latest = {j.job_id: j for j in latest_runs([r for rs in runs.values() for r in rs])}
    per_job, costs, first_starts, busy, ends = [], [], [], 0.0, []
    for job in order:
        jid = ids.get(job["name"])
        mine = sorted(runs.get(jid, []), key=lambda r: r.start_time.timestamp() if r.start_time else math.inf)
        last = latest.get(jid)
        if last is None:
            per_job.append({"name": job["name"], "job_id": jid, "state": "MISSING"})
            continue
        started = [r for r in mine if r.start_time]
        for r in started:
            if r.end_time:
                busy += r.gpus * max(0.0, r.end_time.timestamp() - r.start_time.timestamp())
        record = Record.parse(last.comment)
        resized = str(record.get("resized") or "") if record else ""
        events = trainer_events(live, arm, jid)
        cost = restart_costs(started, events)
        costs += cost
        # A requeue resets the submit time Slurm reports: the job was submitted at its first run's.
        submits = [r.submit_time.timestamp() for r in mine if r.submit_time]
        submit_t = min(submits) if submits else None
        end_t = last.end_time.timestamp() if last.end_time and last.is_finished else None
        if end_t:
            ends.append(end_t)
        firsts = [t for name, t, _ in events if name == "first-step"]
        start_cost = round(firsts[0] - started[0].start_time.timestamp(), 1) if firsts and started else None
        if start_cost is not None:
            first_starts.append(start_cost)
        per_job.append({
            "name": job["name"], "job_id": jid, "state": last.state, "kind": job["curve"]["kind"],
            "asked_gpus": job["gpus"], "steps": steps[job["name"]],
            "submit": submit_t, "start": started[0].start_time.timestamp() if started else None, "end": end_t,
            "jct_s": round(end_t - submit_t, 1) if end_t and submit_t else None,
            "restarts": last.restarts, "resizes": len(resized.split(",")) if resized else 0, "resized": resized,
            "runs": [{"start": r.start_time.timestamp(), "end": r.end_time.timestamp() if r.end_time else None,
                      "gpus": r.gpus, "nodes": list(r.nodes)} for r in started],
            "restart_costs_s": cost, "start_cost_s": start_cost})
    jcts = [j["jct_s"] for j in per_job if j.get("jct_s") is not None]
    makespan = max(ends) - t0 if ends else None
    return {"arm": arm, "policy": POLICY[arm], "suite": live.suite, "jobs_total": len(order),
            "jobs_completed": sum(j.get("state") == "COMPLETED" for j in per_job),
            "avg_jct_s": round(statistics.fmean(jcts), 1) if jcts else None,
            "makespan_s": round(makespan, 1) if makespan else None,
            "gpu_busy_fraction": round(busy / (GPUS * makespan), 3) if makespan else None,
            "resizes": sum(j.get("resizes", 0) for j in per_job),
            "restarts": sum(j.get("restarts", 0) for j in per_job),
            "restart_cost_s": {"n": len(costs), "mean": round(statistics.fmean(costs), 1) if costs else None,
                               "median": round(statistics.median(costs), 1) if costs else None},
            # From Slurm's start of a job's first run to its first step: what a first start costs.
            "start_cost_s": {"n": len(first_starts),
                             "mean": round(statistics.fmean(first_starts), 1) if first_starts else None,
                             "median": round(statistics.median(first_starts), 1) if first_starts else None},
            "started_at": t0, "jobs": per_job}


def remeasure(live: Live, out: Path, workload: dict) -> None:
    old = json.loads(out.read_text())
    ids = {j["name"]: j["job_id"] for j in old["jobs"] if j.get("job_id")}
    steps = {j["name"]: j.get("steps", 0) for j in old["jobs"]}
    order = [j for j in sorted(workload["jobs"], key=lambda j: j["arrival_s"]) if j["name"] in steps]
    result = measure(live, old["arm"], order, ids, old["started_at"], steps)
    result.update({k: old[k] for k in ("complete", "smoke", "timeout_s", "wall_s", "payback") if k in old})
    out.write_text(json.dumps(result, indent=1) + "\n")
    say(f"arm {old['arm']}: measured again -> {out}")


def summary(out_dir: Path) -> str:
    rows = ["| arm | jobs done | avg JCT (s) | makespan (s) | GPU-busy | resizes | restarts | restart cost (s, mean of n) |",
            "|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        path = out_dir / f"{arm}.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        cost = r["restart_cost_s"]
        payback = r.get("payback", PAYBACK)
        rows.append(f"| {arm}{' (smoke)' if r.get('smoke') else ''}{'' if r.get('complete') else ' (INCOMPLETE)'}"
                    f"{f' (payback {payback:g})' if POLICY[arm] != 'static' and payback != PAYBACK else ''} "
                    f"| {r['jobs_completed']}/{r['jobs_total']} | {r['avg_jct_s']} | {r['makespan_s']} "
                    f"| {r['gpu_busy_fraction']} | {r['resizes']} | {r['restarts']} "
                    f"| {cost['mean']} (n={cost['n']}) |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of: " + ", ".join(ARMS))
    parser.add_argument("--workload", type=Path, default=Path(__file__).parent / "workload-seed0.json")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "runs")
    parser.add_argument("--suite", default="trixie", help="the cluster's suite (default trixie: Slurm 24.11)")
    parser.add_argument("--smoke", action="store_true", help="the first 4 jobs at half their steps")
    parser.add_argument("--timeout", type=float, help="seconds per arm (default 1500; --smoke 480)")
    parser.add_argument("--force", action="store_true", help="run arms whose result file exists already")
    parser.add_argument("--payback", type=float, default=PAYBACK, metavar="F",
                        help="override the daemon's [elastic] payback for the elastic arms (default: the shipped rule, "
                             "each policy's own guard; 0: every change the policy asks for)")
    parser.add_argument("--elastic", choices=("shipped", "cluster"), default="shipped",
                        help="the daemon's [elastic] rules: shipped = etc/slurm/liquid.toml's (default), cluster = the "
                             "test cluster's (containers/slurm/liquid.toml: 15 s slots)")
    parser.add_argument("--remeasure", action="store_true",
                        help="run nothing: read sacct and the trainers' output again for the jobs of the "
                             "existing result files (while the cluster still has them)")
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        parser.error(f"unknown arm(s) {', '.join(unknown) or '(none)'}; arms are {', '.join(ARMS)}")
    try:
        workload = json.loads(args.workload.read_text())
        assert isinstance(workload.get("jobs"), list) and workload["jobs"]
    except (OSError, ValueError, AssertionError) as exc:
        parser.error(f"--workload {args.workload}: not a workload file from workload.py ({exc})")
    if args.payback is not None and not 0 <= args.payback <= 100:
        parser.error(f"--payback {args.payback:g}: give a factor from 0 to 100")
    timeout = args.timeout or (480.0 if args.smoke else 1500.0)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    live = Live(args.suite)
    ok = True
    for arm in arms:
        out = args.out_dir / f"{arm}.json"
        if args.remeasure:
            if out.exists():
                remeasure(live, out, workload)
            continue
        if out.exists() and not args.force:
            say(f"arm {arm}: {out} exists, skipped (--force reruns it)")
            continue
        t = time.monotonic()
        result = run_arm(live, arm, workload, args.smoke, timeout, args.payback, args.elastic)
        result["wall_s"] = round(time.monotonic() - t, 1)
        out.write_text(json.dumps(result, indent=1) + "\n")
        ok &= bool(result.get("complete"))
        say(f"arm {arm}: avg JCT {result.get('avg_jct_s')} s, makespan {result.get('makespan_s')} s, "
            f"{result.get('resizes')} resizes, {result.get('restarts')} restarts -> {out}")
    if not args.remeasure:
        live.exec("entrypoint.sh", "daemon-start", check=False, timeout=60)   # the cluster's own policy again
    table = summary(args.out_dir)
    (args.out_dir / "summary.md").write_text(table)
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
