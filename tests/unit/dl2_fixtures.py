"""Small workloads and tiny trained models shared by the DL2 tests (fast on 2 cores)."""

from __future__ import annotations

import numpy as np

from slurm_liquid.sim.engine import ClusterConfig
from slurm_liquid.sim.workload import JobSpec

CONFIG = ClusterConfig(nodes=4, gpus_per_node=4)

_APPS = (("cifar10", 1, 128), ("ncf", 1, 256), ("cifar10", 2, 256), ("bert", 2, 24), ("deepspeech2", 2, 40))


def small_workload(seed: int, jobs: int = 10, gap: float = 120.0) -> list[JobSpec]:
    """`jobs` short jobs on a 16-GPU cluster, arriving as a seeded Poisson process."""
    rng = np.random.default_rng(seed)
    t = 0.0
    specs = []
    for i in range(jobs):
        app, n, batch = _APPS[int(rng.integers(len(_APPS)))]
        specs.append(JobSpec(f"{app}-{i}", round(t, 1), app, n, batch))
        t += float(rng.exponential(gap))
    return specs
