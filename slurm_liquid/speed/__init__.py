"""The speed room: each job's throughput measured from its own progress reports (see docs/elastic.md).

Public interface: `Observation`, `ThroughputParams`, `Prior`, `MeasuredSpeedModel`. This package
never imports the simulator or the daemon: the traces reach it only as the fitted prior table.
"""

from slurm_liquid.speed.model import MeasuredSpeedModel, Observation, check
from slurm_liquid.speed.params import ThroughputParams
from slurm_liquid.speed.prior import Prior, trace_app

__all__ = ["MeasuredSpeedModel", "Observation", "Prior", "ThroughputParams", "check", "trace_app"]
