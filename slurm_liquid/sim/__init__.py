"""The trace-driven cluster simulator, calibrated against the Pollux artifact (see docs/simulator.md).

Rooms: `apps` (measured application models), `workload` (loaders), `job` (one job's state),
`engine` (clock, cluster, step API), `oracle` (exact speed model), `runner` (many runs),
`plot` (figures), `cli` (`slurm-liquid simulate`).
"""
