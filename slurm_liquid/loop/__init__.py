"""One scheduling loop for the simulator and the live daemon (Blox's round loop), under one set of rules.

Every round: observe (the back end's `ClusterView`, and the jobs' progress reports into the speed
room) -> admit (bound each elastic job by what its speed is known at) -> allocate (the policy's GPU
counts, held to the rules' change limits and restart guard) -> place (the placer, behind the back end's
shape rules and per-job node filters) -> apply (the back end starts, resizes or suspends). The two back
ends are `slurm_liquid.sim.backend.SimBackend` (the trace-driven simulator) and
`slurm_liquid.daemon.elastic.Adjuster` (the live cluster); `loop.rules.Rules` is the world both run in.
"""

from slurm_liquid.loop.core import Backend, Loop, Report, Round
from slurm_liquid.loop.place import PlaceStage, Shape, slurm_shapes
from slurm_liquid.loop.rules import RULES, Rules, SlotPolicy

__all__ = ["Backend", "Loop", "PlaceStage", "RULES", "Report", "Round", "Rules", "Shape", "SlotPolicy", "slurm_shapes"]
