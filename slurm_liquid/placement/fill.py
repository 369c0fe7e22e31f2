"""Choosing GPUs under a switch: the building blocks every placer here shares.

`take_in_order` walks units (nodes or switches) in a given order, taking each one whole,
and (with `best_fit_tail`) stops as soon as some remaining unit can hold the rest, which it
gives to the tightest such unit. Ordered by capacity, largest first, this spans the fewest
units and leaves the smallest hole; in node index order without the tail, it is first-fit.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from slurm_liquid.placement.index import Allocation, Snapshot, TreeIndex

# How nodes under one leaf are ordered: in index order (first-fit, as Slurm does), the
# biggest first (fewest nodes, least traffic), or partly used nodes first (keep whole nodes free).
NodeOrder = Literal["index", "concentrate", "pack"]


def take_in_order(order: np.ndarray, cap: np.ndarray, tiebreak: np.ndarray, need: int,
                  best_fit_tail: bool) -> tuple[np.ndarray, np.ndarray]:
    """Units and amounts taking `need` from units in `order` (all with cap > 0, sum >= need)."""
    c = cap[order]
    cs = np.cumsum(c)
    if not best_fit_tail:
        t = int(np.searchsorted(cs, need))
        amounts = c[:t + 1].copy()
        amounts[t] = need - (cs[t - 1] if t else 0)
        return order[:t + 1], amounts
    before = cs - c
    biggest_after = np.maximum.accumulate(c[::-1])[::-1]
    # first step at which some unit still ahead can hold all that is left (exists: sum >= need)
    t = int(np.argmax(biggest_after >= need - before))
    rest = int(need - before[t])
    ahead = np.flatnonzero(c[t:] >= rest) + t
    tail = ahead[np.lexsort((ahead, tiebreak[order[ahead]], c[ahead]))[0]]
    units = np.append(order[:t], order[tail])
    return units, np.append(c[:t], rest)


def fill_nodes(snap: Snapshot, cap: np.ndarray, lo: int, hi: int, need: int, mode: NodeOrder) -> Allocation:
    """Take `need` GPUs from nodes lo:hi (their capacities sum to at least `need`)."""
    idx = np.flatnonzero(cap[lo:hi]) + lo
    if mode == "index":
        units, amounts = take_in_order(idx, cap, snap.free, need, best_fit_tail=False)
    else:
        keys: tuple[np.ndarray, ...] = (snap.free[idx], -cap[idx])
        if mode == "pack":
            keys += ((snap.free[idx] == snap.total[idx]),)  # whole free nodes last
        units, amounts = take_in_order(idx[np.lexsort(keys)], cap, snap.free, need, best_fit_tail=True)
    return dict(zip(units.tolist(), amounts.tolist()))


def _take_all(cap: np.ndarray, lo: int, hi: int) -> Allocation:
    idx = np.flatnonzero(cap[lo:hi]) + lo
    return dict(zip(idx.tolist(), cap[idx].tolist()))


def fill_switch(tree: TreeIndex, snap: Snapshot, cap: np.ndarray, subcap: np.ndarray,
                switch: int, need: int, mode: NodeOrder) -> Allocation:
    """Take `need` GPUs under `switch`: whole child subtrees biggest first, the rest best-fit."""
    lo, direct_hi = int(tree.start[switch]), tree.direct_end[switch]
    kids = [k for k in tree.child_switches[switch] if subcap[k] > 0]
    if not kids:
        return fill_nodes(snap, cap, lo, direct_hi, need, mode)
    # units: child switches, then (as unit -1) the nodes hanging directly from this switch
    unit_cap = [int(subcap[k]) for k in kids]
    direct = int(cap[lo:direct_hi].sum())
    if direct:
        kids.append(-1)
        unit_cap.append(direct)
    caps = np.array(unit_cap)
    order = np.argsort(-caps, kind="stable")
    units, amounts = take_in_order(order, caps, caps, need, best_fit_tail=True)
    out: Allocation = {}
    for unit, amount in zip(units.tolist(), amounts.tolist()):
        kid = kids[unit]
        whole = amount == unit_cap[unit]
        if kid == -1:
            out.update(_take_all(cap, lo, direct_hi) if whole else fill_nodes(snap, cap, lo, direct_hi, amount, mode))
        elif whole:
            out.update(_take_all(cap, int(tree.start[kid]), int(tree.end[kid])))
        else:
            out.update(fill_switch(tree, snap, cap, subcap, kid, amount, mode))
    return out


def lowest_switches(tree: TreeIndex, subcap: np.ndarray, need: int, limit: int | None) -> np.ndarray:
    """Switches of the lowest level that can hold `need`, tightest first (at most `limit`)."""
    fits = subcap >= need
    if not fits.any():
        return np.empty(0, dtype=np.int64)
    level = tree.level[fits].min()
    cands = np.flatnonzero(fits & (tree.level == level))
    cands = cands[np.argsort(subcap[cands], kind="stable")]
    return cands if limit is None else cands[:limit]
