#!/usr/bin/env python3
"""Write the small synthetic data set the elastic examples train on (numpy only; nothing downloaded).

    python make_data.py /shared/datasets/synthetic

`images.npy` (float32, N x 3 x 8 x 8) and `labels.npy` (int64, N) for ddp_train.py and
lightning_train.py: ten classes whose images differ in their mean, so the loss falls; `tokens.npy`
(int32, M x 8) for hf_train.py: sequences of a random walk over 256 tokens, so a language model has
something to learn. The same seed writes the same files; a job names the folder with `#LIQUID
dataset=` and reads it from `$LIQUID_DATA` (its staged local copy, or the shared path).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

CLASSES = 10
VOCAB = 256


def images(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, samples).astype(np.int64)
    data = rng.standard_normal((samples, 3, 8, 8), dtype=np.float32) + labels[:, None, None, None] * 0.1
    return data.astype(np.float32), labels


def tokens(samples: int, length: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    walk = np.cumsum(rng.integers(-3, 4, (samples, length)), axis=1) + rng.integers(0, VOCAB, (samples, 1))
    return (walk % VOCAB).astype(np.int32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--images", type=int, default=2400, help="image samples (a multiple of the batch)")
    parser.add_argument("--sequences", type=int, default=2400, help="token sequences (a multiple of the batch)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.directory, exist_ok=True)
    data, labels = images(args.images, args.seed)
    np.save(os.path.join(args.directory, "images.npy"), data)
    np.save(os.path.join(args.directory, "labels.npy"), labels)
    np.save(os.path.join(args.directory, "tokens.npy"), tokens(args.sequences, seed=args.seed))
    print(f"make_data: {args.images} images, {args.sequences} token sequences in {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
