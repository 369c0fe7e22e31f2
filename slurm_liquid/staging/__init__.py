"""Pre-scheduling data transmission (Liquid's third mechanism): a job's dataset on its nodes' local disks
before it starts.

    #LIQUID dataset=/shared/imagenet stage=copy      (the job's claim, in its Comment record)
    daemon: a job waiting for GPUs -> predicted nodes -> `liquid-stage/1 nodes=...` in its AdminComment
    agent on each node: jobs placed, running or predicted here -> stage as the job's user into
        [staging] dir (quota, LRU eviction, bandwidth cap) -> /run/slurm-liquid-agent/staged/<job>
    TaskProlog (etc/slurm/liquid-task-prolog): export LIQUID_DATA=<local copy> when complete and
        verified, else the shared path; the job never waits
    record: `staged=gpu01:1.2G:14s:+40s` (bytes, copy time, ready before start) or `err=dataset:...`

Modules: codec (every string this feature writes), worker (runs as the job's user), store (the node's
staging area, root side), agent (the agent's staging thread), predict (the daemon's side).
"""
