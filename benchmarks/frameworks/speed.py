"""The speed room on real framework step times: fit on some widths, predict one the job has not run.

    python benchmarks/frameworks/speed.py DIR [--fit 1,2,4] [--predict 3]

DIR holds `<example>-<n>.log` (measure.sh): one JSON line per step and rank with its wall-clock time. A
width's step time is the median gap between rank 0's consecutive steps, skipping the first 20 (start-up).
Each measured width becomes reports to `MeasuredSpeedModel` (samples per second at the global batch, as
the callbacks report), with the example's model as the prior; the model then predicts the unseen width.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from slurm_liquid.policy.base import JobView
from slurm_liquid.speed.model import MeasuredSpeedModel, Observation

MODELS = {"ddp_train": "resnet18", "lightning_train": "resnet18", "hf_train": "gpt2"}
BATCH = 60


def step_time(path: Path) -> float:
    times = sorted(json.loads(line)["t"] for line in path.read_text().splitlines()
                   if line.strip() and json.loads(line)["rank"] == 0)
    gaps = [b - a for a, b in zip(times[20:], times[21:])]
    return statistics.median(gaps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--fit", default="1,2,4")
    parser.add_argument("--predict", type=int, default=3)
    args = parser.parse_args()
    fit = [int(w) for w in args.fit.split(",")]
    print("| example | measured s/step at " + ", ".join(f"{w}" for w in [*fit, args.predict]) +
          f" | predicted at {args.predict} | error |")
    print("|---|---|---|---|")
    for example, model in MODELS.items():
        measured = {w: step_time(args.directory / f"{example}-{w}.log") for w in [*fit, args.predict]}
        speed = MeasuredSpeedModel(gpus_per_node=4)
        for w in fit:
            for k in range(3):
                speed.observe(Observation(example, w, 1, BATCH, BATCH / measured[w], 1000.0 + k), model=model)
        job = JobView(id=example, submit_time=0.0, gpus=fit[-1], allocation=(("n0", fit[-1]),), max_gpus=8,
                      app=model, batch_size=BATCH)
        predicted = speed.iteration_time(job, args.predict)
        error = predicted / measured[args.predict] - 1
        print(f"| {example} | " + ", ".join(f"{measured[w]:.4f}" for w in [*fit, args.predict]) +
              f" | {predicted:.4f} | {error:+.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
