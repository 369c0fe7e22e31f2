#!/usr/bin/env python3
"""The chaos soak: a replayed workload of elastic and rigid jobs (stand-in trainers with checkpoints,
each with a staged dataset) on the containerized Slurm cluster while faults are injected at random.

    containers/cluster up
    python benchmarks/chaos/soak.py --suite trixie --minutes 30 --jobs 36 --seed 1 --out benchmarks/chaos/runs/NAME

Every 20-60 s (seeded) one fault, each undone the way an operator or systemd would:

- daemon-kill:      SIGKILL the daemon; systemd's part (start it again) 5 s later
- slurmctld-restart: stop slurmctld (SIGTERM) and start it again
- agent-kill:       SIGKILL a node agent, mid-copy when a staging worker runs somewhere; started again
- drain:            `scontrol update State=DRAIN` a node, RESUME after 20-40 s
- lost-requeue:     the next `scontrol requeuehold` the daemon sends takes effect but its answer is lost
                    (a shim on the controller's PATH answers "Socket timed out", exit 1)
- disk-full:        a node's staging area (a 256 MiB tmpfs) filled to the last byte for 30 s
- net-cut:          a node's container disconnected from the cluster network for 30-45 s, then
                    reconnected and resumed

What must hold at the end (each checked, listed in results.json; exit 1 when any fails):

- every job completed exactly once: its last run COMPLETED with exit 0, no earlier run COMPLETED;
- steps conserved: every run of a trainer resumed at the step of the last checkpoint written before it
  (or 0), and the last run went on to the job's full step count;
- no job held (JobHeldUser with our tag) longer than max_hold_s + one poll, sampled every 5 s;
- no half copy visible: every LIQUID_DATA a TaskProlog would export (sampled on every node every
  10 s) names a finished copy (its manifest beside it, no `.tmp-`), and every job that read a local
  copy found it identical to its source (`diff -r`, as the job's user);
- the daemon's heartbeat back within 60 s of each daemon kill and slurmctld restart;
- the journal reconciles: no resize left unfinished when the soak ends.

Output: <out>/faults.jsonl (one line per fault: when, what, where, how long recovery took),
<out>/results.json, <out>/summary.md.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from slurm_liquid.slurm.parse import runs_from_document  # noqa: E402

CLUSTER = REPO / "containers" / "cluster"
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
BASE = "/shared/chaos"
AREA = "/var/tmp/liquid-staging"
TRAINER = "/opt/slurm-liquid/examples/elastic/standin_trainer.py"
PYTHON = "/opt/slurm-liquid/bin/python"
HEARTBEAT = "/var/spool/slurm-liquid/heartbeat"
JOURNAL = "/var/lib/slurm-liquid/journal.sqlite"
MAX_HOLD_S, POLL_S = 90, 5           # containers/slurm/liquid.toml [daemon]
FAULTS = ("daemon-kill", "slurmctld-restart", "agent-kill", "drain", "lost-requeue", "disk-full", "net-cut")
EVENT = re.compile(r"^standin-trainer: event=(start|checkpoint) t=([0-9.]+) step=(\d+)")
SHIM = """#!/bin/sh
# chaos: the next requeuehold takes effect, but its answer is lost
case " $* " in *" requeuehold "*)
    if rm /run/chaos/lose-requeue 2>/dev/null; then
        /usr/bin/scontrol "$@" >/dev/null 2>&1
        echo "$(date +%s) $*" >> /run/chaos/lost
        echo "scontrol: error: Socket timed out on send/recv operation" >&2
        exit 1
    fi;;
esac
exec /usr/bin/scontrol "$@"
"""
CHECK_COPIES = r"""
import glob, os, re
bad = []
for f in glob.glob('/run/slurm-liquid-agent/staged/[0-9]*'):
    for path in re.findall(r"='?([^'\n]+)'?", open(f).read()):
        if path.startswith('AREA/'):
            entry = os.path.dirname(path.split('/data')[0] + '/data')
            if '/.tmp-' in path or not os.path.isfile(os.path.join(entry, 'manifest.json')):
                bad.append(f + ': ' + path)
