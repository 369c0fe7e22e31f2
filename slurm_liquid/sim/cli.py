"""`slurm-liquid simulate`: replay a workload under one or more policies and compare them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from slurm_liquid.errors import UsageError
from slurm_liquid.policy import LEARNED_POLICY_NAMES, POLICY_NAMES

DEFAULT_POLICIES = "fifo,drf,tiresias,optimus"
LIVE_DEFAULT = "plain,static,drf,dl2"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", metavar="FILE_OR_DIR",
                     help="a Pollux-format CSV, or a directory of them (use 'pollux' for the 8 bundled workloads, "
                          "'dl2-paper-small' or 'dl2-paper-large' for the replica of the DL2 paper's setting), or a "
                          "live-replay workload file (benchmarks/live/workload.py --out FILE.json)")
    src.add_argument("--philly", type=int, metavar="JOBS",
                     help="a synthetic workload of JOBS consecutive Philly jobs mapped onto the measured applications")
    parser.add_argument("--philly-time-scale", type=float, default=1.0, metavar="F",
                        help="multiply Philly inter-arrival times by F (< 1 raises the load; default 1)")
    parser.add_argument("--policy", default=None, metavar="NAME[,NAME...]",
                        help=f"policies to compare, or 'all' (known: {', '.join(POLICY_NAMES + LEARNED_POLICY_NAMES)}, "
                             f"static; on a live workload file also plain; default {DEFAULT_POLICIES}, on a live "
                             f"workload file {LIVE_DEFAULT})")
    parser.add_argument("--rules", choices=("reference", "daemon"), default=None,
                        help="the world the policies' decisions are carried out in (slurm_liquid/loop/rules.py): "
                             "reference = the Pollux artifact's simulator (any GPUs per node, jobs suspended, every "
                             "interval, no guard; the published numbers); daemon = the live daemon's (Slurm's shapes, "
                             "never suspended, the placement pass starts waiting jobs, the policy every slot_s, the "
                             "change limits, each policy's restart guard, resizes weighed on their placed nodes), "
                             "from the [elastic] section of --config. Default: daemon on a live workload file, else reference")
    parser.add_argument("--config", metavar="liquid.toml",
                        help="the site configuration whose [elastic] section gives --rules daemon (default: the "
                             "shipped defaults, etc/slurm/liquid.toml)")
    parser.add_argument("--start-cost", type=float, default=None, metavar="S",
                        help="live workload files: seconds from a job's first start to its first step (default: the "
                             "live replay's mean, 0.8)")
    parser.add_argument("--policy-file", metavar="FILE.npz",
                        help="trained DL2 policy for --policy dl2 (default: the shipped one for the restart penalty)")
    parser.add_argument("--restart-penalty", type=float, default=None, metavar="S",
                        help="seconds lost on every start/restart of a job (default 30, the artifact's; on a live "
                             "workload file 17, the live replay's mean requeue-to-first-step)")
    parser.add_argument("--nodes", type=int, default=16, metavar="N")
    parser.add_argument("--gpus-per-node", type=int, default=4, metavar="G")
    parser.add_argument("--interval", type=float, default=60.0, metavar="S", help="scheduling interval (default 60)")
    parser.add_argument("--nodes-per-switch", type=int, default=None, metavar="K",
                        help="nodes per leaf switch (default: one switch for all)")
    parser.add_argument("--cross-switch-slowdown", type=float, default=0.0, metavar="F",
                        help="rate penalty in [0,1) for jobs spanning leaf switches (default 0)")
    parser.add_argument("--interference", type=float, default=0.0, metavar="F",
                        help="the artifact's slowdown for distributed jobs sharing a node (default 0)")
    parser.add_argument("--placement", default="greedy", metavar="NAME",
                        help="greedy: the artifact's most-free-node rule (default, used for calibration); "
                             "liquid: Liquid best-fit; or any other placer of the placement room (ga, slurm, first-fit, random); "
                             "for dl2-paper-*: cpu-first (default) or artifact, the same for every policy")
    parser.add_argument("--alpha", type=float, default=0.5, help="Liquid best-fit network/load trade (default 0.5)")
    parser.add_argument("--speed", choices=("oracle", "measured"), default="oracle",
                        help="what policies know of each job's speed: oracle = the traces' exact answers (default; "
                             "the published numbers), measured = the speed room fitted on each job's progress reports, "
                             "as on the live cluster")
    parser.add_argument("--shape", choices=("free", "uniform"), default="free",
                        help="GPUs per node of a multi-node job: free = any (the artifact's, default), uniform = the same "
                             "on every node, as Slurm expresses it (what the live daemon does)")
    parser.add_argument("--rigid", action="store_true", help="jobs never run on other than the GPUs they asked for")
    parser.add_argument("--batch-scaling", action="store_true",
                        help="jobs pick their own goodput-best batch size at every start and epoch (Pollux/AdaptDL-style "
                             "jobs) instead of training at the workload's")
    parser.add_argument("--seed", type=int, default=0, help="seed for synthetic workloads (default 0)")
    parser.add_argument("--json", action="store_true", help="print a JSON array with one object per policy")
    parser.add_argument("--plot", metavar="FILE.png", help="write a comparison figure (needs matplotlib)")


def _policies(text: str | None, live: bool = False) -> list[str]:
    from slurm_liquid.policy.registry import SIMULATED
    from slurm_liquid.sim.live import LIVE_ARMS

    known = LIVE_ARMS if live else SIMULATED
    names = [n.strip().lower() for n in (text or (LIVE_DEFAULT if live else DEFAULT_POLICIES)).split(",") if n.strip()]
    if names == ["all"]:
        return list(LIVE_ARMS if live else POLICY_NAMES)
    if not names:
        raise UsageError("--policy: give at least one policy name")
    unknown = [n for n in names if n not in known]
    if unknown:
        where = " on a live workload file" if live else (" (plain: live workload files only)" if unknown[0] == "plain" else "")
        raise UsageError(f"--policy: unknown policy {unknown[0]!r}{where} (known: {', '.join(known)}, all)")
    return names


def _workloads(args: argparse.Namespace) -> tuple[str, dict]:
    from slurm_liquid.sim.workload import BUNDLED_WORKLOADS, load_philly, load_workload

    if args.philly is not None:
        label = f"philly-{args.philly}"
        return label, {label: load_philly(jobs=args.philly, seed=args.seed, time_scale=args.philly_time_scale)}
    path = BUNDLED_WORKLOADS if args.workload == "pollux" else args.workload
    from pathlib import Path

    p = Path(path)
    return (p.name if p.is_dir() else p.stem) or str(path), load_workload(path)


def _run_paper(args: argparse.Namespace) -> int:
    """The DL2 paper replica (slurm_liquid.sim.paper): PS/worker jobs in 20-minute slots, one trace per seed."""
    from slurm_liquid.sim.paper import PAPER_POLICIES, run_paper
    from slurm_liquid.sim.runner import summarise

    names = [n.strip().lower() for n in (args.policy or DEFAULT_POLICIES).split(",") if n.strip()]
    if names == ["all"] or args.policy is None:
        names = [p for p in PAPER_POLICIES if p != "dl2"]
    unknown = [n for n in names if n not in PAPER_POLICIES]
    if unknown or not names:
        raise UsageError(f"--policy: {unknown[0] if unknown else 'none'!r} is not a policy for {args.workload} "
                         f"(known: {', '.join(PAPER_POLICIES)}, all)")
    if args.policy_file and "dl2" not in names:
        raise UsageError("--policy-file is only used with --policy dl2")
    from slurm_liquid.psworld.slot import PLACEMENT, PLACEMENTS

    placement = PLACEMENT if args.placement == "greedy" else args.placement
    if placement not in PLACEMENTS:
        raise UsageError(f"--placement {args.placement!r} is not one of the DL2 paper replica's "
                         f"({', '.join(PLACEMENTS)}; default {PLACEMENT})")
    label = f"{args.workload}-seed{args.seed}"
    results = run_paper(args.workload, args.seed, names, args.policy_file, placement)
    summaries = [summarise(p, label, {label: r}) for p, r in results.items()]
    _print(summaries, f"{label}: DL2 paper replica, 20-minute slots, PS/worker jobs (restarts: allocation changes)",
           args.json)
    return 0


def _rules(args: argparse.Namespace, live: bool):
    """The rules to simulate under (`--rules`, `--config`)."""
    from slurm_liquid import config as config_module
    from slurm_liquid.loop import Rules

    name = args.rules or ("daemon" if live else "reference")
    if args.config and name != "daemon":
        raise UsageError("--config is only used with --rules daemon")
    elastic = config_module.load(args.config).elastic if args.config else config_module.Config().elastic
    return Rules.named(name, elastic)


def _check_plot(args: argparse.Namespace) -> None:
    """--plot fails before the run, not after it, when matplotlib is missing."""
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install 'slurm-liquid[plot]'") from None


def _print(summaries: list[dict], header: str, json_out: bool, label: str = "policy") -> None:
    if json_out:
        json.dump(summaries, sys.stdout, indent=1)
        print()
        return
    print(header)
    print(f"{label:<10} {'avg JCT (s)':>12} {'makespan (s)':>13} {'GPU util':>9} {'restarts':>9}")
    for s in summaries:
        print(f"{s['policy']:<10} {s['avg_jct_s']:>12.1f} {s['makespan_s']:>13.1f} "
              f"{s['gpu_utilisation']:>9.1%} {s['restarts']:>9}")


def _run_live(args: argparse.Namespace) -> int:
    """A live-replay workload file: plain Slurm and the daemon's arms (slurm_liquid.sim.live)."""
    from slurm_liquid.sim.live import LIVE_RESTART_S, LIVE_START_S, load_live, run_live
    from slurm_liquid.sim.runner import summarise

    arms = _policies(args.policy, live=True)
    rules = _rules(args, live=True)
    workload = load_live(args.workload)
    cost = LIVE_RESTART_S if args.restart_penalty is None else args.restart_penalty
    start = LIVE_START_S if args.start_cost is None else args.start_cost
    if cost < 0 or start < 0:
        raise UsageError("--restart-penalty and --start-cost must be >= 0")
    if args.policy_file and "dl2" not in arms:
        raise UsageError("--policy-file is only used with --policy dl2")
    label = Path(args.workload).stem
    results = {}
    for arm in arms:
        result = run_live(workload, arm, rules, cost, start, args.speed, args.policy_file, label)
        results[arm] = {label: result}
    summaries = [summarise(arm, label, per) for arm, per in results.items()]
    cluster = workload["cluster"]
    _print(summaries, f"{label}: live workload, {len(workload['jobs'])} jobs, {cluster['nodes']}x"
           f"{cluster['gpus_per_node']} GPUs, rules {rules.name}, restart {cost:g} s, first start {start:g} s", args.json,
           "arm")
    _plot(args, results, label)
    return 0


