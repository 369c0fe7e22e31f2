#!/usr/bin/env python3
"""An elastic PyTorch DDP training job for slurm-liquid (real GPUs; needs torch).

    #!/bin/bash
    #SBATCH --gres=gpu:2 --ntasks-per-node=2 --requeue
    #LIQUID model=resnet50 batch-size=256 elastic=1:8 signal=USR1@60
    trap '' USR1
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    srun python examples/elastic/ddp_train.py --steps 2000 --batch-size 256 --checkpoint-dir /shared/ckpt

It trains torchvision's ResNet-50 on synthetic images (so it needs no dataset), keeps the global batch
the same on any GPU count, checkpoints when the daemon asks (SIGUSR1, agreed across ranks), reports
progress to the daemon, and resumes from its checkpoint after every requeue, on whatever GPUs it gets.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torchvision

from slurm_liquid import progress


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch, kept on any GPU count")
    parser.add_argument("--checkpoint-dir", default="/shared/ckpt")
    args = parser.parse_args()

    progress.install()                      # before anything slow: SIGUSR1 would otherwise kill the job
    start = progress.resume()
    dist.init_process_group("nccl", rank=int(os.environ["SLURM_PROCID"]), world_size=int(os.environ["SLURM_NTASKS"]),
                            init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ.get('MASTER_PORT', '29500')}")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["SLURM_LOCALID"])
    torch.cuda.set_device(local)
    model = torch.nn.parallel.DistributedDataParallel(torchvision.models.resnet50().cuda(), device_ids=[local])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = 0
    if start.checkpoint and os.path.exists(start.checkpoint):
        state = torch.load(start.checkpoint, map_location="cuda", weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
    per_gpu = max(args.batch_size // world, 1)
    images = torch.randn(per_gpu, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (per_gpu,), device="cuda")
    if rank == 0:
        print(f"ddp_train: job {os.environ.get('SLURM_JOB_ID')} on {world} GPUs, resuming at step {step}", flush=True)

    while step < args.steps:
        began = time.monotonic()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        # The signal may reach the ranks at different steps: agree on the largest flag.
        flag = torch.tensor([int(progress.checkpoint_requested())], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            progress.clear()
            if rank == 0:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                path = os.path.join(args.checkpoint_dir, f"{os.environ['SLURM_JOB_ID']}.pt")
                torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                           path + ".tmp")
                os.replace(path + ".tmp", path)   # a requeue in the middle keeps the previous checkpoint
                progress.report(step, args.steps, checkpoint=path)
            dist.barrier()
        elif rank == 0:
            torch.cuda.synchronize()
            progress.report(step, args.steps, samples_per_s=args.batch_size / (time.monotonic() - began))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
