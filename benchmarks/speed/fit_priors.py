"""Fit the speed room's priors (slurm_liquid/speed/priors.json) from the Pollux artifact's traces.

    PYTHONPATH=$PWD python benchmarks/speed/fit_priors.py            # writes priors.json, prints the errors
    PYTHONPATH=$PWD python benchmarks/speed/fit_priors.py --check    # compares with the committed file

For each trace application the seven ThroughputParams are fitted by least squares on log step time
(every row of placements.csv and scalability.csv: GPUs = the placement's sum, nodes = its length,
global batch = local batch x GPUs) and on log compute time (step - sync time), as Pollux's
fit_perf_params does, from several starting points. The fit error is reported against the same
rows and against the simulator's oracle at the widths a policy asks about (packed onto 4-GPU nodes,
at the application's initial batch). Per-family defaults are the family's reference application;
"linear" is a model with near-free gradient sync. The typical total steps per batch come from the
validation curves (what the oracle's remaining_iterations starts from).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from slurm_liquid.sim.apps import APPLICATIONS, TRACE_DIR, load_app
from slurm_liquid.sim.oracle import packed
from slurm_liquid.speed.params import ThroughputParams, Widths, bounds, jacobian, predict_log

OUT = Path(__file__).resolve().parents[2] / "slurm_liquid" / "speed" / "priors.json"
# catalog names of the models the traces measured: the prior table's aliases (speed.trace_app reads them)
CATALOG = {"resnet18": "cifar10", "resnet50": "imagenet", "bert-base": "bert", "deepspeech2": "deepspeech2",
           "ncf": "ncf", "yolov3": "yolov3"}
# prior family -> its reference trace (scaled by the model's parameter count relative to the trace's)
FAMILIES = {"cnn": "imagenet", "transformer": "bert", "rnn": "deepspeech2", "recsys": "ncf",
            "detection": "yolov3"}
# catalog families (estimate/catalog.py FAMILIES) -> the prior family that stands for them
FAMILY_OF = {"cnn": "cnn", "vit": "transformer", "encoder": "transformer", "decoder": "transformer",
             "seq2seq": "transformer", "rnn": "rnn", "recsys": "recsys", "detection": "detection"}
REFERENCE_MODEL = {"imagenet": "resnet50", "bert": "bert-base", "deepspeech2": "deepspeech2", "ncf": "ncf",
                   "yolov3": "yolov3", "cifar10": "resnet18"}


def rows(app: str, uniform: bool = True) -> tuple[Widths, np.ndarray, np.ndarray]:
    """The trace's measurements; with `uniform`, only placements Slurm can express (the same GPUs on
    every node: 44, not 431), which are the ones the speed room is asked about."""
    gpus, nodes, batch, step, sync = [], [], [], [], []
    with (TRACE_DIR / app / "placements.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            per_node = [int(c) for c in row["placement"]]
            if uniform and len(set(per_node)) > 1:
                continue
            gpus.append(sum(per_node))
            nodes.append(len(per_node))
            batch.append(float(row["local_bsz"]) * sum(per_node))
            step.append(float(row["step_time"]))
            sync.append(float(row["sync_time"]))
    with (TRACE_DIR / app / "scalability.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            gpus.append(int(row["num_replicas"]))
            nodes.append(int(row["num_nodes"]))
            batch.append(float(row["local_bsz"]) * int(row["num_replicas"]))
            step.append(float(row["step_time"]))
            sync.append(float(row["sync_time"]))
    step_a, sync_a = np.array(step), np.array(sync)
    return Widths.of(gpus, nodes, batch), step_a, np.maximum(step_a - sync_a, 0.05 * step_a)


def fit_app(app: str) -> tuple[ThroughputParams, dict]:
    w, step, compute = rows(app, uniform=True)
    ls, lc = np.log(step), np.log(compute)
    one = Widths(np.ones_like(w.gpus), np.ones_like(w.nodes), w.local)   # compute alone = the 1-GPU model

    def residuals(x):
        return np.concatenate([predict_log(x, w) - ls, predict_log(x, one) - lc])

    def jac(x):
        return np.vstack([jacobian(x, w), jacobian(x, one)])

    lo, hi = bounds()
    best = None
    t1 = float(np.median(step[w.gpus == 1]))
    for net in (1e-2, 1e-1, 1.0):
        for gamma in (1.0, 2.0, 5.0):
            x0 = np.array([math.log(t1 / 4), math.log(t1 / 100), math.log(net * t1), math.log(net * t1 / 10),
                           0.5, 0.5, gamma])
            r = least_squares(residuals, np.clip(x0, lo + 1e-6, hi - 1e-6), jac=jac, bounds=(lo, hi))
            if best is None or r.cost < best.cost:
                best = r
    params = ThroughputParams.from_vector(best.x)
    err = predict_log(best.x, w) - ls
    w_all, step_all, _ = rows(app, uniform=False)
    err_all = predict_log(best.x, w_all) - np.log(step_all)
    model = load_app(app)
    batch = model.init_bsz * 4
    gaps = {}
    for g in (1, 2, 4, 8, 16, 32):
        try:   # what a simulated job's step takes (sim/job.py's batch split) at 4x the initial batch
            truth = model.iteration_time(packed(g, 4), model.batch_config(batch, g))
        except Exception:   # noqa: BLE001 -- a width the traces cannot answer is not compared
            continue
        gaps[g] = math.log(params.step_time(g, -(-g // 4), batch) / truth)
    errors = {"rows": int(len(ls)), "rms_log": float(np.sqrt(np.mean(err ** 2))),
              "median_abs_pct": float(100 * np.median(np.abs(np.expm1(err)))),
              "max_abs_pct": float(100 * np.max(np.abs(np.expm1(err)))),
              "all_rows": int(len(err_all)), "all_median_abs_pct": float(100 * np.median(np.abs(np.expm1(err_all)))),
              "oracle_packed_abs_pct": {g: round(100 * abs(math.expm1(v)), 1) for g, v in gaps.items()}}
    return params, errors


def steps_table(app: str) -> dict:
    model = load_app(app)
    last = model.max_epochs - 1
    return {"epochs": int(model.max_epochs),
            "batch": [int(b) for b in model.valid_bsz],
            "steps": [round(model.iterations(float(b), last), 1) for b in model.valid_bsz]}


def build() -> tuple[dict, dict]:
    from slurm_liquid.estimate.catalog import load_catalog

    catalog = load_catalog()
    traces, errors = {}, {}
    for app in APPLICATIONS:
        params, err = fit_app(app)
        entry = catalog.find(REFERENCE_MODEL[app])
        traces[app] = {"params": {k: float(f"{v:.6g}") for k, v in params.as_dict().items()},
                       "model_params": entry.params if entry else None,
                       "init_batch": int(load_app(app).init_bsz), **steps_table(app)}
        errors[app] = err
    # linear: compute dominates at every width (network 1% of a one-sample step, overlapped)
    linear = {"alpha_c": 0.01, "beta_c": 1.0, "alpha_r": 0.01, "beta_r": 0.001, "alpha_n": 0.02, "beta_n": 0.002,
              "gamma": 3.0}
    data = {"about": "ThroughputParams fitted from the Pollux artifact's traces by benchmarks/speed/fit_priors.py; "
                     "do not edit by hand",
            "traces": traces,
            "aliases": CATALOG,
            "families": FAMILIES,
            "family_of": FAMILY_OF,
            "linear": linear,
            "default_steps": 1000.0}
    return data, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = parser.parse_args(argv)
    data, errors = build()
    print(f"{'app':<12} {'rows':>5} {'rms log':>8} {'median %':>9} {'max %':>7} {'all rows':>9} {'median %':>9}  "
          "packed on 4-GPU nodes, GPUs: abs % vs the oracle")
    for app, e in errors.items():
        print(f"{app:<12} {e['rows']:>5} {e['rms_log']:>8.3f} {e['median_abs_pct']:>9.1f} {e['max_abs_pct']:>7.1f} "
              f"{e['all_rows']:>9} {e['all_median_abs_pct']:>9.1f}  {e['oracle_packed_abs_pct']}")
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = OUT.read_text() == text
        print("priors.json is up to date" if same else "priors.json differs from a fresh fit")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
