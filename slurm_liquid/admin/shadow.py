"""`slurm-liquid admin shadow`: the figures an admin needs before turning enforcement on, from sacct.

- placement: for GPU jobs the daemon shadowed, where it would have put them (the `would=` of the
  trusted tag in AdminComment) against where Slurm ran them (sacct's NodeList): same nodes or not, and
  the leaf switches each spans (the topology Slurm reports);
- estimate: for jobs the node agents measured, the peak GPU memory per GPU (`liquid-used/1 peak=`, in
  AdminComment) against the estimate per GPU in the record (`est=...:NG`).

Read-only: one `sacct` call and one `scontrol show topology`.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from dataclasses import dataclass, field

from slurm_liquid.errors import LiquidError
from slurm_liquid.ledger import Record
from slurm_liquid.ledger.limits import LedgerError
from slurm_liquid.ledger.placed import expand_nodes, parse_placed
from slurm_liquid.ledger.usage import Usage

SEP = "\x1f"     # sacct --delimiter: a Comment may hold "|"
_WOULD = re.compile(r"(?:^|\s)would=([^\s;]+)")


@dataclass
class Figures:
    jobs: int = 0                     # jobs with a liquid record or tag in the window
    shadowed: int = 0                 # GPU jobs with a would= placement and a Slurm node list
    same_nodes: int = 0
    would_wait: int = 0               # the daemon would have kept them waiting; Slurm started them
    leaves_would: list[int] = field(default_factory=list)
    leaves_slurm: list[int] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)   # measured peak / estimate, per GPU

    def to_json(self) -> dict:
        under = sum(r > 1.0 for r in self.ratios)
        return {"jobs": self.jobs, "shadowed": self.shadowed, "same_nodes": self.same_nodes,
                "would_wait": self.would_wait,
                "mean_leaves_would": _mean(self.leaves_would), "mean_leaves_slurm": _mean(self.leaves_slurm),
                "multi_leaf_would": sum(n > 1 for n in self.leaves_would),
                "multi_leaf_slurm": sum(n > 1 for n in self.leaves_slurm),
                "measured": len(self.ratios), "median_peak_over_estimate": _median(self.ratios),
                "under_estimated": under, "under_estimated_share": under / len(self.ratios) if self.ratios else None}


def _mean(values: list[int]) -> float | None:
    return round(statistics.fmean(values), 2) if values else None


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def figures(lines: list[str], leaf_of) -> Figures:
    """From `sacct -P --delimiter=SEP -o JobID,NodeList,AdminComment,Comment` lines; `leaf_of(node)` or None."""
    out = Figures()
    for line in lines:
        parts = line.split(SEP, 3)
        if len(parts) < 4:
            continue
        _, nodelist, admin, comment = parts
        record = Record.parse(comment)
        if record is None and "liquid/" not in admin:
            continue
        out.jobs += 1
        would = _WOULD.search(admin)
        slurm_nodes = _nodes(nodelist)
        if would and slurm_nodes and would.group(1) not in ("any",):
            out.shadowed += 1
            if would.group(1) == "wait":
                out.would_wait += 1
            else:
                try:
                    placed = sorted(parse_placed(would.group(1)))
                except LedgerError:
                    placed = []
                if placed:
                    out.same_nodes += placed == sorted(slurm_nodes)
                    if leaf_of is not None:
                        out.leaves_would.append(len({leaf_of(n) for n in placed}))
                        out.leaves_slurm.append(len({leaf_of(n) for n in slurm_nodes}))
        used = Usage.parse(admin)
        est = record.estimate_mib() if record else None
        if used is not None and est and used.by != "none":
            out.ratios.append(used.peak_mib / est)
    return out


def _nodes(nodelist: str) -> list[str]:
    try:
        return sorted(expand_nodes(nodelist)) if nodelist and nodelist != "None assigned" else []
    except LedgerError:
        return []


def read(since_days: int, timeout_s: float = 60) -> list[str]:
    argv = ["sacct", "-a", "-X", "-n", "-P", f"--delimiter={SEP}", "-S", f"now-{since_days}days", "-E", "now",
            "-o", "JobID,NodeList,AdminComment%4000,Comment%4000"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LiquidError(f"sacct: {exc}") from None
    if proc.returncode != 0:
        raise LiquidError(f"sacct failed: {proc.stderr.strip()[:300]}")
    return proc.stdout.splitlines()


def leaf_function():
    """`leaf_of(node)` from Slurm's topology, or None when Slurm has none (or cannot say)."""
    try:
        from slurm_liquid.slurm import connect
        topology = connect("auto", timeout_s=30).topology()
        if not topology.switches:
            return None

        def leaf_of(node: str) -> str:
            try:
                return topology.leaf_of(node)
            except Exception:  # noqa: BLE001 -- a node outside the topology is a leaf of its own
                return f"?{node}"
        return leaf_of
    except Exception:  # noqa: BLE001 -- no topology: the leaf figures are left out
        return None


def render(f: dict, since_days: int) -> str:
    lines = [f"slurm-liquid in the last {since_days} days: {f['jobs']} jobs with a record"]
    if f["shadowed"]:
        lines.append(f"placement: {f['shadowed']} GPU jobs shadowed; the daemon would have used the same nodes as "
                     f"Slurm for {f['same_nodes']}, kept {f['would_wait']} waiting that Slurm started")
        if f["mean_leaves_would"] is not None:
            lines.append(f"  leaf switches per job: daemon {f['mean_leaves_would']}, Slurm {f['mean_leaves_slurm']} "
                         f"(mean); jobs over more than one leaf: daemon {f['multi_leaf_would']}, Slurm "
                         f"{f['multi_leaf_slurm']}")
    else:
        lines.append("placement: no shadowed GPU job (is the daemon in shadow mode, and running?)")
    if f["measured"]:
        lines.append(f"estimate: {f['measured']} jobs measured by the agents; measured peak / estimate per GPU: "
                     f"median {f['median_peak_over_estimate']}; above the estimate: {f['under_estimated']} "
                     f"({100 * f['under_estimated_share']:.1f}%)")
    else:
        lines.append("estimate: no job with both an estimate and an agent's measurement")
    return "\n".join(lines)
