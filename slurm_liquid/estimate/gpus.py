"""GPU type table (data/gpus.json + a site file's `gpus`) with forgiving names.

`h100`, the Slurm GRES type, `a100-40gb`, `a100_40g`, `A100 40GB` and NVML's `NVIDIA A100-SXM4-40GB`
all find a type. A name that gives the model but not the memory (`a100`, `v100`) finds the smallest
variant, so that a job sized for it fits every card of that model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from slurm_liquid.errors import UsageError
from slurm_liquid.estimate.catalog import _data, site_section
from slurm_liquid.estimate.prior import CONTEXT_MIB

_NOISE = {"nvidia", "tesla", "geforce", "quadro", "sxm", "sxm2", "sxm4", "sxm5", "pcie", "hbm3",
          "hbm2", "hbm2e", "nvl", "smx", "amd", "instinct", "radeon", "gpu", "gres"}


@dataclass(frozen=True)
class GpuType:
    name: str
    model: str
    mem_gb: float
    mem_mib: int
    link_gbs: float
    aliases: tuple[str, ...] = ()

    @property
    def gres_type(self) -> str:
        return self.model


def _key(text: str) -> tuple[str, float | None]:
    """(model, memory in GB or None) from any spelling."""
    words = re.findall(r"[a-z]+\d*[a-z]*|\d+(?:\.\d+)?[a-z]*", text.lower().replace("_", " "))
    mem: float | None = None
    model = []
    for word in words:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(gb|g|gib)", word)
        if m:
            mem = float(m.group(1))
        elif word == "nvl":
            mem = mem or 94.0
        elif word not in _NOISE:
            model.append(word)
    joined = "".join(model)
    return joined.replace("rtx", "") if joined.startswith("rtx") and joined != "rtx" else joined, mem


@dataclass
class GpuTable:
    types: dict[str, GpuType]
    default: str
    inter_node_gbs: float
    gpus_per_node: int
    headroom: float
    cpus_per_node: int = 0         # 0 = unknown: CPUs and host memory per GPU are not capped
    mem_mib_per_node: int = 0
    nodes: int = 0                 # GPU nodes of the cluster, 0 = unknown (submission never grows a job past it)
    shards_per_gpu: int = 16       # gres.conf `Name=shard Count=` of a node divided by its GPUs
    # CUDA context + library handles per GPU process: ~800 MiB with lazy module loading (CUDA >=
    # 11.7 default), 1.3-2 GiB without it (older CUDA, CUDA_MODULE_LOADING=EAGER)
    context_mib: float = CONTEXT_MIB

    def lookup(self, name: str) -> GpuType:
        model, mem = _key(name)
        aliases = {}
        for t in self.types.values():
            for alias in (t.name, *t.aliases):
                aliases.setdefault(_key(alias), t)
        if (model, mem) in aliases:
            return aliases[(model, mem)]
        same = [t for t in self.types.values() if _key(t.model)[0] == model]
        if same:
            if mem is None:
                return min(same, key=lambda t: t.mem_mib)
            return min(same, key=lambda t: (abs(t.mem_gb - mem), t.mem_mib))
        if (model, None) in aliases:
            return aliases[(model, None)]
        known = sorted(self.types)
        import difflib  # only for the error message

        close = difflib.get_close_matches(name.lower(), known + [t.model for t in self.types.values()], n=4)
        hint = f"; close matches: {', '.join(dict.fromkeys(close))}" if close else f"; known: {', '.join(known)}"
        raise UsageError(f"gpu-type: unknown GPU type {name!r}{hint}")


def _type(name: str, data: Mapping[str, Any], where: str) -> GpuType:
    try:
        aliases = data.get("aliases", ())
        if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) for a in aliases):
            raise ValueError("aliases must be a list of names")
        mem_mib = _positive(data["mem_mib"], "mem_mib")
        return GpuType(name=name, model=str(data.get("model", _key(name)[0])),
                       mem_gb=_positive(data.get("mem_gb", mem_mib / 1024), "mem_gb"),
                       mem_mib=int(mem_mib), link_gbs=_positive(data.get("link_gbs", 16), "link_gbs"),
                       aliases=tuple(aliases))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise UsageError(f"{where}: gpus.{name}: needs mem_mib (number): {exc}") from None


def _positive(value: Any, what: str) -> float:
    """A finite positive number of a site file (numbers written as strings are taken too)."""
    try:
        number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else math.nan
    except (OverflowError, ValueError):  # a 400-digit integer, a word
        number = math.nan
    if not 0 < number < 1e15:  # also NaN
        raise ValueError(f"{what} must be a positive number, not {str(value)[:40]!r}")
    return number


@lru_cache(maxsize=8)
def load_gpu_table(site: str | None = None) -> GpuTable:
    doc = _data("gpus.json")
    types = {n: _type(n, d, "gpus.json") for n, d in doc["gpus"].items()}
    extra = site_section(site, "gpus")
    for name, data in extra.items():
        if name.startswith("_") or not isinstance(data, Mapping):
            continue
        types[name] = _type(name, data, f"site file {site}")
    defaults = site_section(site, "defaults")
    try:
        return GpuTable(types=types, default=str(defaults.get("gpu_type", doc["default"])),
                        inter_node_gbs=_positive(defaults.get("inter_node_gbs", doc["inter_node_gbs"]),
                                                 "inter_node_gbs"),
                        gpus_per_node=int(_positive(defaults.get("gpus_per_node", doc["gpus_per_node"]),
                                                    "gpus_per_node")),
                        headroom=_fraction(defaults.get("headroom", doc["headroom"]), "headroom"),
                        cpus_per_node=int(_count(defaults.get("cpus_per_node", 0), "cpus_per_node")),
                        mem_mib_per_node=int(_count(defaults.get("mem_mib_per_node", 0), "mem_mib_per_node")),
                        nodes=int(_count(defaults.get("nodes", 0), "nodes")),
                        shards_per_gpu=int(_positive(defaults.get("shards_per_gpu", 16), "shards_per_gpu")),
                        context_mib=_context(defaults.get("context_mib", CONTEXT_MIB), site))
    except ValueError as exc:
        raise UsageError(f"site file {site}: defaults.{exc}") from None


def _fraction(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{what} must be a fraction in [0, 1), not {str(value)[:40]!r}")
    return float(value)


def _count(value: Any, what: str) -> float:
    """0 (unknown) or a positive number."""
    return 0.0 if value == 0 and not isinstance(value, bool) else _positive(value, what)


def _context(value: Any, site: str | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 16384:
        raise UsageError(f"site file {site}: defaults.context_mib must be MiB in 0..16384, not {value!r}")
    return float(value)
