"""slurm-liquid: deep-learning aware scheduling for Slurm GPU clusters."""

__version__ = "0.1.0"
