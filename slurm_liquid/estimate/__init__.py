"""Resource estimation: what a DL job really needs (GPU memory, GPUs, CPUs, host memory, sharing).

Kept import-light for the submit path: no numpy, scikit-learn or torch at import time.
Entry point for other code: `slurm_liquid.estimate.api.estimate(spec, ...)`.
"""
