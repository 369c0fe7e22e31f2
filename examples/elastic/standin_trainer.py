#!/usr/bin/env python3
"""A CPU-only stand-in for an elastic deep-learning training job (no GPU, no torch).

    exec python standin_trainer.py --app cifar10 --steps 2000 [--batch-size 256] [--speedup 10]
    exec python standin_trainer.py --curve curve.json --steps 600 --batch-size 128


(in a batch script: `exec`, because the daemon's checkpoint signal also reaches the batch shell;
see README.md beside this file).

It behaves towards Slurm and the slurm-liquid daemon like a real elastic job: it resumes from its
last checkpoint, reads its GPU count from the environment Slurm sets at each start, takes as long
per optimizer step as the real application did on that many GPUs (or, with `--curve`, as a drawn
scaling curve says: seconds per step for each (GPUs, nodes), slurm_liquid/sim/curves.py), reports
its progress through
`slurm_liquid.progress`, and on the checkpoint signal (SIGUSR1) writes a checkpoint and reports it.
A checkpoint is just {"step": n}. Every start, first step and checkpoint is printed with its
wall-clock time (`standin-trainer: event=first-step t=...`), so that a benchmark can measure what a
restart costs. Exit codes: 0 done, 1 unreadable checkpoint or curve, batch size outside the trace,
or an allocation the curve does not cover, 2 bad arguments, 99 stopped after a checkpoint (only with --exit-on-checkpoint; a
slurm.conf `RequeueExit=99` can requeue it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from slurm_liquid import progress
from slurm_liquid.errors import LiquidError
from slurm_liquid.sim.apps import APPLICATIONS, load_app
from slurm_liquid.sim.curves import Curve

DEFAULT_CHECKPOINT_DIR = "/shared/slurm-liquid/checkpoints"
EXIT_CHECKPOINTED = 99


def step_seconds(app_name: str, batch: int, gpus: int, nodes: int) -> float:
    """Seconds of one optimizer step of `app_name` at global batch `batch` on `gpus` GPUs spread
    evenly over `nodes` nodes. This is the MEASURED iteration time from the Pollux artifact's
    traces (slurm_liquid/sim/data/pollux), looked up the way the simulator does (SimJob)."""
    app = load_app(app_name)
    base, extra = divmod(gpus, nodes)
    placement = [base + 1] * extra + [base] * (nodes - extra)
    config = app.batch_config(batch, gpus)
    # More GPUs than the batch can feed leave a per-GPU batch below anything measured; a step is
    # no faster than at the smallest measured per-GPU batch, so that one stands in for it.
    step, sync = app.step_time(placement, max(config.atomic, app.min_local_bsz))
    # Gradient accumulation repeats the compute part of a step, not the gradient sync.
    return step + config.accum * (step - sync)


def load_checkpoint(candidates: list[str | None]) -> int:
    """The step of the first candidate checkpoint that exists and is our own file, else 0."""
    for path in candidates:
        if path and os.path.isfile(path) and os.stat(path).st_uid == os.getuid():
            try:
                return int(json.loads(Path(path).read_text())["step"])
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise SystemExit(f"standin-trainer: bad checkpoint {path}: {err}") from None
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--app", choices=APPLICATIONS, help="the measured Pollux workload (the default source of step times)")
    parser.add_argument("--curve", metavar="PATH_OR_JSON",
                        help="step seconds per (GPUs, nodes) from a drawn curve (a JSON file or inline JSON) "
                             "instead of the traces")
    parser.add_argument("--steps", type=int, required=True, help="total optimizer steps")
    parser.add_argument("--batch-size", type=int, help="global batch size (default: the app's initial one)")
    parser.add_argument("--checkpoint-dir", default=DEFAULT_CHECKPOINT_DIR)
    parser.add_argument("--speedup", type=float, default=1.0, help="divide every step time by this")
    parser.add_argument("--report-interval", type=float, default=progress.MIN_INTERVAL_S,
                        help="at most one progress report per this many seconds (checkpoints always report)")
    parser.add_argument("--exit-on-checkpoint", action="store_true",
                        help=f"exit with code {EXIT_CHECKPOINTED} after a requested checkpoint")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.speedup <= 0:
        parser.error("--steps must be >= 0 and --speedup > 0")
    if not args.app and not args.curve:
        parser.error("one of --app (the traces) or --curve is required")
    if args.curve and not args.batch_size:
        parser.error("--curve needs --batch-size (the samples per step it reports)")
    return args


def main(argv: list[str] | None = None) -> int:
    progress.install()  # first: SIGUSR1's default action would kill a job still loading
    args = parse_args(argv)
    try:
        curve = Curve.load(args.curve) if args.curve else None
    except LiquidError as err:
        raise SystemExit(f"standin-trainer: {err}") from None
    name = f"curve:{curve.kind}" if curve else args.app
    if curve:
        batch = args.batch_size
    else:
        app = load_app(args.app)
        batch = args.batch_size or app.init_bsz
        if not 0 < batch <= app.max_bsz:
            raise SystemExit(f"standin-trainer: --batch-size must lie in [1, {app.max_bsz}] for {args.app}")
    if batch <= 0:
        raise SystemExit("standin-trainer: --batch-size must be positive")
    job = progress.current_job_id() or "local"
    reporter = progress.Reporter(min_interval_s=args.report_interval)
    state = reporter.resume()
    gpus = max(state.gpus, 1)  # no GPU in the environment (a laptop, a CPU node): run as one
    own = str(Path(args.checkpoint_dir) / f"{job}.json")
    start = load_checkpoint([state.checkpoint, own])
    try:
        seconds = (curve.step_time(gpus, state.nodes) if curve else
                   step_seconds(args.app, batch, gpus, state.nodes)) / args.speedup
    except LiquidError as err:
        raise SystemExit(f"standin-trainer: {err}") from None
    # The rate the job really advances at, so that the daemon's remaining-time estimate holds.
    rate = batch / seconds
    print(f"standin-trainer: job {job} app {name} gpus {gpus} nodes {state.nodes} "
          f"resumed at step {start}/{args.steps}", flush=True)
    event("start", step=start, gpus=gpus, nodes=state.nodes, step_s=round(seconds, 6))

    for step in range(start, args.steps):
        if progress.checkpoint_requested():
            progress.clear()
            checkpoint = save_checkpoint(Path(args.checkpoint_dir), own, step)
            reporter.report(step, args.steps, rate, checkpoint=checkpoint)
            event("checkpoint", step=step)
            if args.exit_on_checkpoint:
                return EXIT_CHECKPOINTED
        time.sleep(seconds)
        reporter.report(step + 1, args.steps, rate)  # rate-limited by the API; the last step always writes
        if step == start:
            event("first-step", step=step + 1)
    if start >= args.steps:
        reporter.report(args.steps, args.steps, rate)
    return 0


def event(name: str, **fields: object) -> None:
    """One line a benchmark can parse: `standin-trainer: event=NAME t=EPOCH_SECONDS key=value...`."""
    extra = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"standin-trainer: event={name} t={time.time():.3f} {extra}".rstrip(), flush=True)


def save_checkpoint(directory: Path, path: str, step: int) -> str:
    if not directory.is_dir():
        progress.ensure_directory(directory)  # 1777, so that every user's jobs can share it
    progress.atomic_write_json(path, {"step": step})
    return path


if __name__ == "__main__":
    sys.exit(main())
