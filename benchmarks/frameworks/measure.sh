#!/bin/bash
# Step times of each framework example at 1..4 processes on one node, unresized, for speed.py.
#   docker run --rm -v "$PWD/examples:/ex:ro" -v "$PWD/benchmarks:/benchmarks:ro" -v /tmp/fw-bench:/out slurm-liquid:trixie bash /benchmarks/frameworks/measure.sh
# Runs inside a node image that has /opt/slurm-liquid-train (trixie, sid). Writes /out/<example>-<n>.log.
set -euo pipefail
P=/opt/slurm-liquid-train/bin/python; cd /ex/elastic; export OMP_NUM_THREADS=1 USE_LIBUV=0
[ -f /out/data/tokens.npy ] || $P make_data.py /out/data >/dev/null
for ex in ddp_train lightning_train hf_train; do
  for n in 1 2 3 4; do
    rm -f /out/$ex-$n.log
    extra="--checkpoint-dir /out/ck"; [ $ex = hf_train ] && extra="--output-dir /out/hf"
    for r in $(seq 0 $((n-1))); do
      SLURM_JOB_NAME=bench SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_LOCALID=$r SLURM_NODEID=0 SLURM_NODELIST=$(hostname) \
      SLURM_NTASKS_PER_NODE=$n SLURM_JOB_NUM_NODES=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29600 + n)) \
      $P $ex.py --steps ${STEPS:-150} --batch-size 60 --data /out/data $extra --log /out/$ex-$n.log >/dev/null 2>&1 &
    done
    wait
  done
done
