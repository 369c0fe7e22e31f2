"""Baselines Liquid is compared against, on the same interface and arrays.

- first-fit: nodes in topology order, taking what each has until the job is placed;
- random-fit: the same in a random node order (seeded, so runs repeat);
- slurm: Slurm's topology/tree idea: the lowest switch level that fits, the tightest switch
  there, the tightest leaves under it, then nodes in order inside each leaf.
"""

from __future__ import annotations

import numpy as np

from slurm_liquid.placement.base import PlacementRequest
from slurm_liquid.placement.engine import IndexedPlacer
from slurm_liquid.placement.fill import fill_switch, lowest_switches, take_in_order
from slurm_liquid.placement.index import Allocation, Snapshot
from slurm_liquid.topology import Topology


class FirstFit(IndexedPlacer):
    """Nodes in topology order (random order with `shuffle`)."""

    name = "first-fit"

    def __init__(self, topology: Topology) -> None:
        super().__init__(topology)

    def order(self, eligible: np.ndarray) -> np.ndarray:
        return eligible

    def select(self, snap: Snapshot, cap: np.ndarray, request: PlacementRequest) -> Allocation:
        units, amounts = take_in_order(self.order(np.flatnonzero(cap)), cap, snap.free, request.gpus,
                                       best_fit_tail=False)
        return dict(zip(units.tolist(), amounts.tolist()))


class RandomFit(FirstFit):
    """Nodes in a random order drawn from a seeded generator."""

    name = "random"

    def __init__(self, topology: Topology, seed: int | None = 0) -> None:
        super().__init__(topology)
        self.rng = np.random.default_rng(seed)

    def order(self, eligible: np.ndarray) -> np.ndarray:
        return self.rng.permutation(eligible)


class SlurmBestFit(IndexedPlacer):
    """Lowest-switch best fit, nodes first-fit inside each leaf (like topology/tree)."""

    name = "slurm"

    def select(self, snap: Snapshot, cap: np.ndarray, request: PlacementRequest) -> Allocation:
        subcap = self.tree.switch_capacity(cap)
        switch = int(lowest_switches(self.tree, subcap, request.gpus, limit=1)[0])
        return fill_switch(self.tree, snap, cap, subcap, switch, request.gpus, "index")
