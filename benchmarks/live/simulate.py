"""The live replay in the simulator, side by side with the live results: `slurm-liquid simulate --rules
daemon` (slurm_liquid/sim/live.py) with each arm's live restart cost and guard.

    python benchmarks/live/simulate.py --workload benchmarks/live/workload-seed0.json \\
        --runs benchmarks/live/runs [--restart-cost 12] [--speed measured|oracle] [--config FILE] [--out sim.json]

No rule lives here: the arms are `sim.live.run_live` under `Rules.daemon` from `--config`'s [elastic]
(default: the test cluster's, containers/slurm/liquid.toml, which the live runs used). The restart cost
(requeue to the trainer's first step again) and the first-start cost are the means measured in the
live runs' JSON (`--runs`), or `--restart-cost` / `--start-cost`; each drf/dl2 arm runs with the
payback its live run had (`run.py --payback`), else the policy's own guard. The gap to the live average
JCT is printed per arm where a live result exists. The live arm `liquid` (rigid jobs placed by the daemon)
is simulated as `static`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from slurm_liquid import config as config_module  # noqa: E402
from slurm_liquid.loop import Rules  # noqa: E402
from slurm_liquid.sim.live import run_live  # noqa: E402
from slurm_liquid.sim.livegen import smoke  # noqa: E402

ARMS = ("plain", "liquid", "drf", "dl2")
SIMULATED_AS = {"plain": "plain", "liquid": "static", "drf": "drf", "dl2": "dl2"}
TEST_CLUSTER = REPO / "containers" / "slurm" / "liquid.toml"


def measured_costs(runs: Path) -> tuple[float | None, float | None]:
    """(mean restart cost, mean first-start cost) over every job of every live result in `runs`."""
    restarts, starts = [], []
    for path in (runs / f"{arm}.json" for arm in ARMS):
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        for job in result.get("jobs", []):
            restarts += job.get("restart_costs_s", [])
            if job.get("start_cost_s") is not None:
                starts.append(job["start_cost_s"])
    return (statistics.fmean(restarts) if restarts else None), (statistics.fmean(starts) if starts else None)


def recorded_payback(runs: Path, arm: str) -> float | None:
    """The payback the live `arm` in `runs` ran with (`run.py --payback`); None (the policy's own guard)
    when it did not say."""
    path = runs / f"{arm}.json"
    value = json.loads(path.read_text()).get("payback") if path.exists() else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def daemon_rules(config: Path | None = None, **elastic) -> Rules:
    """`Rules.daemon` of the test cluster's [elastic] (or `config`'s), with `elastic` overrides."""
    section = config_module.load(config or TEST_CLUSTER).elastic
    return Rules.daemon(replace(section, **{k: v for k, v in elastic.items() if v is not None}))


def simulate(workload: dict, arm: str, restart_cost: float, speed_kind: str, start_cost: float | None = None,
             payback: float | None = None, rules: Rules | None = None) -> dict:
    """One live arm in the simulator under the daemon's rules; `payback` None: the policy's own guard."""
    rules = replace(rules or daemon_rules(), payback=payback)
    start = restart_cost if start_cost is None else start_cost
    result = run_live(workload, SIMULATED_AS[arm], rules, restart_cost, start, speed_kind, name=f"live-{arm}")
    return {"arm": arm, "payback": payback, "restart_cost_s": round(restart_cost, 1), "start_cost_s": round(start, 1),
            "speed": speed_kind, "jobs": len(result.jcts), "avg_jct_s": round(result.avg_jct_s, 1),
            "makespan_s": round(result.makespan_s, 1), "gpu_busy_fraction": round(result.gpu_utilisation, 3),
            "restarts": result.restarts, "jcts": {k: round(v, 1) for k, v in result.jcts.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=Path(__file__).parent / "workload-seed0.json")
    parser.add_argument("--runs", type=Path, default=Path(__file__).parent / "runs",
                        help="the live results (run.py --out-dir): restart cost and live JCTs")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--restart-cost", type=float, help="seconds a resize costs (default: measured in --runs)")
    parser.add_argument("--start-cost", type=float,
                        help="seconds a job's first start costs (default: measured in --runs, else the restart cost)")
    parser.add_argument("--speed", choices=("measured", "oracle"), default="measured")
    parser.add_argument("--config", type=Path, help="the liquid.toml whose [elastic] the live daemon ran with "
                                                    "(default: the test cluster's)")
    parser.add_argument("--smoke", action="store_true", help="the smoke workload (run.py --smoke): 4 jobs, half steps")
    parser.add_argument("--payback", type=float, metavar="F",
                        help="the guard for drf/dl2 (default: what each arm's live run in --runs ran with, else the "
                             "policy's own)")
    parser.add_argument("--out", type=Path, help="write the simulated results here as JSON")
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        parser.error(f"--arms: choose from {', '.join(ARMS)}")
    try:
        workload = json.loads(args.workload.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"--workload {args.workload}: {exc}")
    if args.smoke:
        workload = smoke(workload)
    measured = measured_costs(args.runs) if args.runs.is_dir() else (None, None)
    cost = args.restart_cost if args.restart_cost is not None else measured[0]
    start = args.start_cost if args.start_cost is not None else measured[1]
    if cost is None:
        parser.error(f"no restart cost measured in {args.runs}; pass --restart-cost SECONDS")
    rules = daemon_rules(args.config)
    paybacks = {arm: args.payback if args.payback is not None else recorded_payback(args.runs, arm) for arm in arms}
    results = {arm: simulate(workload, arm, cost, args.speed, start, paybacks[arm], rules) for arm in arms}
    print(f"restart cost {cost:.1f} s, first start {cost if start is None else start:.1f} s, speed model: {args.speed}")
    print("| arm | simulated avg JCT (s) | live avg JCT (s) | gap | sim makespan (s) | sim GPU-busy | sim restarts |")
    print("|---|---|---|---|---|---|---|")
    for arm, sim in results.items():
        live_path = args.runs / f"{arm}.json"
        live = json.loads(live_path.read_text()) if live_path.exists() else None
        live_jct = live.get("avg_jct_s") if live and live.get("jobs_total") == sim["jobs"] else None
        gap = f"{(sim['avg_jct_s'] - live_jct) / live_jct:+.1%}" if live_jct else "n/a"
        sim["live_avg_jct_s"], sim["gap"] = live_jct, gap
        print(f"| {arm} | {sim['avg_jct_s']} | {live_jct if live_jct else 'n/a'} | {gap} | {sim['makespan_s']} "
              f"| {sim['gpu_busy_fraction']} | {sim['restarts']} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
