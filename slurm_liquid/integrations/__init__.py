"""Progress reporting for the training libraries people use: slurm-liquid's progress API
(`slurm_liquid.progress`) as a Hugging Face Trainer callback and a PyTorch Lightning callback.

    from slurm_liquid.integrations.huggingface import LiquidCallback, resume_checkpoint
    from slurm_liquid.integrations.lightning import LiquidCallback, resume_checkpoint

Each submodule imports its library (and so torch) when it is imported; this package itself imports
neither, so `import slurm_liquid.integrations` is free and nothing at submission time ever pulls in
torch. A submodule whose library is missing raises one ImportError that names it.
"""

from slurm_liquid.integrations._common import resume_checkpoint

__all__ = ["resume_checkpoint"]
