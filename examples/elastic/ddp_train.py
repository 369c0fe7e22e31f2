#!/usr/bin/env python3
"""An elastic PyTorch DDP training job for slurm-liquid: one process per GPU, or per CPU slot on a
machine without GPUs (gloo on CPU, nccl on CUDA). Needs torch only.

    #!/bin/bash
    #SBATCH --gres=gpu:1 --requeue
    #LIQUID model=resnet18 batch-size=24 elastic=1:8 signal=USR1@60 dataset=/shared/datasets/synthetic
    trap '' USR1
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    srun --overcommit --ntasks-per-node=$SLURM_GPUS_ON_NODE --ntasks=$((SLURM_GPUS_ON_NODE * SLURM_JOB_NUM_NODES)) \
        python examples/elastic/ddp_train.py --steps 2000 --batch-size 24 --checkpoint-dir /shared/ckpt

The srun line starts one task per GPU the job holds now: after a resize, the same script starts as many
as the new allocation has. It trains a small ResNet (GroupNorm, so that no statistic depends on how the
batch is split) on 8x8 `images.npy`/`labels.npy` from `$LIQUID_DATA` (`--data`; `make_data.py` writes them),
or on the same synthetic data made in memory when there is none.

What stays the same on any width, so that a resized run trains the model an unresized one would:
- the global batch: the samples of step s are the s-th slice of a permutation seeded by the epoch,
  split over the ranks (unevenly when the width does not divide it), and each rank's loss is its sum
  x width / batch, so DDP's mean of the gradients is the mean over the global batch;
- the learning rate: a LambdaLR schedule of the step, saved and restored with the optimizer;
- nothing random is drawn while training (no dropout, no augmentation), so no RNG state matters.
On the daemon's SIGUSR1 every rank agrees at the next step (all-reduce of the flag), rank 0 saves
model, optimizer, schedule and step, reports the checkpoint and every rank waits for the requeue.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import time
from typing import Callable

from slurm_liquid import progress

# First, before the slow imports: the daemon may ask for a checkpoint (SIGUSR1) as soon as the job starts,
# and the signal's default action would kill the process.
progress.install()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from slurm_liquid.integrations._common import wait_for_requeue  # noqa: E402

CLASSES = 10


def load_data(directory: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    if directory:
        images = np.load(os.path.join(directory, "images.npy"), allow_pickle=False)
        labels = np.load(os.path.join(directory, "labels.npy"), allow_pickle=False)
    else:  # the same data, made in memory
        from make_data import images as synthetic
        images, labels = synthetic(2400)
    return torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)), torch.from_numpy(labels.astype(np.int64))


def log_line(fd: int | None, **fields: object) -> None:
    """One JSON line in one write(2) on an O_APPEND file: lines of ranks sharing the file never interleave."""
    if fd is not None:
        os.write(fd, (json.dumps(fields) + "\n").encode())


class Block(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False), torch.nn.GroupNorm(4, channels),
            torch.nn.ReLU(), torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            torch.nn.GroupNorm(4, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


def small_resnet(width: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1, bias=False), torch.nn.GroupNorm(4, width), torch.nn.ReLU(),
        Block(width), Block(width), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(width, CLASSES))


def step_samples(step: int, batch: int, samples: int, seed: int) -> torch.Tensor:
    """The sample indices of global step `step` (1-based), whatever the width: the step's slice of a
    permutation drawn once per epoch."""
    per_epoch = samples // batch
    epoch, k = divmod(step - 1, per_epoch)
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(seed + epoch))
    return order[k * batch:(k + 1) * batch]


def schedule(total: int, warmup: int) -> Callable[[int], float]:
    def factor(done: int) -> float:   # LambdaLR calls it with the number of steps taken
        if done < warmup:
            return (done + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(done - warmup, total - warmup) / max(total - warmup, 1)))
    return factor


def master() -> tuple[str, int]:
    """Rank 0's address: $MASTER_ADDR (the batch script sets it), else this host; the port from the job id
    so that two jobs on one node do not collide."""
    job = progress.current_job_id() or 0
    return os.environ.get("MASTER_ADDR") or socket.gethostname(), int(os.environ.get("MASTER_PORT", 20000 + job % 20000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=24, help="global batch, the same on any width")
    parser.add_argument("--width", type=int, default=8, help="channels of the small ResNet")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--warmup", type=int, default=10, help="steps of linear warm-up before the cosine decay")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=os.environ.get("LIQUID_DATA"), help="default: $LIQUID_DATA")
    parser.add_argument("--checkpoint-dir", default="/shared/ckpt", help="on a file system every node shares")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="also checkpoint every N steps, for failures (0: only when the daemon asks)")
    parser.add_argument("--float64", action="store_true", help="train in double precision (the tests do, see docs/elastic.md)")
    parser.add_argument("--log", help="append one JSON line per step and rank here (the tests read it)")
    parser.add_argument("--final", help="rank 0 saves the final parameters here (torch.save of the state dict)")
    args = parser.parse_args()

    # torch's rendezvous store uses libuv by default, which Debian's torch is built without; the plain
    # TCP store serves a few dozen ranks as well.
    os.environ.setdefault("USE_LIBUV", "0")
    start = progress.resume()
    rank, world = int(os.environ.get("SLURM_PROCID", 0)), int(os.environ.get("SLURM_NTASKS", 1))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("SLURM_LOCALID", 0)))
    device = torch.device("cuda" if cuda else "cpu")
    addr, port = master()
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                            init_method=f"tcp://{addr}:{port}")
    torch.set_default_dtype(torch.float64 if args.float64 else torch.float32)
    torch.manual_seed(args.seed)            # the same initial weights on every rank and every start
    model = small_resnet(args.width).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(args.steps, args.warmup))
    step = 0
    if start.checkpoint and os.path.exists(start.checkpoint):
        state = torch.load(start.checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = int(state["step"])
    images, labels = load_data(args.data)
    log = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if args.log else None
    if rank == 0:
        print(f"ddp_train: job {os.environ.get('SLURM_JOB_ID')} on {world} rank(s) ({device.type}), "
              f"resuming at step {step}", flush=True)

    while step < args.steps:
        began = time.monotonic()
        mine = torch.tensor_split(step_samples(step + 1, args.batch_size, len(labels), args.seed), world)[rank]
        lr = scheduler.get_last_lr()[0]
        loss = torch.nn.functional.cross_entropy(ddp(images[mine].to(device, torch.get_default_dtype())), labels[mine].to(device),
                                                 reduction="sum") * world / args.batch_size
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        log_line(log, step=step, rank=rank, world=world, lr=lr, samples=mine.tolist(), loss=loss.item(),
                 job=progress.current_job_id(), t=time.time())
        # The signal may reach the ranks at different steps: agree on the largest flag.
        flag = torch.tensor([int(progress.checkpoint_requested())], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        requested = bool(flag.item()) and step < args.steps
        if requested or (args.checkpoint_every and step % args.checkpoint_every == 0 and step < args.steps):
            if requested:
                progress.clear()
            if rank == 0:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                path = os.path.join(args.checkpoint_dir, f"{os.environ.get('SLURM_JOB_ID', 'local')}.pt")
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(), "step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)   # a requeue in the middle keeps the previous checkpoint
                progress.report(step, args.steps, checkpoint=path)
            dist.barrier()
            if requested:
                # Ending now would end the job instead of resizing it: wait for the requeue's SIGTERM; if
                # none comes (outside Slurm at once), train on.
                wait_for_requeue()
            continue
        if rank == 0:
            if cuda:
                torch.cuda.synchronize()
            progress.report(step, args.steps, samples_per_s=args.batch_size / (time.monotonic() - began))
    if step >= args.steps and rank == 0 and args.final:
        torch.save(model.state_dict(), args.final)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
