"""`slurm-liquid policy`: train DL2 (supervised warm-up and/or RL) and inspect policy files.

`--rules reference` (default) trains in the Pollux setting on Philly samples; `--rules daemon` trains
under the daemon's rules (`loop.rules.Rules.daemon`, from `--config`'s [elastic]) on live-replay
workloads (`sim.livegen.draw`), with the speed room the daemon consults."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from slurm_liquid.errors import UsageError
from slurm_liquid.policy.dl2 import rate_of, start_margin_of, window_order_of
from slurm_liquid.policy.dl2.state import DEFAULT_WINDOW, WINDOW_ORDERS
from slurm_liquid.policy.registry import TEACHERS as SIMULATED_TEACHERS
from slurm_liquid.training.worlds import Worlds

TEACHERS = (*SIMULATED_TEACHERS, "sacct")
HELD_OUT_SHARE = 0.15  # of an accounting history's slots, the latest, for measuring agreement


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="train a DL2 policy in the simulator on Philly-derived workloads")
    t.add_argument("--supervised", action="store_true", help="warm up on a teacher scheduler's decisions")
    t.add_argument("--rl", action="store_true", help="actor-critic fine-tuning (after the warm-up, or from --init)")
    t.add_argument("--out", required=True, metavar="FILE.npz", help="where to write the trained policy")
    t.add_argument("--init", metavar="FILE.npz", help="start from this policy file instead of random weights")
    t.add_argument("--teacher", default="drf", choices=TEACHERS,
                   help="scheduler to imitate in the warm-up (default drf); sacct: the site's own, from --history")
    t.add_argument("--teacher-margin", type=float, metavar="PENALTIES",
                   help="restart penalties the restart-aware teachers (srtf-restart, completion-rate) count for a "
                        "change, at a start and at a resize (default: the teacher's own, 8)")
    t.add_argument("--history", metavar="SACCT.json",
                   help="with --teacher sacct: the site's jobs as saved by `sacct --json --allocations --duplicates`")
    t.add_argument("--restart-penalty", type=float, default=None, metavar="S",
                   help="simulated restart cost (default 30; under --rules daemon the live replay's mean, 17)")
    t.add_argument("--rules", choices=("reference", "daemon"), default="reference",
                   help="the world DL2 learns in: reference = the Pollux setting on Philly samples (default); daemon = "
                        "the daemon's rules ([elastic] of --config) on live-replay workloads")
    t.add_argument("--config", metavar="liquid.toml", help="with --rules daemon: the [elastic] section to train under "
                                                           "(default: the shipped settings)")
    t.add_argument("--batch-scaling", action="store_true",
                   help="train with jobs that pick their own goodput-best batch (as `simulate --batch-scaling`)")
    t.add_argument("--warmup-workloads", type=int, default=12, metavar="N", help="Philly workloads the teacher runs (default 12)")
    t.add_argument("--warmup-epochs", type=int, default=8, metavar="N")
    t.add_argument("--dagger", type=int, default=0, metavar="ROUNDS",
                   help="after the warm-up, ROUNDS of DAgger: run the student, add the teacher's labels of the "
                        "states it reached, train again (default 0)")
    t.add_argument("--dagger-loads", default="1,1.5,2", metavar="L,L,...",
                   help="loads of the Philly samples each DAgger round runs, one sample per load (default 1,1.5,2)")
    t.add_argument("--episodes", type=int, default=80, metavar="N", help="RL episodes (default 80)")
    t.add_argument("--jobs", type=int, default=160, metavar="N",
                   help="Philly jobs per training workload (default 160, as each evaluation workload)")
    t.add_argument("--max-slots", type=int, default=2000, metavar="N",
                   help="cut a training workload after N slots (default 2000: run it to the end)")
    t.add_argument("--hidden", type=int, default=64, metavar="H", help="units per hidden layer (default 64)")
    t.add_argument("--layers", type=int, default=2, metavar="L")
    t.add_argument("--window", type=int, default=DEFAULT_WINDOW, metavar="K",
                   help=f"jobs the network sees per slot (default {DEFAULT_WINDOW})")
    t.add_argument("--window-order", default="service", choices=WINDOW_ORDERS,
                   help="which jobs fill the window: least attained service first (default) or earliest arrival")
    t.add_argument("--lr", type=float, default=None, help="Adam step (default 1e-3 warm-up, 3e-5 RL)")
    t.add_argument("--entropy", type=float, default=0.001, help="entropy bonus weight (default 0.001)")
    t.add_argument("--explore", type=float, default=0.05, help="job-aware exploration probability (default 0.05)")
    t.add_argument("--reward", default="jct", choices=("jct", "progress"),
                   help="jct: minus active jobs per slot (default); progress: DL2's normalised progress")
    t.add_argument("--updates", type=int, default=16, metavar="N", help="minibatch updates per RL episode (default 16)")
    t.add_argument("--critic-warmup", type=int, default=10, metavar="N",
                   help="RL episodes that fit the critic alone before the policy changes (default 10)")
    t.add_argument("--eval-every", type=int, default=10, metavar="N", help="validate every N episodes (default 10)")
    t.add_argument("--restart-weight", type=float, default=1.0, help="weight of the restart cost in the reward")
    t.add_argument("--ppo-clip", type=float, default=0.0, metavar="EPS",
                   help="PPO-style clipped surrogate with ratio bounds 1 +- EPS instead of truncated importance "
                        "weights (default 0: off)")
    t.add_argument("--no-critic", action="store_true", help="ablation: REINFORCE with a mean baseline")
    t.add_argument("--no-replay", action="store_true", help="ablation: no experience replay")
    t.add_argument("--no-job-aware", action="store_true", help="ablation: no job-aware exploration")
    t.add_argument("--last", action="store_true",
                   help="keep the last RL weights (default: the ones with the best validation JCT, warm start included)")
    t.add_argument("--validation-jobs", type=int, default=160, metavar="N", help="jobs per validation workload (default 160)")
    t.add_argument("--validation-workloads", type=int, default=4, metavar="N",
                   help="held-out Philly samples each validation runs (default 4; two choose badly)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--checkpoint", metavar="FILE.npz", help="RL checkpoint (default: OUT with .ckpt.npz)")
    t.add_argument("--resume", action="store_true", help="continue RL from the checkpoint if it exists")
    t.add_argument("--curves", metavar="PREFIX", help="write PREFIX-warmup.csv/png and PREFIX-rl.csv/png")
    x = sub.add_parser("export", help="write a policy file from an RL checkpoint (e.g. of an interrupted run)")
    x.add_argument("checkpoint", metavar="CKPT.npz")
    x.add_argument("--out", required=True, metavar="FILE.npz")
    x.add_argument("--last", action="store_true", help="the last weights (default: the best validated ones)")
    x.add_argument("--curves", metavar="PREFIX", help="write the run's learning curve to PREFIX-rl.csv/png")
    i = sub.add_parser("info", help="print a policy file's metadata")
    i.add_argument("file", metavar="FILE.npz")


def _say(row: dict) -> None:
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from slurm_liquid.policy.dl2.io import load_arrays, load_policy

    if args.action == "info":
        _, meta = load_arrays(args.file)
        meta.pop("curve", None)
        print(json.dumps(meta, indent=1, sort_keys=True))
        return 0
    if args.action == "export":
        return export(args)
    if not (args.supervised or args.rl):
        raise UsageError("policy train: give --supervised, --rl, or both")
    if args.supervised and (args.teacher == "sacct") != bool(args.history):
        raise UsageError("policy train: --teacher sacct and --history SACCT.json go together")
    for name in ("window", "validation_workloads", "validation_jobs", "jobs", "episodes"):
        if getattr(args, name) < 1:
            raise UsageError(f"policy train: --{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if args.teacher_margin is not None:
        if not args.supervised or args.teacher not in ("srtf-restart", "completion-rate"):
            raise UsageError("policy train: --teacher-margin goes with --supervised and --teacher srtf-restart "
                             "or completion-rate (the teachers that count restarts)")
        if not 0 <= args.teacher_margin <= 100:  # what a policy file's start_margin may hold (`start_margin_of`)
            raise UsageError(f"policy train: --teacher-margin {args.teacher_margin:g}: give restart penalties "
                             "from 0 to 100")
    if args.dagger:
        if args.dagger < 0 or not args.supervised or args.teacher == "sacct":
            raise UsageError("policy train: --dagger ROUNDS (>= 0) goes with --supervised and a simulated --teacher")
        dagger_loads(args.dagger_loads)
    if args.rl and not args.supervised and not args.init:
        print("note: RL from random weights (no --supervised, no --init)", file=sys.stderr)
    return train(args, load_policy)


def train(args: argparse.Namespace, load_policy) -> int:
    from slurm_liquid.policy.dl2 import train as T
    from slurm_liquid.training import episodes as E
    from slurm_liquid.policy.dl2.io import load_arrays, save_policy
    from slurm_liquid.policy.dl2.net import Adam

    worlds = Worlds(args)
    config, speed = worlds.config, worlds.speed_of()
    meta: dict = {"window": args.window, "window_order": args.window_order, "hidden": args.hidden,
                  "layers": args.layers, "seed": args.seed,
                  "restart_penalty": config.restart_penalty, "batch_scaling": args.batch_scaling, "speed": True,
                  "rules": args.rules, "stages": []}
    if args.init:
        params, init_meta = load_policy(args.init)
        meta.update({k: init_meta[k] for k in ("window", "hidden", "layers", "start_margin", "rate_column")
                     if k in init_meta})
        meta["window_order"] = window_order_of(init_meta)
        meta["stages"] = init_meta.get("stages", []) + [f"init from {Path(args.init).name}"]
        meta["training"] = init_meta.get("training", {})
    else:
        params = T.new_params(args.hidden, args.layers, args.seed)
    meta.setdefault("training", {})
    # the stages say which runs had jobs that scale their batch (a file can be fine-tuned from one
    # trained without: the top-level `batch_scaling` then records only the last run's)
    scaling = " (jobs scale their batch)" if args.batch_scaling else ""
    if args.supervised:
        earlier = {k: meta["training"].pop(k) for k in ("warmup", "dagger") if k in meta["training"]}
        if earlier:  # imitation again from --init: keep what the init file's imitation was
            meta["training"].setdefault("earlier", []).append(earlier)
        if args.teacher != "sacct":  # the ranking columns rank waiting jobs as this teacher does (`dl2.state`)
            teacher = make_teacher(args, speed)
            meta["start_margin"] = float(getattr(teacher, "start_margin", 0.0))
            meta["rate_column"] = hasattr(teacher, "plan")  # learnt with the teacher's price of each step
        if args.teacher == "sacct":
            train_steps, held, source = _history_steps(args.history, config, meta)
        else:
            train_steps, held, source = _teacher_steps(args, worlds, speed, meta)
        if not train_steps or not held:
            raise UsageError(f"policy train: the {args.teacher} warm-up found no decisions to learn from "
                             f"({len(train_steps)} for training, {len(held)} held out)")
        res = T.supervised(params, train_steps, held, epochs=args.warmup_epochs, lr=args.lr or 1e-3,
                           seed=args.seed, progress=_say)
        named = args.teacher if args.teacher_margin is None else f"{args.teacher} (margin {args.teacher_margin:g})"
        meta["stages"].append(f"supervised on {named}{scaling}")
        meta["training"]["warmup"] = {"teacher": args.teacher, **source, "decisions": len(train_steps),
                                      "held_out_agreement": res.curve[-1]["held_out_agreement"] if res.curve else None}
        if args.curves:
            T.write_curves(res.curve, f"{args.curves}-warmup", f"warm-up on {args.teacher}")
        if args.dagger:
            _dagger(args, worlds, speed, meta, params, train_steps, held)
            meta["stages"].append(f"{args.dagger} DAgger rounds on {named}{scaling}")
    if args.rl:
        cfg = T.RLConfig(episodes=args.episodes, lr=args.lr or 3e-5, entropy=args.entropy, explore=args.explore,
                         job_aware=not args.no_job_aware, critic=not args.no_critic, replay=not args.no_replay,
                         restart_weight=args.restart_weight, reward=args.reward, jobs=args.jobs,
                         max_slots=args.max_slots, updates=args.updates, critic_warmup=args.critic_warmup,
                         seed=args.seed, window=int(meta["window"]), window_order=meta["window_order"],
                         start_margin=start_margin_of(meta), rate=rate_of(meta),
                         ppo_clip=args.ppo_clip)
        ckpt = Path(args.checkpoint or Path(args.out).with_suffix(".ckpt.npz"))
        state = T.TrainState(params, Adam(params, lr=cfg.lr))
        if args.resume and ckpt.is_file():
            arrays, cmeta = load_arrays(ckpt)
            state.params, _ = load_policy(ckpt)
            state.opt = Adam(state.params, lr=cfg.lr)
            state.opt.load_state(arrays)
            state.episode, state.curve = int(cmeta["episode"]), list(cmeta["curve"])
            state.reward_scale = float(cmeta["reward_scale"])
            if cmeta.get("best"):
                state.best = (cmeta["best"][0], cmeta["best"][1], {k[5:]: arrays[k] for k in arrays if k.startswith("best_")})
            meta = cmeta["policy_meta"]
            _say({"stage": "resume", "episode": state.episode})

        def checkpoint(st: T.TrainState) -> None:
            save_policy(ckpt, st.params, {"window": cfg.window, "layers": meta["layers"], "episode": st.episode,
                                          "curve": st.curve, "reward_scale": st.reward_scale, "policy_meta": meta,
                                          "best": list(st.best[:2]) if st.best else None},
                        extra={**st.opt.state(), **({f"best_{k}": v for k, v in st.best[2].items()} if st.best else {})})

        # in the checkpoints too, so that a policy exported from an interrupted run says how it was trained
        meta["training"]["rl"] = {**dataclasses.asdict(cfg), "pool_seeds": [worlds.rl_seed(k) for k in range(cfg.pool)],
                                  "reward_definition": {"jct": "-(active jobs + restarts x penalty/interval) per slot",
                                                         "progress": "normalised progress per slot - restart cost"}[cfg.reward]}
        validation = worlds.validation(args.validation_workloads, args.validation_jobs)
        pool = [worlds.rl(k, cfg.jobs) for k in range(cfg.pool)]
        E.train_rl(state, cfg, pool, worlds.speed_of, validation, eval_every=args.eval_every, checkpoint=checkpoint,
                   progress=_say)
        params = state.params
        meta["stages"].append(f"actor-critic RL, {cfg.episodes} episodes{scaling}")
        if state.best is not None and not args.last:
            params = state.best[2]
            meta["stages"].append(f"kept episode {state.best[1]} (best validation mean JCT {state.best[0]:.0f} s)")
        meta["training"]["rl"]["reward_scale"] = state.reward_scale
        meta["curve"] = state.curve
        if args.curves:
            T.write_curves(state.curve, f"{args.curves}-rl", f"RL, restart penalty {config.restart_penalty:g} s")
    meta["training"]["workloads"] = worlds.described
    from slurm_liquid import __version__

    meta["slurm_liquid_version"] = __version__
    out = save_policy(args.out, params, meta)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def make_teacher(args: argparse.Namespace, speed):
    """The warm-up's simulated teacher, with `--teacher-margin` as both of its restart margins."""
    from slurm_liquid.policy import make_policy

    teacher = make_policy(args.teacher, speed)
    if args.teacher_margin is not None:
        teacher.start_margin = teacher.resize_margin = args.teacher_margin
    return teacher


