"""What Slurm itself would check before it starts a job on a node, as a filter in front of placement.

The daemon pins a job to nodes (ReqNodeList) and starts it; a node Slurm would refuse leaves the job
pending and pinned. So before placing, each job sees only the nodes it could run on:

- the node is up (not down, drained, failing) and in one of the job's partitions;
- the node has the job's GPU type, and every feature its constraint asks for;
- the node's free CPUs and memory can feed the GPUs placed there (the job's CPUs and memory per GPU).

`job_view` returns the cluster as that job sees it (other nodes offer no GPUs; a node's free GPUs
are capped by what its free CPUs and memory can feed), or the reason no node can take it and whether
the job should be handed to Slurm unplaced (a constraint this filter cannot read: it never guesses).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Iterable, Mapping

import numpy as np

from slurm_liquid.placement.base import ClusterState, NodeState
from slurm_liquid.placement.index import Snapshot, TreeIndex

_FEATURE = re.compile(r"[A-Za-z0-9_.\-]+")
_SIMPLE = re.compile(r"^[A-Za-z0-9_.\-&|]+$")


@dataclass(frozen=True)
class JobView:
    state: ClusterState
    reason: str | None = None        # why no node can take the job now
    unreadable: bool = False          # the job asks what this filter cannot check: hand it to Slurm


def constraint_matches(expression: str, features: Iterable[str]) -> bool | None:
    """Slurm's `--constraint` of plain features joined by `&` (and) and `|` (or); `&` binds tighter,
    as in Slurm. None for what this does not read (brackets, counts `*N`, parentheses, `!`)."""
    expression = (expression or "").strip()
    if not expression:
        return True
    if len(expression) > 1024 or not _SIMPLE.match(expression):
        return None
    have = set(features)
    for alternative in expression.split("|"):
        names = alternative.split("&")
        if not all(_FEATURE.fullmatch(n) for n in names):
            return None
        if all(n in have for n in names):
            return True
    return False


def per_gpu(job) -> tuple[float, float]:
    """(CPUs, MiB of memory) the job asks for each GPU it gets: its CPUs are for the whole job, its
    memory per node (slurm.Job.mem_mib)."""
    gpus = max(job.gpus, 1)
    per_node = job.gpus_per_node or math.ceil(gpus / max(job.num_nodes, 1))
    return (job.cpus / gpus if job.cpus else 0.0), ((job.mem_mib or 0) / max(per_node, 1))


def job_view(job, nodes: Mapping[str, object], state: ClusterState) -> JobView:
    """The cluster as `job` (slurm.Job) sees it: only nodes Slurm would start it on."""
    view = JobViews(nodes, state).view(job)
    return JobView(view.state, view.reason, view.unreadable)


@dataclass(frozen=True)
class _Rule:
    """What rules nodes out for one (partitions, GPU type, constraint): worked out once per pass."""

    slots: np.ndarray                 # slots of the nodes the job may use, in the state's order
    reason: str | None                # why none may (when `slots` is empty)
    unreadable: bool
    total: np.ndarray | None = None   # per topology position: GPUs of usable nodes, 0 elsewhere
    gpu_type: np.ndarray | None = None
    type_codes: Mapping[str, int] | None = None
    unknown: tuple[str, ...] = ()     # usable nodes the topology does not know


class JobViews:
    """`job_view` for every job of one pass, without walking every node for every job.

    What rules a node out (down, partition, GPU type, features) depends on the nodes only, so it is
    worked out once per pass for each (partitions, GPU type, constraint) that jobs ask for; what a
    node can still give (its free GPUs, capped by the free CPUs and memory the job needs per GPU)
    is computed with numpy from arrays of the pass's current state, which `update` keeps current as
    the pass takes GPUs. `view(job)` is what `job_view(job, nodes, state)` was, node by node (a
    property test holds it to that), and with a topology it also hands the placer its arrays
    (`View.snapshot`), so that placing a job costs no walk over the nodes either.
    """

    def __init__(self, nodes: Mapping[str, object], state: ClusterState, tree: TreeIndex | None = None):
        self.nodes = nodes
        self.tree = tree
        known = list(tree.names) if tree is not None else []
        self.slot: dict[str, int] = dict(tree.position) if tree is not None else {}
        for name in state.nodes:       # state nodes outside the topology go after it
            if name not in self.slot:
                self.slot[name] = len(known)
                known.append(name)
        self.names = known
        size = len(known)
        self.gpus_free = np.zeros(size, dtype=np.int64)
        self.cpus_free = np.full(size, np.inf)
        self.mem_free = np.full(size, np.inf)
        self.state = state
        self._set(state.nodes)
        self._rules: dict[tuple[str, str | None, str], _Rule] = {}
        # capped free GPUs per (rule, CPUs per GPU, memory per GPU), until the state changes: most
        # jobs of a pass ask alike
        self._caps: dict[tuple[int, float, float], np.ndarray] = {}
        self._shards: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._usable: dict[tuple[str, int], frozenset[str]] = {}

    # ------------------------------------------------------------ the state

    def _set(self, changed: Mapping[str, NodeState]) -> None:
        for name, node in changed.items():
            i = self.slot[name]
            self.gpus_free[i] = node.gpus_free
            self.cpus_free[i] = np.inf if node.cpus_free is None else float(node.cpus_free)
            self.mem_free[i] = np.inf if node.mem_free_mib is None else float(node.mem_free_mib)

    def update(self, state: ClusterState, changed: Iterable[str]) -> None:
        """The pass's state is now `state`, which differs from the last one only at `changed` nodes."""
        self.state = state
        self._caps.clear()
        self._set({name: state.nodes[name] for name in changed})

    # ------------------------------------------------------------ one job

    def view(self, job, returned: Mapping[str, int] | None = None) -> "View":
        """The cluster as `job` sees it; `returned`: GPUs per node counted free again (a running
        job judged as if its own GPUs were free), never beyond a node's GPUs."""
        rule = self._rule(job.partition or "", job.gpu_type, job.features or "")
        if rule.unreadable or not rule.slots.size:
            return View(self, rule, rule.slots, rule.reason, rule.unreadable)
        slots = rule.slots
        cpus_per_gpu, mem_per_gpu = per_gpu(job)
        key = (id(rule), cpus_per_gpu, mem_per_gpu)
        if not returned and key in self._caps:
            return View(self, rule, slots, None, False, self._caps[key])
        free = self.gpus_free[slots]
        if returned:
            free = free.copy()
            where = {int(s): k for k, s in enumerate(slots.tolist())}
            for name, gpus in returned.items():
                k = where.get(self.slot.get(name, -1))
                if k is not None:
                    total = self.state.nodes[name].gpus
                    free[k] = min(total, free[k] + gpus)
        cap = free.astype(np.float64)
        if cpus_per_gpu:
            cap = np.minimum(cap, np.floor(self.cpus_free[slots] / cpus_per_gpu + 1e-9))
        if mem_per_gpu:
            cap = np.minimum(cap, np.floor(self.mem_free[slots] / mem_per_gpu + 1e-9))
        cap = np.maximum(cap, 0).astype(np.int64)
        if not returned:
            self._caps[key] = cap
        return View(self, rule, slots, None, False, cap)

    def usable(self, job) -> frozenset[str]:
        """The nodes Slurm would start `job` on, whatever they have free now (up, in its partition,
        with its GPU type and features); empty for a constraint this filter cannot read."""
        rule = self._rule(job.partition or "", job.gpu_type, job.features or "")
        if rule.unreadable:
            return frozenset()
        key = ("usable", id(rule))
        names = self._usable.get(key)
        if names is None:
            names = self._usable[key] = frozenset(self.names[int(s)] for s in rule.slots)
        return names

    def _rule(self, partition: str, gpu_type: str | None, constraint: str) -> _Rule:
        key = (partition, gpu_type, constraint)
        rule = self._rules.get(key)
        if rule is None:
            rule = self._rules[key] = self._make_rule(partition, gpu_type, constraint)
        return rule

    def _make_rule(self, partition: str, gpu_type: str | None, constraint: str) -> _Rule:
        partitions = {p for p in partition.split(",") if p}
        seen: dict[str, int] = {}
        slots: list[int] = []
        matches_of: dict[tuple[str, ...], bool | None] = {}
        for name in self.state.nodes:
            node = self.nodes.get(name)
            if node is None:
                continue
            if not node.available:
                seen["down"] = seen.get("down", 0) + 1
                continue
            if partitions and node.partitions and not partitions & set(node.partitions):
                seen["partition"] = seen.get("partition", 0) + 1
                continue
            if gpu_type and node.gpu_type and gpu_type != node.gpu_type:
                seen["gpu type"] = seen.get("gpu type", 0) + 1
                continue
            features = tuple(node.features)
            if features not in matches_of:
                matches_of[features] = constraint_matches(constraint, features)
            matches = matches_of[features]
            if matches is None:
                return _Rule(np.empty(0, dtype=np.int64), f"constraint {constraint[:60]!r} is not one the daemon reads", True)
            if not matches:
                seen["features"] = seen.get("features", 0) + 1
                continue
            slots.append(self.slot[name])
        if not slots:
            why = ", ".join(f"{count} by {what}" for what, count in sorted(seen.items())) or "none"
            return _Rule(np.empty(0, dtype=np.int64), f"no node can take it (ruled out: {why})", False)
        chosen = np.array(slots, dtype=np.int64)
        if self.tree is None:
            return _Rule(chosen, None, False)
        # what TreeIndex.snapshot would make of the view: GPUs and type codes of usable nodes only
        n = len(self.tree.names)
        total = np.zeros(n, dtype=np.int64)
        types = np.full(n, -1, dtype=np.int64)
        codes: dict[str, int] = {}
        unknown = []
        for i in slots:
            if i >= n:
                unknown.append(self.names[i])
                continue
            node = self.state.nodes[self.names[i]]
            total[i] = node.gpus
            if node.gpu_type is not None:
                types[i] = codes.setdefault(node.gpu_type, len(codes))
        return _Rule(chosen, None, False, total, types, codes, tuple(unknown))

    def shard_facts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per slot: shards not allocated, whether a GPU is shared already, the rank of the name."""
        if self._shards is None:
            size = len(self.names)
            left = np.full(size, -1, dtype=np.int64)
            shares = np.zeros(size, dtype=bool)
            for name, i in self.slot.items():
                node = self.nodes.get(name)
                if node is not None and node.available:
                    left[i] = node.shards - node.shards_alloc
                    shares[i] = node.shards_alloc > 0
            rank = np.empty(size, dtype=np.int64)
            rank[np.argsort(np.array(self.names, dtype=object), kind="stable")] = np.arange(size)
            self._shards = (left, shares, rank)
        return self._shards


class View:
    """One job's view of the pass's cluster (see JobViews.view)."""

    def __init__(self, views: JobViews, rule: _Rule, slots: np.ndarray, reason: str | None, unreadable: bool,
                 cap: np.ndarray | None = None):
        self._views, self._rule, self.slots = views, rule, slots
        self.reason, self.unreadable = reason, unreadable
        # free GPUs per usable node, in slots' order (shared between views of one state: read only)
        self.cap = cap if cap is not None else np.zeros(0, dtype=np.int64)

    @property
    def usable(self) -> bool:
        """Is there any node the job may run on (free GPUs or not)?"""
        return bool(self.slots.size) and not self.unreadable

    @cached_property
    def state(self) -> ClusterState:
        """The view as a ClusterState: usable nodes, free GPUs capped (as job_view returned it)."""
        names, nodes = self._views.names, self._views.state.nodes
        out = {}
        for i, cap in zip(self.slots.tolist(), self.cap.tolist()):
            name = names[i]
            out[name] = replace(nodes[name], gpus_free=cap)
        return ClusterState(out)

    def free_of(self, name: str) -> int | None:
        """The node's free GPUs in this view, None when the job may not use it."""
        i = self._views.slot.get(name)
        if i is None:
            return None
        at = np.flatnonzero(self.slots == i)
        return int(self.cap[at[0]]) if at.size else None

    def fits(self, nodes: Mapping[str, int]) -> bool:
        """Does a placement use only nodes of this view, within their free GPUs?"""
        for name, gpus in nodes.items():
            free = self.free_of(name)
            if free is None or gpus > free:
                return False
        return True

    def snapshot(self) -> Snapshot:
        """The placer's arrays of this view (what TreeIndex.snapshot(view.state) makes), fresh."""
        tree, rule = self._views.tree, self._rule
        if tree is None or rule.total is None:
            raise ValueError("a view without a topology has no snapshot")
        if rule.unknown:
            tree.topology.check_nodes(rule.unknown)   # raises, naming them
        free = np.zeros(len(tree.names), dtype=np.int64)
        free[self.slots] = self.cap
        return Snapshot(rule.total, free, rule.gpu_type, rule.type_codes)

    def leaf_capacity(self, gpu_type: str | None, per_node: int | None) -> np.ndarray:
        """GPUs of this view's nodes under each switch (those hanging from it directly) once they
        are empty: all of them, or `per_node` from each node that has at least that many."""
        tree, rule = self._views.tree, self._rule
        if tree is None or rule.total is None:
            raise ValueError("a view without a topology has no switches")
        total = rule.total
        if gpu_type:
            code = rule.type_codes.get(gpu_type, -2)
            total = np.where(rule.gpu_type == code, total, 0)
        if per_node:
            total = np.where(total >= per_node, per_node, 0)
        return np.bincount(tree.leaf, weights=total, minlength=len(tree.switch_names))

    def shard_node(self, shards: int) -> str | None:
        """Where a job asking `shards` shares goes: a node that already shares a GPU first, then the
        one with the fewest free GPUs, then by name."""
        left, shares, rank = self._views.shard_facts()
        slots = self.slots
        ok = (left[slots] >= shards) & (shares[slots] | (self.cap > 0))
        if not ok.any():
            return None
        pick = slots[ok]
        best = np.lexsort((rank[pick], self.cap[ok], ~shares[pick]))[0]
        return self._views.names[int(pick[best])]