def _plot(args: argparse.Namespace, results: dict, label: str) -> None:
    if args.plot:
        from slurm_liquid.sim.plot import plot_comparison

        path = plot_comparison(results, args.plot, title=label)
        print(f"wrote {path}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from slurm_liquid.errors import LiquidError
    from slurm_liquid.sim.live import is_live_workload
    from slurm_liquid.sim.paper import SETTINGS

    _check_plot(args)
    if args.workload in SETTINGS:
        return _run_paper(args)
    if args.workload and is_live_workload(args.workload):
        return _run_live(args)
    from slurm_liquid.sim.engine import ClusterConfig
    from slurm_liquid.loop import Shape
    from slurm_liquid.sim.runner import make_placer, run_all, summarise
    from slurm_liquid.views import REFERENCE_RESTART_PENALTY_S

    policies = _policies(args.policy)
    rules = _rules(args, live=False)
    label, workloads = _workloads(args)
    try:
        config = ClusterConfig(nodes=args.nodes, gpus_per_node=args.gpus_per_node, interval=args.interval,
                               restart_penalty=args.restart_penalty if args.restart_penalty is not None else REFERENCE_RESTART_PENALTY_S,
                               nodes_per_switch=args.nodes_per_switch,
                               cross_switch_slowdown=args.cross_switch_slowdown, interference=args.interference,
                               elastic=not args.rigid, batch_scaling=args.batch_scaling)
    except LiquidError as exc:
        raise UsageError(str(exc)) from None
    config, placer = make_placer(args.placement, config, args.alpha)
    progress = not args.json and sys.stderr.isatty()
    if args.policy_file and "dl2" not in policies:
        raise UsageError("--policy-file is only used with --policy dl2")
    if args.policy_file:
        from slurm_liquid.policy.dl2.io import load_policy

        load_policy(args.policy_file)  # a bad file fails before any simulation runs
    if rules.name == "reference" and args.shape != "free":
        from dataclasses import replace

        rules = replace(rules, shape=Shape(args.shape))
    results = run_all(workloads, policies, config, placer, progress=progress, policy_file=args.policy_file,
                      speed=args.speed, rules=rules)
    summaries = [summarise(p, label, per) for p, per in results.items()]
    _print(summaries, f"{label}: {len(workloads)} workload(s), {config.nodes}x{config.gpus_per_node} GPUs, "
           f"restart penalty {config.restart_penalty:g} s, rules {rules.name}"
           + (", jobs scale their batch" if config.batch_scaling else ""), args.json)
    _plot(args, results, label)
    return 0
