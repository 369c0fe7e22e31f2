"""slurm-liquid progress reports and resizes for PyTorch Lightning (2.x; `lightning` or `pytorch_lightning`).

    from slurm_liquid.integrations.lightning import LiquidCallback, resume_checkpoint

    trainer = lightning.pytorch.Trainer(max_steps=10_000, callbacks=[LiquidCallback("/shared/ckpt")])
    trainer.fit(model, datamodule, ckpt_path=resume_checkpoint())

It reports the step (`trainer.global_step` of `max_steps`, else `estimated_stepping_batches`), the epoch
and the samples per second it measures itself (its own batch timestamps x the batch size x world size).
When the daemon asks for a checkpoint (SIGUSR1), every rank agrees at the next optimizer step
(`strategy.reduce_boolean_decision`), `trainer.save_checkpoint` writes `slurm-liquid-<job>-step<N>.ckpt`,
the callback reports it, sets `trainer.should_stop` and waits for the requeue; after it,
`resume_checkpoint()` names that file. (`min_steps`/`min_epochs` not yet reached keep Lightning
training past `should_stop`; the daemon then requeues the job when its grace ends.)
"""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError:
    try:
        from pytorch_lightning import Callback
    except ImportError as err:  # one message that says what to install
        raise ImportError("slurm_liquid.integrations.lightning needs PyTorch Lightning "
                          f"(pip install lightning, or pytorch_lightning): {err}") from err

from slurm_liquid.integrations._common import resume_checkpoint
from slurm_liquid.integrations._lightning_callback import callback_class

__all__ = ["LiquidCallback", "resume_checkpoint"]

LiquidCallback = callback_class(Callback)
