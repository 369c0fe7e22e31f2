"""One scheduling loop for the simulator and the live daemon (Blox's round loop).

Every round: observe (the back end's `ClusterView`, and the jobs' progress reports into the speed
room) -> admit (bound each elastic job by what its speed is known at) -> allocate (the policy's GPU
counts) -> place (the placer, behind the back end's shape rules and per-job node filters) -> apply
(the back end starts, resizes or suspends). The two back ends are `slurm_liquid.sim.backend.SimBackend`
(the trace-driven simulator) and `slurm_liquid.daemon.elastic.SlurmBackend` (the live cluster).
"""

from slurm_liquid.loop.core import Backend, Loop, Report, Round
from slurm_liquid.loop.place import PlaceStage, Shape, slurm_shapes

__all__ = ["Backend", "Loop", "PlaceStage", "Report", "Round", "Shape", "slurm_shapes"]
