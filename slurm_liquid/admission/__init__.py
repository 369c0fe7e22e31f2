"""Admission: what happens when a job is submitted (the `sbatch` wrapper and the cli_filter helper).

The Lua halves live in etc/slurm/: cli_filter.lua (in the user's sbatch, calls `submit-filter`) and
job_submit.lua (inside slurmctld: tags and holds opted-in jobs for the daemon, never calls anything).
"""
