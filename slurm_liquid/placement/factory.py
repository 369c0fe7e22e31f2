"""Placers by name, for the command line, the simulator and the daemon (one set of objects)."""

from __future__ import annotations

import importlib
from typing import Any

from slurm_liquid.placement.base import Placer
from slurm_liquid.topology import Topology

# name -> "module:class"; imported on use, so naming a placer costs nothing
PLACERS: dict[str, str] = {
    "liquid": "slurm_liquid.placement.liquid:LiquidBestFit",
    "ga": "slurm_liquid.placement.ga:GroupingGA",
    "slurm": "slurm_liquid.placement.baselines:SlurmBestFit",
    "first-fit": "slurm_liquid.placement.baselines:FirstFit",
    "random": "slurm_liquid.placement.baselines:RandomFit",
}


def make_placer(name: str, topology: Topology, **options: Any) -> Placer:
    """A placer by name (liquid, ga, slurm, first-fit, random) with its keyword options."""
    if name not in PLACERS:
        raise ValueError(f"unknown placer {name!r}; choose from {', '.join(PLACERS)}")
    module, cls = PLACERS[name].split(":")
    return getattr(importlib.import_module(module), cls)(topology, **options)
