#!/bin/bash
# GPU ground truth: run on a machine with a CUDA GPU and a PyTorch (+torchvision, transformers)
# environment; one process per model so that NVML's per-process reading holds only that model.
#   PY=/path/to/python bash benchmarks/estimate/run_gpu_grid.sh   (~10 min on an H100/H200)
# Rows go to benchmarks/estimate/data/gpu_<name>.csv; bench.py picks up every data/*.csv.
set -uo pipefail
PY=${PY:-python3}
NAME=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0).lower().replace(' ', '-'))")
OUT=${OUT:-benchmarks/estimate/data/gpu_${NAME}.csv}
run() { PYTHONPATH=. timeout 300 "$PY" -m slurm_liquid estimate profile --device cuda --steps 3 --out "$OUT" "$@"; }
for m in resnet18 resnet50 resnet152 vgg16 mobilenet_v2 efficientnet_b0 densenet121 convnext_tiny vit_b_16; do
  run --models "$m" --batch-sizes 32,64,128,256 --precisions fp32,amp
done
for m in bert-base bert-large roberta-base gpt2 gpt2-medium t5-small t5-base; do
  run --models "$m" --batch-sizes 4,8,16,32 --precisions fp32,amp --seq-len 512
done
run --models gpt2 --batch-sizes 8,16 --precisions amp --seq-len 1024 --optimizer sgd
echo "wrote $OUT"
