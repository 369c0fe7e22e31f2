#!/usr/bin/env python3
"""An elastic Hugging Face Trainer job for slurm-liquid (needs torch and transformers; GPUs if present).

    #!/bin/bash
    #SBATCH --gres=gpu:2 --ntasks-per-node=2 --requeue
    #LIQUID model=gpt2 batch-size=64 elastic=1:8 signal=USR1@60
    trap '' USR1
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    srun python examples/elastic/hf_train.py --steps 2000 --batch-size 64 --output-dir /shared/hf-run

It trains a small randomly initialised GPT-2 on random tokens (no download, no dataset), keeps the global
batch the same on any GPU count, and leaves progress reports, the checkpoint on request, the stop and
the resume to `slurm_liquid.integrations.huggingface.LiquidCallback`. One process per GPU (srun tasks or
torchrun); on a machine without GPUs it runs on the CPU, and outside Slurm it simply trains.
"""

from __future__ import annotations

import argparse
import os

from slurm_liquid.integrations.huggingface import LiquidCallback, resume_checkpoint


def launcher_env() -> None:
    """srun starts one task per GPU: give torch.distributed the variables torchrun would set."""
    if "SLURM_PROCID" in os.environ and "RANK" not in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        os.environ.update(RANK=os.environ["SLURM_PROCID"], LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"),
                          WORLD_SIZE=os.environ["SLURM_NTASKS"])
        os.environ.setdefault("MASTER_PORT", "29500")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch, kept on any GPU count")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--save-steps", type=int, default=0, help="also checkpoint every N steps (0: only on request)")
    parser.add_argument("--output-dir", default="/shared/hf-run", help="on a file system every node shares")
    args = parser.parse_args()

    callback = LiquidCallback()   # first: it catches SIGUSR1, whose default action would kill the job
    launcher_env()

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    world = int(os.environ.get("WORLD_SIZE", "1"))
    vocab = 1024

    class RandomTokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return args.steps * args.batch_size

        def __getitem__(self, index: int) -> dict:
            ids = torch.randint(0, vocab, (args.seq_len,), generator=torch.Generator().manual_seed(index))
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab, n_positions=args.seq_len, n_embd=args.width, n_layer=args.layers,
                        n_head=max(args.width // 64, 1))
    model = GPT2LMHeadModel(config)
    cuda = torch.cuda.is_available()
    training = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=max(args.batch_size // world, 1),
        learning_rate=3e-4, logging_steps=20, report_to="none", use_cpu=not cuda,
        bf16=cuda and torch.cuda.is_bf16_supported(), ddp_find_unused_parameters=False,
        save_strategy="steps" if args.save_steps else "no", save_steps=args.save_steps or 500)
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(), callbacks=[callback])
    start = resume_checkpoint()
    if trainer.is_world_process_zero():
        print(f"hf_train: job {os.environ.get('SLURM_JOB_ID')} on {world} process(es), "
              f"{torch.cuda.device_count() if cuda else 0} GPU(s) visible, resuming from {start}", flush=True)
    trainer.train(resume_from_checkpoint=start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
