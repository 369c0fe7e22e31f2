#!/bin/bash
# CPU tensor-level ground truth (no GPU): two training steps per config, peak live tensor bytes
# (measure=tensor). Needs a venv with torch, torchvision, transformers (docs/estimate.md).
# Small inputs keep it to ~30 minutes on 2 shared cores (CPU bf16 autocast of transformers is
# too slow here, so they run in fp32 only). Appends to the CSV. PART=1 runs the first set only,
# PART=2 the second (more models and optimizers, ~40 minutes), default both.
set -euo pipefail
PY=${PY:-/tmp/vtorch/bin/python}
OUT=${OUT:-benchmarks/estimate/data/cpu_tensor_peaks.csv}
run() { PYTHONPATH=. OMP_NUM_THREADS=2 nice "$PY" -m slurm_liquid estimate profile --device cpu --steps 2 --out "$OUT" "$@"; }
PART=${PART:-all}
if [ "$PART" != 2 ]; then
run --models resnet18 --batch-sizes 4,16 --precisions fp32,amp --image-size 128
run --models bert-base,gpt2,t5-small --batch-sizes 4,16 --precisions fp32 --seq-len 64
run --models resnet50,mobilenet_v2,vgg16,densenet121 --batch-sizes 4,16 --precisions fp32,amp --image-size 96
run --models bert-base --batch-sizes 8 --precisions fp32 --seq-len 128 --optimizer sgd
fi
if [ "$PART" != 1 ]; then
run --models resnet101,efficientnet_b0,mobilenet_v3_large,convnext_tiny,vgg11 --batch-sizes 4,16 --precisions fp32,amp --image-size 96
run --models vit_b_16 --batch-sizes 2,8 --precisions fp32
run --models vit_b_16 --batch-sizes 2 --precisions amp   # bf16 ViT at batch 8: > 20 min here
run --models roberta-base,gpt2-medium,xlnet-base,t5-base --batch-sizes 4,16 --precisions fp32 --seq-len 64
run --models resnet50 --batch-sizes 4,16 --precisions fp32 --image-size 96 --optimizer sgd-momentum
run --models densenet121 --batch-sizes 4,16 --precisions fp32 --image-size 96 --optimizer rmsprop
run --models gpt2 --batch-sizes 4,16 --precisions fp32 --seq-len 64 --optimizer adafactor
run --models t5-small --batch-sizes 4,16 --precisions fp32 --seq-len 64 --optimizer sgd
fi