print('\n'.join(bad))
""".replace("AREA", AREA)
SCRIPT = """#!/bin/bash
#LIQUID model=resnet18 batch-size=128 elastic={elastic} signal=USR1@15 dataset={dataset}
trap '' USR1
case "$LIQUID_DATA" in
  {area}/*) if diff -r "$LIQUID_DATA" {dataset} >/dev/null 2>&1; then echo "chaos: data=local-same"
            else echo "chaos: data=local-DIFFERENT $LIQUID_DATA"; fi ;;
  *) echo "chaos: data=shared" ;;
esac
{python} {trainer} --curve {curve} --steps {steps} --batch-size 128 --checkpoint-dir {base}/checkpoints \\
    --report-interval 1 || exit $?
"""


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Chaos:
    def __init__(self, suite: str, out: Path, rng: random.Random) -> None:
        self.suite, self.out, self.rng = suite, out, rng
        self.faults: list[dict] = []
        self.undo: list[tuple[float, str, str, dict]] = []      # (when, kind, target, record)
        self.violations: list[str] = []
        self.job_seconds = (45.0, 90.0)
        self.daemon_args: tuple[str, ...] = ()
        self.arrivals = 0.55                 # part of the fault time over which jobs arrive
        self.kinds: tuple[str, ...] = FAULTS

    # ------------------------------------------------------------ the cluster

    def exec(self, host: str, *argv: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([sys.executable, str(CLUSTER), "--suite", self.suite, "exec", host, "--", *argv],
                                  input=stdin, capture_output=True, text=True, timeout=timeout,
                                  stdin=None if stdin is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")

    def ctl(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        return self.exec("slurmctld", *argv, **kw)

    def docker(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60)

    def heartbeat(self) -> float:
        out = self.ctl("cut", "-d", " ", "-f1", HEARTBEAT).stdout.strip()
        return float(out) if re.fullmatch(r"[0-9.]+", out) else 0.0

    def heartbeat_back(self, since: float, limit: float = 60.0) -> float | None:
        """Seconds from `since` until the daemon wrote a heartbeat after it, None past `limit`."""
        while time.time() - since < limit + 10:
            beat = self.heartbeat()
            if beat > since:
                return round(beat - since, 1)
            time.sleep(1)
        return None

    # ------------------------------------------------------------ setup

    def prepare(self, jobs: int, minutes: float) -> list[dict]:
        # progress reports are keyed by job id: a cluster made afresh numbers its jobs from 1 again,
        # and a report left by an earlier job of the same id would send a trainer to its checkpoint
        self.ctl("rm", "-rf", BASE, "/shared/slurm-liquid/progress")
        for sub in ("", "/scripts", "/out", "/checkpoints", "/data"):
            self.ctl("install", "-d", "-m", "1777", BASE + sub)
        self.ctl("install", "-d", "-m", "1777", "/shared/slurm-liquid/progress")
        for user in ("alice", "bob"):
            for k in range(4):           # many small files, readable by their owner only
                path = f"{BASE}/data/{user}-ds{k}"
                proc = self.exec("slurmctld", "runuser", "-u", user, "--", "sh", "-c",
                                 f"mkdir -p {path}/sub && for i in $(seq 1 {30 + 10 * k}); do head -c 4096 "
                                 f"/dev/urandom > {path}/sub/f$i; done && echo hi > {path}/top && chmod 700 {path}")
                if proc.returncode:
                    raise SystemExit(f"soak: cannot make {path}: {proc.stderr}")
        curves = [j["curve"] for j in json.loads((REPO / "benchmarks/live/workload-seed0.json").read_text())["jobs"]]
        plan, files = [], {}
        span = minutes * 60 * self.arrivals     # arrivals early: the cluster is busy, elastic jobs are resized
        for i in range(jobs):
            user = ("alice", "bob")[i % 2]
            gpus = self.rng.choice((1, 2, 2, 4))
            elastic = f"1:{max(gpus, self.rng.choice((2, 4)))}" if i % 3 else f"{gpus}:{gpus}"   # a third rigid
            curve = curves[i % len(curves)]
            seconds = self.rng.uniform(*self.job_seconds)
            steps = max(20, int(seconds / curve["step_s"].get(f"{gpus}x1", curve["base_step_s"])))
            name = f"chaos-{i:02d}"
            files[f"{BASE}/scripts/{name}.curve.json"] = json.dumps(curve)
            files[f"{BASE}/scripts/{name}.sh"] = SCRIPT.format(
                elastic=elastic, dataset=f"{BASE}/data/{user}-ds{self.rng.randrange(4)}", area=AREA, python=PYTHON,
                trainer=TRAINER, curve=f"{BASE}/scripts/{name}.curve.json", steps=steps, base=BASE)
            plan.append({"name": name, "user": user, "gpus": gpus, "elastic": elastic, "steps": steps,
                         "arrival_s": round(self.rng.uniform(0, span), 1)})
        writer = ("import json, os, sys\nfor p, t in json.load(sys.stdin).items():\n"
                  "    open(p, 'w').write(t); os.chmod(p, 0o755)\n")
        self.ctl("python3", "-c", writer, stdin=json.dumps(files))
        self.ctl("install", "-d", "-m", "755", "/run/chaos")
        self.ctl("python3", "-c", "import sys; open('/usr/local/sbin/scontrol', 'w').write(sys.stdin.read())",
                 stdin=SHIM)
        self.ctl("chmod", "755", "/usr/local/sbin/scontrol")
        return sorted(plan, key=lambda j: j["arrival_s"])

    def submit(self, job: dict) -> int | None:
        argv = ["runuser", "-u", job["user"], "--", "sbatch", "--parsable", "-J", job["name"],
                f"--gres=gpu:{job['gpus']}", "--requeue", "--time=20", f"--output={BASE}/out/{job['name']}.out",
                "--open-mode=append", f"--chdir={BASE}", f"{BASE}/scripts/{job['name']}.sh"]
        for _ in range(20):          # slurmctld may be restarting: the user tries again, as users do
            proc = self.ctl(*argv)
            if proc.returncode == 0 and proc.stdout.strip().split(";")[0].isdigit():
                return int(proc.stdout.strip().split(";")[0])
            time.sleep(3)
        self.violations.append(f"{job['name']}: sbatch failed for a minute: {proc.stderr.strip()[-200:]}")
        return None

    # ------------------------------------------------------------ faults

    def inject(self, t: float) -> None:
        kind = self.rng.choice(self.kinds)
        busy = {target for _, _, target, _ in self.undo}       # a node under a fault is not faulted again
        node = self.rng.choice([n for n in NODES if n not in busy] or list(NODES))
        record = {"t": round(t, 1), "at": time.time(), "fault": kind}
        if kind == "daemon-kill":
            self.ctl("pkill", "-KILL", "-f", "slurm-liquid daemon")
            time.sleep(5)
            restarted = time.time()
            self.ctl("entrypoint.sh", "daemon-start", *self.daemon_args, timeout=60)
            record["heartbeat_back_s"] = self.heartbeat_back(restarted)
        elif kind == "slurmctld-restart":
            self.ctl("pkill", "-TERM", "-x", "slurmctld")
            for _ in range(30):
                if self.ctl("pgrep", "-x", "slurmctld").returncode:
                    break
                time.sleep(1)
            restarted = time.time()
            self.ctl("slurmctld")
            record["heartbeat_back_s"] = self.heartbeat_back(restarted)
        elif kind == "agent-kill":
            busy = [n for n in NODES if self.exec(n, "pgrep", "-f", "slurm_liquid.staging.worker").returncode == 0]
            node = self.rng.choice(busy) if busy else node
            record.update(node=node, mid_copy=bool(busy))
            self.exec(node, "pkill", "-KILL", "-f", "slurm-liquid agent")
            time.sleep(3)
            self.exec(node, "entrypoint.sh", "agent-start", timeout=60)
        elif kind == "drain":
            record["node"] = node
            self.ctl("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=chaos")
            self.undo.append((time.time() + self.rng.uniform(20, 40), "resume", node, record))
        elif kind == "lost-requeue":
            self.ctl("touch", "/run/chaos/lose-requeue")
        elif kind == "disk-full":
            record["node"] = node
            fs = self.exec(node, "findmnt", "-n", "-o", "FSTYPE", AREA).stdout.strip()
            if fs != "tmpfs":            # never fill a disk that is not the test's own small tmpfs
                record["skipped"] = f"{AREA} is {fs or 'no mount'}, not a tmpfs"
            else:
                self.exec(node, "sh", "-c", f"cat /dev/zero > {AREA}/.chaos-fill 2>/dev/null; df -k {AREA} | tail -1")
                self.undo.append((time.time() + 30, "unfill", node, record))
        elif kind == "net-cut":
            record["node"] = node
            net = f"liquid-{self.suite}"
            self.docker("network", "disconnect", net, f"{net}-{node}")
            self.undo.append((time.time() + self.rng.uniform(30, 45), "reconnect", node, record))
        say(f"fault {kind} {record.get('node', '')}")
        self.faults.append(record)
        self.log(record)

    def undo_due(self, force: bool = False) -> None:
        for item in sorted(self.undo):
            when, what, node, record = item
            if not force and when > time.time():
                continue
            self.undo.remove(item)
            if what == "resume":
                self.ctl("scontrol", "update", f"NodeName={node}", "State=RESUME")
            elif what == "unfill":
                self.exec(node, "rm", "-f", f"{AREA}/.chaos-fill")
            elif what == "reconnect":
                net = f"liquid-{self.suite}"
                self.docker("network", "connect", "--alias", node, net, f"{net}-{node}")
                time.sleep(2)
                self.ctl("scontrol", "update", f"NodeName={node}", "State=RESUME")
            self.log({"t_undo": round(time.time() - record["at"], 1), "undo": what, "node": node,
                      "fault_t": record["t"]})

    def log(self, record: dict) -> None:
        with open(self.out / "faults.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------ watching

    def watch(self, ids: dict[str, int], held: dict[int, float], worst: dict[int, float]) -> None:
        """Held jobs (how long each has been held), and half copies the TaskProlog could export."""
        proc = self.ctl("squeue", "-h", "-u", "alice,bob", "-o", "%i|%T|%r", timeout=30)
        if proc.returncode == 0:
            now = time.time()
            held_now = {int(i) for i, state, reason in (line.split("|") for line in proc.stdout.splitlines())
                        if state == "PENDING" and "Held" in reason and i.isdigit()}
            for job_id in held_now:
                held.setdefault(job_id, now)
                worst[job_id] = max(worst.get(job_id, 0.0), now - held[job_id])
            for job_id in set(held) - held_now:
                del held[job_id]

    def half_copies(self) -> None:
        for node in NODES:
            bad = self.exec(node, "python3", "-c", CHECK_COPIES, timeout=30).stdout.strip()
            if bad:
                self.violations.append(f"{node}: a copy not finished was exported: {bad[:300]}")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.jsonl").write_text("")
    chaos = Chaos(args.suite, out, random.Random(args.seed))
    chaos.job_seconds, chaos.arrivals = args.job_seconds, args.arrivals
    chaos.kinds = tuple(k for k in FAULTS if k not in args.without)
    # unguarded, so that the policy resizes often and lost requeue answers hit real resizes
    chaos.daemon_args = ("--policy", args.policy, "--payback", "0") if args.policy else ()
    chaos.ctl("entrypoint.sh", "daemon-stop")           # started again with the soak's policy
    chaos.ctl("entrypoint.sh", "daemon-start", *chaos.daemon_args, timeout=60)
    for node in NODES:
        chaos.exec(node, "entrypoint.sh", "agent-start", timeout=60)
    plan = chaos.prepare(args.jobs, args.minutes)
    say(f"soak: {len(plan)} jobs, faults for {args.minutes:g} min on {args.suite}")
    ids: dict[str, int] = {}
    held: dict[int, float] = {}
    worst: dict[int, float] = {}
    t0 = time.time()
    end_faults = t0 + args.minutes * 60
    next_fault = t0 + chaos.rng.uniform(20, 60)
    last_watch = last_copies = 0.0
    finished: set[int] = set()
    deadline = end_faults + args.drain_minutes * 60
    while time.time() < deadline:
        now = time.time()
        while len(ids) < len(plan) and plan[len(ids)]["arrival_s"] <= now - t0:
            job = plan[len(ids)]
            ids[job["name"]] = chaos.submit(job) or -1
        if now >= next_fault and now < end_faults:
            chaos.inject(now - t0)
            next_fault = time.time() + chaos.rng.uniform(20, 60)
        chaos.undo_due(force=now >= end_faults)
        if now - last_watch >= 5:
            last_watch = now
            chaos.watch(ids, held, worst)
        if now - last_copies >= 10:
            last_copies = now
            chaos.half_copies()
            done = chaos.ctl("sacct", "-n", "-X", "-P", "-o", "JobID,State", "-u", "alice,bob", "-S", "now-3hours",
                             timeout=30).stdout
            finished = {int(j) for j, s in (l.split("|", 1) for l in done.splitlines() if "|" in l)
                        if j.isdigit() and s.split()[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                                            "OUT_OF_MEMORY", "NODE_FAIL")}
            if now >= end_faults and len(ids) == len(plan) and set(ids.values()) <= finished:
                break
        time.sleep(1)
    chaos.undo_due(force=True)
    time.sleep(POLL_S * 2)
    results = judge(chaos, plan, ids, worst, args)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    summarize(out, results)
    if not args.keep:
        chaos.ctl("scancel", "-u", "alice")
        chaos.ctl("scancel", "-u", "bob")
    chaos.ctl("entrypoint.sh", "daemon-stop")            # back to the cluster's own settings
    chaos.ctl("entrypoint.sh", "daemon-start", timeout=60)
    chaos.ctl("rm", "-f", "/usr/local/sbin/scontrol", "/run/chaos/lose-requeue")
    say(f"soak: {'PASS' if results['pass'] else 'FAIL'}: {results['checks']}")
    return 0 if results["pass"] else 1


def judge(chaos: Chaos, plan: list[dict], ids: dict[str, int], worst: dict[int, float], args) -> dict:
    known = [i for i in ids.values() if i > 0]
    doc = json.loads(chaos.ctl("sacct", "--json", "--allocations", "--duplicates", "-j",
                               ",".join(map(str, known)), timeout=120).stdout or "{}") if known else {"jobs": []}
    runs: dict[int, list] = {}
    for run_ in runs_from_document(doc):
        runs.setdefault(run_.job_id, []).append(run_)
    problems: dict[str, list[str]] = {k: [] for k in ("exactly_once", "steps", "held", "half_copy", "heartbeat",
                                                       "journal", "submitted")}
    problems["submitted"] += [v for v in chaos.violations if "sbatch" in v]
    problems["half_copy"] += [v for v in chaos.violations if "copy" in v]
    per_job = []
    for job in plan:
        job_id = ids.get(job["name"], -1)
        records = runs.get(job_id, [])
        states = [r.state for r in records]
        text = chaos.ctl("cat", f"{BASE}/out/{job['name']}.out").stdout
        events = [(m.group(1), int(m.group(3))) for m in map(EVENT.match, text.splitlines()) if m]
        starts = [s for kind, s in events if kind == "start"]
        expected, last_ckpt = [], 0
        for kind, step in events:
            if kind == "start":
                expected.append(last_ckpt)
            else:
                last_ckpt = step
        if not states or states[-1] != "COMPLETED" or states[:-1].count("COMPLETED"):
            problems["exactly_once"].append(f"{job['name']} ({job_id}): runs {states}")
        if starts != expected or not starts:
            problems["steps"].append(f"{job['name']}: started at {starts}, checkpoints say {expected}")
        if "data=local-DIFFERENT" in text:
            problems["half_copy"].append(f"{job['name']}: read a local copy that differs from its source")
        if worst.get(job_id, 0) > MAX_HOLD_S + POLL_S + 5:
            problems["held"].append(f"{job['name']}: held {worst[job_id]:.0f} s")
        per_job.append({"name": job["name"], "id": job_id, "elastic": job["elastic"], "runs": states,
                        "starts": starts, "data": sorted(set(re.findall(r"chaos: data=(\S+)", text))),
                        "held_s": round(worst.get(job_id, 0), 1)})
    for fault in chaos.faults:
        if fault["fault"] in ("daemon-kill", "slurmctld-restart") and (fault.get("heartbeat_back_s") is None
                                                                      or fault["heartbeat_back_s"] > 60):
            problems["heartbeat"].append(f"{fault['fault']} at t={fault['t']}: heartbeat {fault.get('heartbeat_back_s')}")
    unfinished = chaos.ctl("python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute("
                           "\"select count(*) from changes where phase not in ('done','failed','rolled-back')\")"
                           ".fetchone()[0], c.execute('select count(*) from changes').fetchone()[0])", JOURNAL).stdout.split()
    if len(unfinished) != 2 or unfinished[0] != "0":
        problems["journal"].append(f"unfinished resizes in the journal: {unfinished}")
    lost = chaos.ctl("cat", "/run/chaos/lost").stdout.strip().splitlines()
    counts = {k: sum(f["fault"] == k for f in chaos.faults) for k in FAULTS}
    return {"suite": args.suite, "without": sorted(args.without), "policy": args.policy or "(cluster's)", "arrivals": args.arrivals, "slurm": chaos.ctl("sinfo", "-V").stdout.strip(), "seed": args.seed,
            "minutes": args.minutes, "jobs": len(plan), "faults": counts, "faults_total": len(chaos.faults),
            "requeue_answers_lost": len(lost), "resizes": int(unfinished[1]) if len(unfinished) == 2 else None,
            "requeued_runs": sum(max(len(j["runs"]) - 1, 0) for j in per_job),
            "local_reads": sum("local-same" in j["data"] for j in per_job),
            "checks": {k: "ok" if not v else f"{len(v)} failed" for k, v in problems.items()},
            "problems": problems, "pass": not any(problems.values()), "per_job": per_job,
            "heartbeat_back_s": [f.get("heartbeat_back_s") for f in chaos.faults if "heartbeat_back_s" in f]}


def summarize(out: Path, r: dict) -> None:
    lines = [f"# Chaos soak: {r['suite']} ({r['slurm']}), seed {r['seed']}, {r['minutes']:g} min of faults", "",
             f"{r['jobs']} jobs, {r['faults_total']} faults ({', '.join(f'{k} {v}' for k, v in r['faults'].items())}); "
             f"{r['requeued_runs']} requeued runs, {r['resizes']} resizes in the journal, "
             f"{r['requeue_answers_lost']} requeue answers lost, {r['local_reads']} jobs read a local copy.", "",
             "| check | result |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in r["checks"].items()]
    lines += ["", f"Heartbeat back after each daemon kill / slurmctld restart (s): {r['heartbeat_back_s']}", "",
              f"**{'PASS' if r['pass'] else 'FAIL'}**", ""]
    for k, v in r["problems"].items():
        lines += [f"- {k}: {p}" for p in v[:20]]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="trixie", choices=("trixie", "bookworm", "sid"))
    parser.add_argument("--minutes", type=float, default=30.0, help="how long faults are injected")
    parser.add_argument("--drain-minutes", type=float, default=10.0, help="then at most this long for jobs to end")
    parser.add_argument("--jobs", type=int, default=36)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--job-seconds", type=lambda t: tuple(float(x) for x in t.split(",")), default=(45.0, 90.0),
                        metavar="LO,HI", help="each job's run time at its GPU count, drawn in this range")
    parser.add_argument("--out", required=True)
    parser.add_argument("--policy", default="drf", help="the daemon's elastic policy for the soak ('' for the "
                        "cluster's own): DRF resizes elastic jobs whenever the cluster is shared")
    parser.add_argument("--arrivals", type=float, default=0.35, help="jobs arrive over this part of the fault time")
    parser.add_argument("--without", type=lambda t: set(t.split(",")), default=set(), metavar="FAULT,...",
                        help=f"faults not to inject (of {', '.join(FAULTS)})")
    parser.add_argument("--keep", action="store_true", help="leave unfinished jobs in the queue")
    args = parser.parse_args()
    if args.jobs < 1 or args.minutes <= 0:
        parser.error("--jobs and --minutes must be positive")
    if args.without - set(FAULTS) or not set(FAULTS) - args.without:
        parser.error(f"--without: name some of {', '.join(FAULTS)}, not all")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
