#!/bin/bash
# Every check that needs a real GPU, in one bounded run (a lent GPU machine is scarce: ~15 minutes
# a session, start-up included). Run from the repository root on the GPU machine:
#
#   mkdir -p .device/pylib && cp .venv/lib/python3*/site-packages/hostlist.py .device/pylib/   # on the build machine
#   OUT=/tmp/gpu-session bash benchmarks/device/gpu_session.sh                                  # on the GPU machine
#
# The machine's image has torch, transformers, peft, timm, lightning and nvidia-ml-py but not the
# project's other dependencies: the code these checks import needs only python-hostlist beside them
# (.device/pylib). In priority order, each part with its own time limit so that one hang costs only its
# part; everything lands under $OUT:
#   1. env.txt          what the machine has (GPU, driver, library versions)
#   2. gpu/...          the estimator against measured peaks: LoRA, eager vs SDPA, checkpointing,
#                       ViT-L, 8k-context inference (benchmarks/estimate/gpu_extras.py)
#   3. nvml_vs_torch.csv  the agent's NVML reader against torch and nvidia-smi (benchmarks/agent)
#   4. hf_resize.log, ddp_resize.log   the elastic examples across a checkpoint, requeue and resume
#                       on the GPU (examples/elastic/resize_locally.sh)
#   5. grid.csv         the profiling harness's grid, a subset of benchmarks/estimate/run_gpu_grid.sh
set -u
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/.device/pylib${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
began=$SECONDS
part() { echo "== $1 at $((SECONDS - began)) s" | tee -a "$OUT/parts.log"; }

part env
{
    date -u; nvidia-smi; "$PY" --version
    for m in torch torchvision transformers peft timm lightning pynvml hostlist numpy; do
        "$PY" -c "import $m; print('$m', getattr($m, '__version__', 'present'))" 2>&1 | tail -n 1
    done
} > "$OUT/env.txt" 2>&1

part extras
timeout 230 "$PY" benchmarks/estimate/gpu_extras.py --budget 200 --out-dir "$OUT/gpu" > "$OUT/extras.log" 2>&1
echo "extras rc=$?" >> "$OUT/parts.log"

part nvml
models=bert-base,gpt2
"$PY" -c "import torchvision" 2>/dev/null && models=resnet50,$models
timeout 110 "$PY" benchmarks/agent/nvml_vs_torch.py --models "$models" --batch-sizes 16 --precisions fp32,amp \
    --out "$OUT/nvml_vs_torch.csv" > "$OUT/nvml.log" 2>&1
echo "nvml rc=$?" >> "$OUT/parts.log"

part hf-resize
rm -rf /tmp/hf-run
PYTHON=$PY TIMEOUT_S=60 SIGNAL_AT=20 GPUS_BEFORE=1 GPUS_AFTER=1 SLURM_LIQUID_PROGRESS_DIR=$(mktemp -d) \
    timeout 100 bash examples/elastic/resize_locally.sh "$PY" examples/elastic/hf_train.py --steps 60 \
    --output-dir /tmp/hf-run > "$OUT/hf_resize.log" 2>&1
echo "hf-resize rc=$?" >> "$OUT/parts.log"

part ddp-resize
if "$PY" -c "import torchvision" 2>/dev/null; then
    SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 \
    PYTHON=$PY TIMEOUT_S=60 SIGNAL_AT=15 GPUS_BEFORE=1 GPUS_AFTER=1 SLURM_LIQUID_PROGRESS_DIR=$(mktemp -d) \
        timeout 100 bash examples/elastic/resize_locally.sh "$PY" examples/elastic/ddp_train.py --steps 40 \
        --batch-size 64 --checkpoint-dir /tmp/ddp-ckpt > "$OUT/ddp_resize.log" 2>&1
    echo "ddp-resize rc=$?" >> "$OUT/parts.log"
else
    echo "ddp-resize skipped: no torchvision on this machine" >> "$OUT/parts.log"
fi

part grid
left=$((500 - (SECONDS - began)))
if [ "$left" -gt 30 ]; then
    profile() { timeout "$1" "$PY" -m slurm_liquid estimate profile --device cuda --steps 3 --out "$OUT/grid.csv" "${@:2}"; }
    for m in resnet50 vit_b_16 mobilenet_v2; do
        left=$((500 - (SECONDS - began))); [ "$left" -gt 20 ] || break
        profile "$left" --models "$m" --batch-sizes 64,128 --precisions fp32,amp >> "$OUT/grid.log" 2>&1
    done
    for m in bert-base gpt2-medium t5-base; do
        left=$((500 - (SECONDS - began))); [ "$left" -gt 20 ] || break
        profile "$left" --models "$m" --batch-sizes 8,16 --precisions fp32,amp --seq-len 512 >> "$OUT/grid.log" 2>&1
    done
fi
part done
