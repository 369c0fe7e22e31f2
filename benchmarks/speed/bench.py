"""Speed room benchmark: fitting cost per slot, journal load time, prediction error.

    PYTHONPATH=$PWD nice -n 10 python benchmarks/speed/bench.py [--jobs 1000] [--lines 100000] [--out results.json]

1. Fitting: `--jobs` jobs (a third each on a trace prior, a family prior and the linear prior; true
   curves drawn per job: linear, saturating past 2 GPUs, or slow across nodes), 8 reports each (4
   widths, twice, 2% noise). Times the first fit of all of them, then slots in which every job
   reports again and a policy asks each job's step time at 6 widths plus its reach: a quiet slot
   (same widths), a slot where 10% of the jobs were resized (a new width each), and the worst case
   where every job was.
2. Journal: a file of `--lines` lines (1,000 jobs) loaded by a fresh model (median of 3), without
   and with the compaction that a file past its bound triggers; and the cost of one journaled report.
3. Prediction error: synthetic jobs of each kind (2% noise, 3 reports per width), measured at 1, 2,
   4 GPUs (one node), predicted at 8 (two 4-GPU nodes) and, measured to 8, at 16; and for the six
   trace applications,
   the step times a simulated job reports at 1, 2, 4 GPUs (sim/job.py's batch split), predicted at
   8 and 16 (2 and 4 nodes) against the same, with the default optimistic cross-node ratio and with
   the prior's; and the prior alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import tempfile
import time

from slurm_liquid.views import JobView
from slurm_liquid.speed import MeasuredSpeedModel, Observation, ThroughputParams

GPN = 4
APPS = ["resnet50", "bert", "ncf", "gpt2", "vgg16", "t5-base", None, None, None]


KINDS = ["linear", "saturating", "slow-across"]


def true_curve(rng: random.Random, kind: str | None = None) -> ThroughputParams:
    kind = kind or rng.choice(KINDS)
    t1 = rng.uniform(0.1, 2.0)
    a_c, b_c = 0.1 * t1, 0.9 * t1 / 64
    if kind == "linear":
        return ThroughputParams(a_c, b_c, 0.002 * t1, 0.0002 * t1, 0.003 * t1, 0.0003 * t1, 3.0)
    if kind == "saturating":
        return ThroughputParams(a_c, b_c, 0.5 * t1, 0.01 * t1, 0.6 * t1, 0.02 * t1, 4.0)
    return ThroughputParams(a_c, b_c, 0.02 * t1, 0.002 * t1, 0.6 * t1, 0.03 * t1, 2.0)


def jobs(n: int, seed: int = 1) -> list[tuple[JobView, ThroughputParams]]:
    rng = random.Random(seed)
    return [(JobView(str(i), 0.0, 1, max_gpus=32, app=APPS[i % len(APPS)], batch_size=64), true_curve(rng))
            for i in range(n)]


def report(model: MeasuredSpeedModel, view: JobView, truth: ThroughputParams, gpus: int, rng: random.Random,
           at: float) -> None:
    nodes = -(-gpus // GPN)
    step = truth.step_time(gpus, nodes, 64) * math.exp(rng.gauss(0, 0.02))
    model.observe(Observation(view.id, gpus, nodes, 64, 64 / step, at), model=view.app)


def policy_questions(model: MeasuredSpeedModel, population) -> None:
    for view, _ in population:
        for g in (1, 2, 4, 8, 16, 32):
            model.iteration_time(view, g)
        model.reach(view)
        model.remaining_iterations(view)


def bench_fit(n: int) -> dict:
    rng = random.Random(2)
    population = jobs(n)
    model = MeasuredSpeedModel(GPN)
    for view, truth in population:
        for _ in range(2):
            for g in (1, 2, 4, 8):
                report(model, view, truth, g, rng, 1.0)
    out = {"jobs": n, "observations_per_job": 8}
    t = time.perf_counter()
    policy_questions(model, population)
    out["first_fit_s"] = time.perf_counter() - t
    fits = model.fits

    def slot(resized: float, at: float) -> tuple[float, int]:
        before = model.fits
        t = time.perf_counter()
        for view, truth in population:
            new = rng.random() < resized
            report(model, view, truth, 16 if new else rng.choice((1, 2, 4, 8)), rng, at)
        policy_questions(model, population)
        return time.perf_counter() - t, model.fits - before

    quiet = [slot(0.0, 2.0 + k) for k in range(3)]
    out["quiet_slot_s"] = statistics.median(s for s, _ in quiet)
    out["quiet_slot_refits"] = max(r for _, r in quiet)
    out["slot_10pct_resized_s"], out["slot_10pct_resized_refits"] = slot(0.1, 10.0)
    # every job at a new width: 24 GPUs (6 nodes), never reported before
    t = time.perf_counter()
    before = model.fits
    for view, truth in population:
        report(model, view, truth, 24, rng, 20.0)
    policy_questions(model, population)
    out["slot_all_resized_s"], out["slot_all_resized_refits"] = time.perf_counter() - t, model.fits - before
    out["first_fit_count"] = fits
    # the policy's questions alone, on cached fits
    t = time.perf_counter()
    policy_questions(model, population)
    out["questions_only_s"] = time.perf_counter() - t
    return out


def bench_journal(lines: int) -> dict:
    rng = random.Random(3)
    out = {"lines": lines}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "speed.jsonl")
        with open(path, "w") as fh:
            for i in range(lines):
                job, g = str(i % 1000), rng.choice((1, 2, 4, 8))
                fh.write(json.dumps({"j": job, "g": g, "n": -(-g // GPN), "b": 64,
                                     "s": 64 / (0.5 / g ** 0.8) * math.exp(rng.gauss(0, 0.02)), "t": float(i),
                                     "step": i, "total": lines}, separators=(",", ":")) + "\n")
        out["bytes"] = os.path.getsize(path)
        loads = []
        for _ in range(3):
            t = time.perf_counter()
            model = MeasuredSpeedModel(GPN, journal=path, compact_after=10 * lines)
            loads.append(time.perf_counter() - t)
            model.close()
        out["load_s"] = statistics.median(loads)
        t = time.perf_counter()
        model = MeasuredSpeedModel(GPN, journal=path)
        out["load_and_compact_s"] = time.perf_counter() - t
        with open(path) as fh:
            out["lines_after_compaction"] = sum(1 for _ in fh)
        t = time.perf_counter()
        for i in range(10_000):
            model.observe(Observation(str(i % 1000), 4, 1, 64, 500.0, 1e6 + i), step=i, total=10 ** 6)
        out["journaled_observe_us"] = (time.perf_counter() - t) / 10_000 * 1e6
        model.close()
    return out


def bench_error(n: int) -> dict:
    rng = random.Random(4)
    out = {}
    for kind in KINDS:
        population = [(JobView(str(i), 0.0, 1, max_gpus=32, app=APPS[i % len(APPS)], batch_size=64),
                       true_curve(rng, kind)) for i in range(n)]
        for ratio in (1.1, None):
            for widths, target in (((1, 2, 4), 8), ((1, 2, 4, 8), 16)):
                model = MeasuredSpeedModel(GPN, across_nodes=ratio)
                for view, truth in population:
                    for _ in range(3):
                        for g in widths:
                            report(model, view, truth, g, rng, 1.0)
                model.prepare(v for v, _ in population)
                errors = []
                for view, truth in population:
                    predicted = model.iteration_time(view, target)
                    errors.append(math.log(predicted / truth.step_time(target, -(-target // GPN), 64)))
                errors.sort()
                out[f"{kind}: measured at {','.join(map(str, widths))} -> {target}, across_nodes={ratio}"] = {
                    "median_signed_pct": round(100 * math.expm1(errors[len(errors) // 2]), 1),
                    "p90_abs_pct": round(100 * math.expm1(sorted(map(abs, errors))[int(0.9 * len(errors))]), 1)}
    try:
        from slurm_liquid.sim.apps import load_app
        from slurm_liquid.sim.oracle import packed
    except ImportError:
        return out

    def simulated(app, batch: int, gpus: int) -> float:
        # what a simulated job reports: its step time at its batch split (sim/job.py), not the
        # oracle's forced accumulation on one GPU
        return app.iteration_time(packed(gpus, GPN), app.batch_config(batch, gpus))

    traces = {}
    for ratio in (1.1, None):
        for name, trace in (("resnet18", "cifar10"), ("resnet50", "imagenet"), ("bert-base", "bert"),
                            ("deepspeech2", "deepspeech2"), ("ncf", "ncf"), ("yolov3", "yolov3")):
            app = load_app(trace)
            batch = app.init_bsz * 4
            model = MeasuredSpeedModel(GPN, across_nodes=ratio)
            view = JobView(trace, 0.0, 1, max_gpus=64, app=name, batch_size=batch)
            prior_only = {g: model.iteration_time(view, g) for g in (4, 8, 16)}
            for g in (1, 2, 4):
                model.observe(Observation(trace, g, 1, batch, batch / simulated(app, batch, g), 1.0))
            row = {}
            for g in (4, 8, 16):
                try:
                    real = simulated(app, batch, g)
                except Exception:   # noqa: BLE001 -- the traces cannot answer every width
                    continue
                if ratio is not None:
                    row[f"{g} prior %"] = round(100 * (prior_only[g] / real - 1), 1)
                row[f"{g} measured %"] = round(100 * (model.iteration_time(view, g) / real - 1), 1)
            traces[f"{trace} (batch {batch}), across_nodes={ratio}"] = row
    out["simulated reports at 1,2,4 GPUs, signed error"] = traces
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    results = {"fit": bench_fit(args.jobs), "journal": bench_journal(args.lines), "error": bench_error(100)}
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