def _teacher_steps(args: argparse.Namespace, worlds: Worlds, speed, meta: dict) -> tuple[list, list, dict]:
    """A simulated teacher on its world's workloads: all but the last two train, those two are held out."""
    from slurm_liquid.training import episodes as E

    seeds = [worlds.warmup_seed(k) for k in range(args.warmup_workloads + 2)]
    steps = []
    for k, s in enumerate(seeds):
        speed = worlds.speed_of()
        teacher = make_teacher(args, speed)
        steps.append(E.collect_teacher(worlds.world(s, args.jobs), teacher, int(meta["window"]), speed,
                                       max_slots=args.max_slots, order=meta["window_order"]))
        _say({"stage": "collect", "workload": k + 1, "of": len(seeds), "decisions": len(steps[-1])})
    return ([x for chunk in steps[:-2] for x in chunk], [x for chunk in steps[-2:] for x in chunk],
            {"seeds": seeds[:-2], "held_out_seeds": seeds[-2:], "jobs": args.jobs})


def dagger_loads(text: str) -> list[float]:
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        loads = []
    if not loads or min(loads) <= 0 or max(loads) > 8:
        raise UsageError(f"policy train: --dagger-loads {text!r}: give loads between 0 and 8, e.g. 1,1.5,2")
    return loads


