"""Liquid's immediate mode: best fit per job, scored by network cost and node load.

score = alpha x network cost + (1 - alpha) x node load, both in [0, 1]:

- network cost: mean distance between the job's GPU pairs over the tree's diameter
  (0 on one node; grows with the number of nodes under one leaf; highest across spines);
- node load: share of the touched nodes' GPUs left idle after the job (0 when the job
  fills them), so partly used nodes are filled first and whole nodes stay free.

The search never widens the job beyond the smallest scope that holds it: one node if one
node fits it, else one leaf switch, else the lowest switch level that fits. Inside that
scope, each of the `candidates` tightest switches is filled two ways (biggest nodes first,
or partly used nodes first) and the lowest score wins; `alpha` sets the trade.
"""

from __future__ import annotations

import numpy as np

from slurm_liquid.placement.base import PlacementRequest
from slurm_liquid.placement.engine import IndexedPlacer
from slurm_liquid.placement.fill import fill_switch, lowest_switches
from slurm_liquid.placement.index import Allocation, Snapshot
from slurm_liquid.topology import Topology


class LiquidBestFit(IndexedPlacer):
    """Immediate-mode placer (Liquid, section 5.2)."""

    name = "liquid"

    def __init__(self, topology: Topology, alpha: float = 0.5, candidates: int = 8) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
        if candidates < 1:
            raise ValueError(f"candidates must be at least 1, got {candidates}")
        super().__init__(topology)
        self.alpha = alpha
        self.candidates = candidates

    def score(self, snap: Snapshot, allocation: Allocation) -> float:
        """The job's score on `snap` before the allocation is taken (lower is better)."""
        return (self.alpha * self.tree.network_cost(allocation)
                + (1.0 - self.alpha) * self.tree.load_cost(snap, allocation))

    def select(self, snap: Snapshot, cap: np.ndarray, request: PlacementRequest) -> Allocation:
        need = request.gpus
        if request.gpus_per_node in (None, need):
            single = self._single_node(snap, cap, need, request.prefer)
            if single is not None:
                return single
        subcap = self.tree.switch_capacity(cap)
        best: tuple[float, int, Allocation] | None = None
        for switch in lowest_switches(self.tree, subcap, need, self.candidates).tolist():
            for mode in ("pack", "concentrate"):  # on a tie, keep whole nodes free
                allocation = fill_switch(self.tree, snap, cap, subcap, switch, need, mode)
                score = self.score(snap, allocation)
                # on an equal score, the allocation with more nodes that hold the job's data (staging)
                held = sum(self.tree.names[i] in request.prefer for i in allocation)
                if best is None or score < best[0] - 1e-12 or (score <= best[0] + 1e-12 and held > best[1]):
                    best = (score, held, allocation)
        assert best is not None  # the root holds every GPU, and no_room_reason passed
        return best[2]

    def _single_node(self, snap: Snapshot, cap: np.ndarray, need: int,
                     prefer: frozenset[str] = frozenset()) -> Allocation | None:
        """The fullest node that fits (its score is just its load); ties go to the fullest leaf, then to
        a node that holds the job's data (staging)."""
        fits = cap >= need
        if not fits.any():
            return None
        idle = np.where(fits, (snap.free - need) / np.maximum(snap.total, 1), np.inf)
        ties = np.flatnonzero(idle == idle.min())
        if ties.size > 1:
            leaf_free = self.tree.switch_capacity(snap.free)[self.tree.leaf[ties]]
            lacks = np.array([self.tree.names[i] not in prefer for i in ties])
            ties = ties[np.lexsort((lacks, leaf_free))]
        return {int(ties[0]): need}
