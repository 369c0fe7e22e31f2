#!/usr/bin/env python3
"""An elastic Hugging Face Trainer job for slurm-liquid (needs torch and transformers; GPUs if present).

    #!/bin/bash
    #SBATCH --gres=gpu:1 --requeue
    #LIQUID model=gpt2 batch-size=60 elastic=1:6 signal=USR1@60 dataset=/shared/datasets/synthetic
    trap '' USR1
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    srun --overcommit --ntasks-per-node=$SLURM_GPUS_ON_NODE --ntasks=$((SLURM_GPUS_ON_NODE * SLURM_JOB_NUM_NODES)) \
        python examples/elastic/hf_train.py --steps 2000 --batch-size 60 --output-dir /shared/hf-run

It trains a small GPT-2 built from its config (no download) on `tokens.npy` from `$LIQUID_DATA`
(`--data`; `make_data.py` writes it), or the same tokens made in memory, and leaves progress reports, the
checkpoint on request, the stop and the resume to `slurm_liquid.integrations.huggingface.LiquidCallback`.
One process per GPU (srun tasks or torchrun); without GPUs, one per CPU slot with gloo.

The Trainer splits the global batch evenly over the processes: `--batch-size` must be a multiple of
every width the job may run at (60 is one of 1 to 6). Then the samples of each step, the learning
rate of each step (the schedule, optimizer and step are in the checkpoint) and so the model are those
of a run that was never resized: the Trainer's sampler draws one permutation per epoch from the seed,
each step takes the next global batch of it at any width, and the resumed Trainer skips the steps done.
The model has no dropout, so no random state matters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from slurm_liquid import progress

# First, before the slow imports: the daemon may ask for a checkpoint (SIGUSR1) as soon as the job starts,
# and the signal's default action would kill the process.
progress.install()

from slurm_liquid.integrations.huggingface import LiquidCallback, resume_checkpoint  # noqa: E402


def launcher_env() -> None:
    """srun starts one task per GPU: give torch.distributed the variables torchrun would set."""
    if "SLURM_PROCID" in os.environ and "RANK" not in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        os.environ.update(RANK=os.environ["SLURM_PROCID"], LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"),
                          WORLD_SIZE=os.environ["SLURM_NTASKS"])
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=60, help="global batch, kept on any width")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=os.environ.get("LIQUID_DATA"), help="default: $LIQUID_DATA")
    parser.add_argument("--output-dir", default="/shared/hf-run", help="on a file system every node shares")
    parser.add_argument("--float64", action="store_true", help="train in double precision (the tests do, see docs/elastic.md)")
    parser.add_argument("--log", help="append one JSON line per step and process here (the tests read it)")
    parser.add_argument("--final", help="the main process saves the final parameters here (torch.save)")
    args = parser.parse_args()

    callback = LiquidCallback()   # first: it catches SIGUSR1, whose default action would kill the job
    launcher_env()
    # torch's rendezvous store uses libuv by default, which Debian's torch is built without; the plain
    # TCP store serves a few dozen ranks as well.
    os.environ.setdefault("USE_LIBUV", "0")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.batch_size % world:
        print(f"hf_train: the global batch {args.batch_size} does not split evenly over {world} processes; "
              "pick a batch that every width of the job's elastic range divides", file=sys.stderr)
        return 2

    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    if args.data:
        tokens = np.load(os.path.join(args.data, "tokens.npy"), allow_pickle=False)
    else:  # the same tokens, made in memory
        from make_data import tokens as synthetic
        tokens = synthetic(2400)
    tokens = torch.from_numpy(tokens.astype(np.int64))

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(tokens)

        def __getitem__(self, index: int) -> dict:
            return {"input_ids": tokens[index], "labels": tokens[index], "index": index}

    class LoggedTrainer(Trainer):
        """The Trainer, noting each step's samples and learning rate per process (for the tests' log)."""

        def training_step(self, model, inputs, num_items_in_batch=None):
            samples = inputs.pop("index")
            if args.log:
                line = {"step": self.state.global_step + 1, "rank": self.args.process_index, "world": world,
                        "lr": self.lr_scheduler.get_last_lr()[0], "samples": samples.tolist(),
                        "job": os.environ.get("SLURM_JOB_ID"), "t": time.time()}
                fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:   # one write(2) per line on an O_APPEND file: processes' lines never interleave
                    os.write(fd, (json.dumps(line) + "\n").encode())
                finally:
                    os.close(fd)
            return super().training_step(model, inputs, num_items_in_batch)

    torch.set_default_dtype(torch.float64 if args.float64 else torch.float32)
    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=256, n_positions=tokens.shape[1], n_embd=args.width, n_layer=args.layers,
                        n_head=max(args.width // 8, 1), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).to(torch.get_default_dtype())
    cuda = torch.cuda.is_available()
    training = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size // world,
        learning_rate=args.lr, warmup_steps=max(args.steps // 10, 1), lr_scheduler_type="cosine", seed=args.seed,
        logging_steps=20, report_to="none", use_cpu=not cuda, remove_unused_columns=False,
        dataloader_drop_last=True, ddp_find_unused_parameters=False, save_strategy="no",
        # Named: on CPU accelerate prefers MPI where torch has it (Debian's does), which needs mpirun.
        ddp_backend=("nccl" if cuda else "gloo") if world > 1 else None)
    def causal_lm_loss_float64(outputs, labels, num_items_in_batch=None):
        """The Trainer's causal-LM loss without its upcast to float32 (which would round a float64 run)."""
        logits, target = outputs.logits[:, :-1], labels[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                 reduction="sum")
        return loss / (num_items_in_batch if num_items_in_batch is not None else target.numel())

    trainer = LoggedTrainer(model=model, args=training, train_dataset=Tokens(), callbacks=[callback],
                            compute_loss_func=causal_lm_loss_float64 if args.float64 else None)
    start = resume_checkpoint()
    if trainer.is_world_process_zero():
        print(f"hf_train: job {os.environ.get('SLURM_JOB_ID')} on {world} process(es), "
              f"{torch.cuda.device_count() if cuda else 0} GPU(s) visible, resuming from {start}", flush=True)
    trainer.train(resume_from_checkpoint=start)
    if args.final and trainer.is_world_process_zero() and trainer.state.global_step >= args.steps:
        torch.save(trainer.model.state_dict(), args.final)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
