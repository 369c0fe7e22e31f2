"""Live-replay workloads: Pollux-like jobs, time-compressed, each with its own scaling curve, for the
test cluster (4 nodes x 4 GPUs). `benchmarks/live/workload.py` writes them to files; DL2's training under
the daemon's rules draws them here (training, validation and held-out seeds kept apart: docs/dl2.md).

From one of the Pollux artifact's workloads (workload-<seed % 8 + 1>.csv: arrivals, applications,
GPU counts, batch sizes as the artifact drew them from Philly), the first `jobs` jobs are kept:

- arrivals compressed so that the last one comes `span_s` seconds after the first (gaps keep their
  proportions);
- GPU counts scaled from the artifact's 64-GPU cluster to the 16-GPU test cluster (x 1/4, rounded
  up, at most 8: two nodes);
- run time at the asked GPU count: the application's measured run time alone (the traces) mapped
  onto minutes, `40 s x (isolated / 47 s) ** 0.3` (ncf's 47 s -> 40 s, imagenet's 7.6 h -> 270 s);
- a scaling curve per job drawn among three kinds (slurm_liquid/sim/curves.py: near-linear, flat
  past 2 GPUs, slow across nodes) that is NOT the traces' curve for its application, and the
  number of steps that makes the run time above at the asked GPU count;
- the catalog model the job declares (`#LIQUID model=`), so the daemon's prior is the traces'.
"""

from __future__ import annotations

import math

import numpy as np

from slurm_liquid.sim.apps import DATA_DIR, load_app
from slurm_liquid.sim.curves import KINDS, draw_curve
from slurm_liquid.sim.oracle import isolated_runtime
from slurm_liquid.sim.workload import load_pollux_csv

# The catalog model a job of each measured application declares (benchmarks/speed/fit_priors.py CATALOG,
# the speed prior's aliases, inverted).
MODELS = {"cifar10": "resnet18", "imagenet": "resnet50", "bert": "bert-base", "deepspeech2": "deepspeech2",
          "ncf": "ncf", "yolov3": "yolov3"}
# A declared batch the catalog can estimate on one H100 (the artifact's batches are global over many GPUs).
BATCH = {"cifar10": 128, "imagenet": 128, "bert": 32, "deepspeech2": 32, "ncf": 1024, "yolov3": 16}
CLUSTER = {"nodes": 4, "gpus_per_node": 4}
POLLUX_GPUS = 64
MAX_JOB_GPUS = 8


def run_seconds(isolated_s: float) -> float:
    return 40.0 * (isolated_s / 47.0) ** 0.3


def draw(seed: int, jobs: int, span_s: float) -> dict:
    source = DATA_DIR / "workloads" / f"workload-{seed % 8 + 1}.csv"
    specs = load_pollux_csv(source)[:jobs]
    if len(specs) < jobs:
        raise ValueError(f"workload: {source.name} has only {len(specs)} jobs")
    rng = np.random.default_rng(seed)
    t0, t1 = specs[0].time, specs[-1].time
    scale = span_s / (t1 - t0) if t1 > t0 else 1.0
    out = []
    for i, spec in enumerate(specs):
        app = load_app(spec.application)
        gpus = min(MAX_JOB_GPUS, math.ceil(spec.num_replicas * CLUSTER["nodes"] * CLUSTER["gpus_per_node"]
                                             / POLLUX_GPUS))
        nodes = math.ceil(gpus / CLUSTER["gpus_per_node"])
        if gpus % nodes:
            gpus = nodes * math.ceil(gpus / nodes)        # Slurm's shape: the same GPUs on every node
        kind = str(rng.choice(KINDS))
        curve = draw_curve(kind, rng, max_gpus=MAX_JOB_GPUS)
        seconds = run_seconds(isolated_runtime(app, spec.batch_size, spec.num_replicas, 4))
        steps = max(10, round(seconds / curve.step_time(gpus, nodes)))
        out.append({"name": f"{kind}-{spec.application}-{i}", "arrival_s": round((spec.time - t0) * scale, 1),
                    "app": spec.application, "model": MODELS[spec.application],
                    "batch_size": BATCH[spec.application], "gpus": gpus, "max_gpus": MAX_JOB_GPUS,
                    "steps": steps, "run_s_at_gpus": round(seconds, 1), "user": ("alice", "bob")[i % 2],
                    "curve": curve.to_json()})
    return {"seed": seed, "source": f"pollux {source.name}, first {jobs} jobs", "time_scale": round(scale, 6),
            "cluster": CLUSTER, "jobs": out}


def smoke(workload: dict, jobs: int = 4) -> dict:
    """The smoke test's workload: the first `jobs` jobs at half their steps (run.py and simulate.py --smoke)."""
    return {**workload, "smoke": True,
            "jobs": [{**j, "steps": max(10, j["steps"] // 2)} for j in workload["jobs"][:jobs]]}


