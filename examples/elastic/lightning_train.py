#!/usr/bin/env python3
"""An elastic PyTorch Lightning job for slurm-liquid (needs torch and lightning; GPUs if present).

    #!/bin/bash
    #SBATCH --gres=gpu:1 --requeue
    #LIQUID model=resnet18 batch-size=24 elastic=1:8 signal=USR1@60 dataset=/shared/datasets/synthetic
    trap '' USR1
    srun --overcommit --ntasks-per-node=$SLURM_GPUS_ON_NODE --ntasks=$((SLURM_GPUS_ON_NODE * SLURM_JOB_NUM_NODES)) \
        python examples/elastic/lightning_train.py --steps 2000 --checkpoint-dir /shared/ckpt

It trains a small MLP on `images.npy`/`labels.npy` from `$LIQUID_DATA` (`--data`; `make_data.py`
writes them), or the same data made in memory, and leaves progress reports, the checkpoint on request,
the stop and the resume to `slurm_liquid.integrations.lightning.LiquidCallback`. Lightning reads the
srun tasks' Slurm variables itself (one process per GPU; without GPUs, one per CPU slot with gloo).

What keeps a resized run on the path of an unresized one: the batches come from a sampler of the
global step (the step's slice of a permutation seeded by the epoch, split over the ranks, unevenly when
the width does not divide the batch), started at the checkpoint's step; each rank's loss is its sum x
width / batch, so DDP's mean of the gradients is the global batch's mean; the learning rate is a
per-step schedule saved in the checkpoint with the optimizer; nothing random is drawn while training.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

from slurm_liquid import progress

# First, before the slow imports: the daemon may ask for a checkpoint (SIGUSR1) as soon as the job starts,
# and the signal's default action would kill the process.
progress.install()

from slurm_liquid.integrations.lightning import LiquidCallback, resume_checkpoint  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=24, help="global batch, the same on any width")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=os.environ.get("LIQUID_DATA"), help="default: $LIQUID_DATA")
    parser.add_argument("--checkpoint-dir", default="/shared/ckpt", help="on a file system every node shares")
    parser.add_argument("--float64", action="store_true", help="train in double precision (the tests do, see docs/elastic.md)")
    parser.add_argument("--log", help="append one JSON line per step and rank here (the tests read it)")
    parser.add_argument("--final", help="rank 0 saves the final parameters here (torch.save of the state dict)")
    args = parser.parse_args()

    callback = LiquidCallback(args.checkpoint_dir)   # first: it catches SIGUSR1
    # torch's rendezvous store uses libuv by default, which Debian's torch is built without; the plain
    # TCP store serves a few dozen ranks as well.
    os.environ.setdefault("USE_LIBUV", "0")
    import lightning as L
    import numpy as np
    import torch

    if args.data:
        images = np.load(os.path.join(args.data, "images.npy"), allow_pickle=False)
        labels = np.load(os.path.join(args.data, "labels.npy"), allow_pickle=False)
    else:  # the same data, made in memory
        from make_data import images as synthetic
        images, labels = synthetic(2400)
    images = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).flatten(1)
    labels = torch.from_numpy(labels.astype(np.int64))
    rank, world = int(os.environ.get("SLURM_PROCID", 0)), int(os.environ.get("SLURM_NTASKS", 1))

    class GlobalStepBatches(torch.utils.data.Sampler):
        """Endless: this rank's share of each global step's samples, from step `first` on. Endless, so
        that Lightning's resumed epoch counters never end it early; max_steps does."""

        def __init__(self, first: int) -> None:
            self.first = first

        def __iter__(self):
            per_epoch = len(labels) // args.batch_size
            step = self.first
            while True:
                epoch, k = divmod(step, per_epoch)
                order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(args.seed + epoch))
                yield torch.tensor_split(order[k * args.batch_size:(k + 1) * args.batch_size], world)[rank].tolist()
                step += 1

    class Indexed(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(labels)

        def __getitem__(self, index: int):
            return images[index], labels[index], index

    class MLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(images.shape[1], args.width), torch.nn.ReLU(),
                                           torch.nn.Linear(args.width, 10))

        def training_step(self, batch, batch_idx):
            x, y, samples = batch
            width = self.trainer.world_size
            if args.log:
                line = {"step": self.trainer.global_step + 1, "rank": self.global_rank, "world": width,
                        "lr": self.trainer.optimizers[0].param_groups[0]["lr"], "samples": samples.tolist(),
                        "job": os.environ.get("SLURM_JOB_ID"), "t": time.time()}
                fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:   # one write(2) per line on an O_APPEND file: ranks' lines never interleave
                    os.write(fd, (json.dumps(line) + "\n").encode())
                finally:
                    os.close(fd)
            return torch.nn.functional.cross_entropy(self.net(x), y, reduction="sum") * width / args.batch_size

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=args.lr, momentum=0.9)
            warmup = max(args.steps // 10, 1)
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: min((done + 1) / warmup, 0.5 * (
                1 + math.cos(math.pi * min(max(done - warmup, 0), args.steps) / max(args.steps - warmup, 1)))))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    start = resume_checkpoint()
    first = progress.resume().step if start else 0   # the callback reports the step with the checkpoint
    loader = torch.utils.data.DataLoader(Indexed(), batch_sampler=GlobalStepBatches(first))
    cuda = torch.cuda.is_available()
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    trainer = L.Trainer(max_steps=args.steps, callbacks=[callback], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
                        accelerator="gpu" if cuda else "cpu", devices=max(world // nodes, 1), num_nodes=nodes,
                        strategy="ddp" if world > 1 else "auto", precision="64-true" if args.float64 else None)
    # Built in float64 already: Lightning loads a checkpoint into the module before its precision plugin
    # converts it, and float32 parameters would round the saved float64 values.
    torch.set_default_dtype(torch.float64 if args.float64 else torch.float32)
    torch.manual_seed(args.seed)     # the same initial weights on every rank and every start
    model = MLP()
    if trainer.is_global_zero:
        print(f"lightning_train: job {os.environ.get('SLURM_JOB_ID')} on {trainer.world_size} process(es), "
              f"resuming from {start} at step {first}", flush=True)
    trainer.fit(model, loader, ckpt_path=start)
    if args.final and trainer.is_global_zero and trainer.global_step >= args.steps:
        torch.save(model.state_dict(), args.final)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
