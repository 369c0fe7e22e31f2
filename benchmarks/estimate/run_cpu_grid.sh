#!/bin/bash
# CPU tensor-level ground truth (no GPU): two training steps per config, peak live tensor bytes
# (measure=tensor). Needs a venv with torch, torchvision, transformers (docs/estimate.md).
# Small inputs keep it to ~30 minutes on 2 shared cores (CPU bf16 autocast of transformers is
# too slow here, so they run in fp32 only). Appends to the CSV.
set -euo pipefail
PY=${PY:-/tmp/vtorch/bin/python}
OUT=${OUT:-benchmarks/estimate/data/cpu_tensor_peaks.csv}
run() { PYTHONPATH=. OMP_NUM_THREADS=2 nice "$PY" -m slurm_liquid estimate profile --device cpu --steps 2 --out "$OUT" "$@"; }
[ "${SKIP_FIRST:-0}" = 1 ] || run --models resnet18 --batch-sizes 4,16 --precisions fp32,amp --image-size 128
run --models bert-base,gpt2,t5-small --batch-sizes 4,16 --precisions fp32 --seq-len 64
run --models resnet50,mobilenet_v2,vgg16,densenet121 --batch-sizes 4,16 --precisions fp32,amp --image-size 96
run --models bert-base --batch-sizes 8 --precisions fp32 --seq-len 128 --optimizer sgd
