#!/usr/bin/env python3
"""An elastic PyTorch Lightning job for slurm-liquid (needs torch and lightning; GPUs if present).

    #!/bin/bash
    #SBATCH --gres=gpu:2 --ntasks-per-node=2 --requeue
    #LIQUID elastic=1:8 signal=USR1@60
    trap '' USR1
    srun python examples/elastic/lightning_train.py --steps 2000 --checkpoint-dir /shared/ckpt

It trains a small MLP on random data (no dataset), keeps the global batch the same on any GPU count, and
leaves progress reports, the checkpoint on request, the stop and the resume to
`slurm_liquid.integrations.lightning.LiquidCallback`. Lightning reads the srun tasks' Slurm variables
itself; on a machine without GPUs it runs on the CPU.
"""

from __future__ import annotations

import argparse
import os

from slurm_liquid.integrations.lightning import LiquidCallback, resume_checkpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch, kept on any GPU count")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--checkpoint-dir", default="/shared/ckpt", help="on a file system every node shares")
    args = parser.parse_args()

    callback = LiquidCallback(args.checkpoint_dir)   # first: it catches SIGUSR1
    import lightning as L
    import torch

    class MLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                           torch.nn.Linear(args.width, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    world = int(os.environ.get("SLURM_NTASKS", "1"))
    cuda = torch.cuda.is_available()
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64 * args.batch_size, args.width, generator=generator),
                                          torch.randn(64 * args.batch_size, 1, generator=generator))
    loader = torch.utils.data.DataLoader(data, batch_size=max(args.batch_size // world, 1), shuffle=True)
    trainer = L.Trainer(max_steps=args.steps, callbacks=[callback], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, accelerator="gpu" if cuda else "cpu",
                        devices=int(os.environ.get("SLURM_NTASKS_PER_NODE", "1")) if cuda else 1,
                        num_nodes=int(os.environ.get("SLURM_JOB_NUM_NODES", "1")) if cuda else 1)
    start = resume_checkpoint()
    if trainer.is_global_zero:
        print(f"lightning_train: job {os.environ.get('SLURM_JOB_ID')} on {trainer.world_size} process(es), "
              f"resuming from {start}", flush=True)
    trainer.fit(MLP(), loader, ckpt_path=start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
