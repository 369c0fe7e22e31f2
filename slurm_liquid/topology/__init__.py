"""Topology room: the switch tree of the cluster, from topology.conf or `scontrol show topology`."""

from slurm_liquid.topology.graph import FLAT_SWITCH, VIRTUAL_ROOT, Topology
from slurm_liquid.topology.parse import SwitchSpec, parse_switch_lines

__all__ = ["FLAT_SWITCH", "VIRTUAL_ROOT", "SwitchSpec", "Topology", "parse_switch_lines"]
