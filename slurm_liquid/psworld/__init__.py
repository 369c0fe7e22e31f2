"""The parameter-server world of the DL2 paper's own simulator (pengyanghua/DL2), as a replica.

Below both `slurm_liquid.policy` and `slurm_liquid.sim`: the simulator's replica workloads
(`slurm_liquid.sim.paper`) and DL2's PS/worker action space (`slurm_liquid.policy.dl2.psworker`)
both stand on it, and it imports neither. Rooms: `world` (job types, speed table, settings, the
trace generator, speed steps), `slot` (one 20-minute slot: counts, the two placements, the
bundle round), `run` (a trace played slot after slot under one policy).
"""