def _dagger(args: argparse.Namespace, worlds: Worlds, speed, meta: dict, params, train_steps: list, held: list) -> None:
    """DAgger rounds after a simulated teacher's warm-up (`episodes.collect_on_policy`). The samples are
    workloads at `--dagger-loads` (seeds apart from the warm-up's), so the student also meets the
    crowded states of loads above the training one."""
    from slurm_liquid.policy.dl2 import train as T
    from slurm_liquid.policy.dl2.agent import DL2Policy
    from slurm_liquid.training import episodes as E

    loads = dagger_loads(args.dagger_loads)
    seeds = []
    res = None
    for r in range(args.dagger):
        for k, load in enumerate(loads):
            speed = worlds.speed_of()
            teacher = make_teacher(args, speed)
            student = DL2Policy(params, window=int(meta["window"]), speed=speed, order=meta["window_order"],
                                start_margin=start_margin_of(meta), rate=rate_of(meta))
            seed = worlds.dagger_seed(r * len(loads) + k)
            seeds.append(seed)
            found = E.collect_on_policy(worlds.world(seed, args.jobs, load), student, teacher, int(meta["window"]),
                                        speed, order=meta["window_order"])
            train_steps = train_steps + found
            _say({"stage": "dagger", "round": r + 1, "load": load, "decisions": len(found)})
        res = T.supervised(params, train_steps, held, epochs=max(1, args.warmup_epochs // 2), lr=args.lr or 1e-3,
                           seed=args.seed + r + 1, progress=_say)
    meta["training"]["dagger"] = {"rounds": args.dagger, "loads": loads, "seeds": seeds,
                                  "decisions": len(train_steps),
                                  "held_out_agreement": res.curve[-1]["held_out_agreement"] if res and res.curve else None}


def _history_steps(path: str, config, meta: dict) -> tuple[list, list, dict]:
    """The site's own decisions from its accounting: the latest slots are held out. No speed model:
    history says nothing of how fast a job would have run on another GPU count."""
    from slurm_liquid.policy.dl2.history import history_slots, load_history
    from slurm_liquid.policy.dl2.train import imitation_steps

    records = load_history(path)
    slots = list(history_slots(records, config.interval, config.restart_penalty))
    cut = len(slots) - max(1, round(HELD_OUT_SHARE * len(slots))) if len(slots) > 1 else len(slots)
    steps = [imitation_steps(view, counts, int(meta["window"]), None, meta["window_order"]) for view, counts in slots]
    _say({"stage": "collect", "history": Path(path).name, "runs": len(records), "slots": len(slots),
          "decisions": sum(map(len, steps))})
    return ([x for chunk in steps[:cut] for x in chunk], [x for chunk in steps[cut:] for x in chunk],
            {"history": Path(path).name, "runs": len(records), "slots": len(slots), "held_out_slots": len(slots) - cut})


def export(args: argparse.Namespace) -> int:
    from slurm_liquid.policy.dl2.io import load_arrays, load_policy, save_policy

    arrays, cmeta = load_arrays(args.checkpoint)
    if "policy_meta" not in cmeta:
        raise UsageError(f"{args.checkpoint} is a policy file, not an RL checkpoint")
    params, _ = load_policy(args.checkpoint)
    meta = dict(cmeta["policy_meta"])
    meta["stages"] = list(meta.get("stages", [])) + [f"actor-critic RL, stopped after episode {cmeta['episode']}"]
    if cmeta.get("best") and not args.last:
        params = {k: arrays[f"best_{k}"] for k in params}
        meta["stages"].append(f"kept episode {cmeta['best'][1]} (best validation mean JCT {cmeta['best'][0]:.0f} s)")
    meta["curve"] = cmeta.get("curve", [])
    print(f"wrote {save_policy(args.out, params, meta)}", file=sys.stderr)
    if args.curves:
        from slurm_liquid.policy.dl2.train import write_curves

        write_curves(meta["curve"], f"{args.curves}-rl", f"RL, restart penalty {meta.get('restart_penalty', 30):g} s")
    return 0
