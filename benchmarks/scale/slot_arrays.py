"""What the elastic slot costs once it stops walking every node for every resize (a sketch for the
rewrite of daemon/elastic.py, measured by run.py as "slot drf, arrays").

`Adjuster` (daemon/elastic.py) places each job it resizes on `ClusterState.from_nodes(nodes)` with the
job's own GPUs freed, one `dataclasses.replace` per node, and after each resize rebuilds the node list
(another `replace` per node): two walks over every node per resized job, O(jobs x nodes) a slot.
`ArrayAdjuster` keeps the nodes' allocated GPUs in one numpy array for the slot and hands the placer
arrays (`TreeIndex`'s `Snapshot`): the same placements (run.py checks that both start the same
resizes), at a cost that grows with the jobs only. It is not the daemon's code: the lead's rewrite
decides the shape (placement/slurm_rules.JobViews gives the same arrays with Slurm's rules applied).
"""

from __future__ import annotations

import numpy as np

from slurm_liquid.daemon.elastic import Adjuster, ElasticJob, SlotReport
from slurm_liquid.daemon.resize import current_allocation, uniform_placement_sizes
from slurm_liquid.placement import PlacementRequest
from slurm_liquid.placement.index import Snapshot, TreeIndex
from slurm_liquid.slurm import Job, Node


class ArrayAdjuster(Adjuster):
    """`Adjuster` with the slot's node bookkeeping in arrays (placements unchanged)."""

    _slot_nodes: list[Node] | None = None

    def _arrays(self, nodes: list[Node]) -> None:
        if nodes is self._slot_nodes:
            return
        tree = TreeIndex.of(self.topology)
        self._tree, self._slot_nodes = tree, nodes
        size = len(tree.names)
        self._total = np.zeros(size, dtype=np.int64)
        self._alloc = np.zeros(size, dtype=np.int64)
        self._up = np.zeros(size, dtype=bool)
        types = np.full(size, -1, dtype=np.int64)
        self._codes: dict[str, int] = {}
        for node in nodes:          # as TreeIndex.snapshot(ClusterState.from_nodes(nodes)) reads them
            i = tree.position[node.name]
            self._total[i], self._alloc[i], self._up[i] = node.gpus, node.gpus_alloc, node.available
            if node.gpu_type is not None:
                types[i] = self._codes.setdefault(node.gpu_type, len(self._codes))
        self._types = types
        self._per_node_max = max((n.gpus for n in nodes), default=0)

    def _change(self, item: ElasticJob, held: int, target: int, nodes: list[Node],
                report: SlotReport) -> dict[str, int] | None:
        self._arrays(nodes)
        new = super()._change(item, held, target, nodes, report)
        if new is not None:      # the next job of this slot must see where this one goes
            position = self._tree.position
            for name, gpus in current_allocation(item.job).items():
                i = position[name]
                self._alloc[i] = max(self._alloc[i] - gpus, 0)
            for name, gpus in new.items():
                self._alloc[position[name]] += gpus
        return None   # the arrays hold it: `_decide` keeps its node list instead of copying every node

    def _place(self, job: Job, gpus: int, nodes: list[Node]) -> dict[str, int] | None:
        self._arrays(nodes)
        free = np.where(self._up, np.maximum(self._total - self._alloc, 0), 0)
        for name, own in current_allocation(job).items():
            i = self._tree.position[name]
            free[i] = min(self._total[i], free[i] + own)
        for count, per_node in uniform_placement_sizes(gpus, self._per_node_max):
            snap = Snapshot(self._total, free.copy(), self._types, self._codes)
            placement = self.placer.place_on(snap, PlacementRequest(str(job.job_id), gpus, per_node, job.gpu_type))
            if placement.placed:
                return dict(placement.nodes)
        return None
