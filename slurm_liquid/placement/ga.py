"""Liquid's batch mode: a grouping genetic algorithm over a batch of pending jobs.

A plan gives each job a group of nodes (GPUs per node) or nothing. Following Falkenauer's
grouping GA, the operators act on whole groups, never on single GPUs:

- seeds: the immediate-mode plan (jobs one by one with `LiquidBestFit`), first-fit, the
  immediate mode on the biggest jobs first, and random-fit / shuffled plans for diversity;
- crossover: take the groups one parent keeps under a random switch, put them into the
  other parent, drop that parent's groups that now over-commit a node, and re-place the
  dropped jobs with the best-fit heuristic in a random order;
- mutation: drop every group touching a random switch (or a few random jobs) and re-place
  them, with best fit or, sometimes, random fit.

A plan's cost is (GPUs left unplaced, jobs spread wider than needed, sum of the jobs'
immediate-mode scores + node_weight x whole free nodes it opens), compared in that order
(see `GroupingGA.cost`). The immediate plan is in the first population and the best plan ever seen is what
comes back, so batch mode is never worse than placing the jobs one by one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from slurm_liquid.placement.base import ClusterState, Placement, PlacementRequest
from slurm_liquid.placement.baselines import FirstFit, RandomFit
from slurm_liquid.placement.engine import IndexedPlacer, no_room_reason
from slurm_liquid.placement.index import Allocation, Snapshot
from slurm_liquid.placement.liquid import LiquidBestFit
from slurm_liquid.topology import Topology

Cost = tuple[int, int, float]


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() >= deadline


@dataclass
class Plan:
    groups: list[Allocation | None]
    free: np.ndarray
    cost: Cost = (0, 0, 0.0)


class GroupingGA:
    """Batch-mode placer; `place_all` optimises the whole list, `place` is the batch of one."""

    name = "ga"

    def __init__(self, topology: Topology, alpha: float = 0.5, seed: int | None = None,
                 time_budget_s: float | None = 0.5, generations: int | None = None,
                 population: int = 16, node_weight: float = 0.1, mutation_rate: float = 0.3,
                 candidates: int = 8) -> None:
        if time_budget_s is None and generations is None:
            raise ValueError("give time_budget_s or generations (or both), or the search never stops")
        if population < 4:
            raise ValueError(f"population must be at least 4, got {population}")
        self.liquid = LiquidBestFit(topology, alpha, candidates)
        self.first_fit = FirstFit(topology)
        self.tree = self.liquid.tree
        self.topology = topology
        self.seed = seed
        self.time_budget_s = time_budget_s
        self.generations = generations
        self.population = population
        self.node_weight = node_weight
        self.mutation_rate = mutation_rate
        self.last_generations = 0  # how many generations the last call ran (for benchmarks)

    # ---- Placer -------------------------------------------------------------------------
    def place(self, request: PlacementRequest, state: ClusterState) -> Placement:
        return self.place_all([request], state)[0]

    def place_all(self, requests: Sequence[PlacementRequest], state: ClusterState) -> list[Placement]:
        snap = self.tree.snapshot(state)
        plan = self.search(snap, requests)
        end = Snapshot(snap.total, plan.free, snap.gpu_type, snap.type_codes)
        out = []
        for request, group in zip(requests, plan.groups):
            if group is not None:
                out.append(Placement(request.job, self.tree.names_of(group)))
                continue
            cap = self.tree.capacity(end, request)
            reason = no_room_reason(end, cap, request) or "left out of the batch plan"
            out.append(Placement(request.job, None, f"{reason} after the rest of the batch"))
        return out

    # ---- search ---------------------------------------------------------------------------
    def search(self, snap: Snapshot, requests: Sequence[PlacementRequest]) -> Plan:
        """The best plan found for `requests` on `snap` (which is left unchanged)."""
        rng = np.random.default_rng(self.seed)
        deadline = None if self.time_budget_s is None else time.perf_counter() + self.time_budget_s
        population = self._seeds(snap, requests, rng, deadline)
        best = min(population, key=lambda p: p.cost)
        self.last_generations = 0
        if len(requests) < 2:
            return best  # nothing to regroup: the seeds already hold the best single placement
        while not _late(deadline) and (self.generations is None or self.last_generations < self.generations):
            ranked = sorted(population, key=lambda p: p.cost)
            children = ranked[:2]  # elitism
            while len(children) < self.population and not _late(deadline):
                child = self._crossover(snap, requests, self._pick(ranked, rng), self._pick(ranked, rng), rng)
                if rng.random() < self.mutation_rate:
                    child = self._mutate(snap, requests, child, rng)
                children.append(child)
            population = children
            best = min([best, *population], key=lambda p: p.cost)
            self.last_generations += 1
        return best

    def cost(self, snap: Snapshot, requests: Sequence[PlacementRequest], groups: Sequence[Allocation | None],
             free: np.ndarray) -> Cost:
        """(GPUs unplaced, jobs wider than needed, sum of job scores + node_weight x nodes opened).

        Lower is better, compared in that order. Each job is judged on the state the jobs
        before it (in request order) left, as immediate mode judged its own choices: it is
        wider than needed if it spans more nodes or switches than the smallest scope that
        could hold it there (so batch plans keep immediate mode's topology promises), and its
        score is the immediate-mode score. A node is opened when the batch uses a node that
        had all its GPUs free.
        """
        work = Snapshot(snap.total, snap.free.copy(), snap.gpu_type, snap.type_codes)
        unplaced, wide, total = 0, 0, 0.0
        for request, group in zip(requests, groups):
            if group is None:
                unplaced += request.gpus
                continue
            scope = self._scope(group)
            wide += scope > -1 and scope > self._smallest_scope(work, request, below=scope)
            total += self.liquid.score(work, group)
            work.take(group)
        opened = np.count_nonzero((snap.free == snap.total) & (free < snap.free))
        return unplaced, wide, total + self.node_weight * int(opened)

    def _scope(self, group: Allocation) -> int:
        """-1 for one node, else the level of the lowest switch above all the group's nodes."""
        if len(group) == 1:
            return -1
        tree = self.tree
        lo, hi = min(group), max(group)
        leaf = int(tree.leaf[lo])
        for switch in tree.chain[leaf]:
            if tree.start[switch] <= lo and hi < tree.end[switch]:
                return int(tree.level[switch])
        return int(tree.level.max())  # only the root holds them all

    def _smallest_scope(self, work: Snapshot, request: PlacementRequest, below: int) -> int:
        """The smallest scope that could hold `request` on `work`, looked for only under `below`."""
        cap = self.tree.capacity(work, request)
        if request.gpus_per_node in (None, request.gpus) and cap.max(initial=0) >= request.gpus:
            return -1
        if below == 0:
            return 0  # nothing lies between one node and a leaf switch
        fits = self.tree.switch_capacity(cap) >= request.gpus
        return int(self.tree.level[fits].min()) if fits.any() else int(self.tree.level.max())

    def _plan(self, snap: Snapshot, requests: Sequence[PlacementRequest], groups: list[Allocation | None],
              free: np.ndarray) -> Plan:
        return Plan(groups, free, self.cost(snap, requests, groups, free))

    def _sequential(self, snap: Snapshot, requests: Sequence[PlacementRequest], placer: IndexedPlacer,
                    order: Sequence[int]) -> Plan:
        work = snap.copy()
        groups: list[Allocation | None] = [None] * len(requests)
        self._fill(work, requests, groups, order, placer)
        return self._plan(snap, requests, groups, work.free)

    def _seeds(self, snap: Snapshot, requests: Sequence[PlacementRequest], rng: np.random.Generator,
               deadline: float | None = None) -> list[Plan]:
        n = len(requests)
        in_order = list(range(n))
        biggest_first = sorted(in_order, key=lambda j: -requests[j].gpus)
        seeds = [self._sequential(snap, requests, self.liquid, in_order),
                 self._sequential(snap, requests, self.first_fit, in_order),
                 self._sequential(snap, requests, self.liquid, biggest_first)]
        random_fit = RandomFit(self.topology, seed=int(rng.integers(2**31)))
        # the diverse seeds stop at half the budget, to leave the other half to evolution
        halfway = None if deadline is None else deadline - self.time_budget_s / 2  # type: ignore[operator]
        while len(seeds) < self.population and (len(seeds) < 4 or not _late(halfway)):
            order = rng.permutation(n).tolist()
            placer = random_fit if len(seeds) % 2 else self.liquid
            seeds.append(self._sequential(snap, requests, placer, order))
        return seeds

    @staticmethod
    def _pick(ranked: list[Plan], rng: np.random.Generator) -> Plan:
        """Binary tournament (ranked is sorted, so the lower index wins)."""
        a, b = rng.integers(len(ranked), size=2)
        return ranked[min(a, b)]

    def _fill(self, work: Snapshot, requests: Sequence[PlacementRequest], groups: list[Allocation | None],
              order: Sequence[int], placer: IndexedPlacer) -> None:
        """Place the jobs of `order` that have no group yet, taking their GPUs in `work`."""
        for j in order:
            if groups[j] is not None:
                continue
            allocation = placer.allocate(work, requests[j])
            if not isinstance(allocation, str):
                work.take(allocation)
                groups[j] = allocation

    def _repair(self, snap: Snapshot, requests: Sequence[PlacementRequest], groups: list[Allocation | None],
                free: np.ndarray, rng: np.random.Generator, placer: IndexedPlacer | None = None) -> Plan:
        """Re-place every job without a group, in a random or biggest-first order."""
        work = Snapshot(snap.total, free, snap.gpu_type, snap.type_codes)
        order = rng.permutation(len(requests)).tolist()
        if rng.random() < 0.5:
            order.sort(key=lambda j: -requests[j].gpus)
        self._fill(work, requests, groups, order, placer or self.liquid)
        return self._plan(snap, requests, groups, work.free)

    def _region(self, rng: np.random.Generator) -> tuple[int, int]:
        """Node slice under a random switch (leaves are the most common)."""
        switch = int(rng.integers(len(self.tree.switch_names)))
        return int(self.tree.start[switch]), int(self.tree.end[switch])

    @staticmethod
    def _inside(group: Allocation, lo: int, hi: int) -> bool:
        return all(lo <= node < hi for node in group)

    def _crossover(self, snap: Snapshot, requests: Sequence[PlacementRequest], mother: Plan, father: Plan,
                   rng: np.random.Generator) -> Plan:
        lo, hi = self._region(rng)
        injected = {j for j, g in enumerate(father.groups) if g is not None and self._inside(g, lo, hi)}
        groups = list(mother.groups)
        free = snap.free.copy()
        for j in injected:
            group = groups[j] = father.groups[j]
            free[list(group)] -= list(group.values())
        # keep the mother's groups that still fit around the injected ones, in her order
        for j, group in enumerate(groups):
            if group is None or j in injected:
                continue
            nodes = list(group)
            wanted = np.fromiter(group.values(), dtype=np.int64, count=len(nodes))
            if (free[nodes] >= wanted).all():
                free[nodes] -= wanted
            else:
                groups[j] = None
        return self._repair(snap, requests, groups, free, rng)

    def _mutate(self, snap: Snapshot, requests: Sequence[PlacementRequest], plan: Plan,
                rng: np.random.Generator) -> Plan:
        groups = list(plan.groups)
        if rng.random() < 0.5:
            lo, hi = self._region(rng)
            drop = [j for j, g in enumerate(groups) if g is not None and any(lo <= n < hi for n in g)]
        else:
            placed = [j for j, g in enumerate(groups) if g is not None]
            drop = rng.choice(placed, size=min(len(placed), max(1, len(placed) // 8)), replace=False).tolist() \
                if placed else []
        free = plan.free.copy()
        for j in drop:
            group = groups[j]
            assert group is not None
            free[list(group)] += list(group.values())
            groups[j] = None
        placer = RandomFit(self.topology, seed=int(rng.integers(2**31))) if rng.random() < 0.2 else None
        return self._repair(snap, requests, groups, free, rng, placer)
