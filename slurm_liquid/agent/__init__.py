"""The node agent: measures what each Slurm job really uses on its node."""
