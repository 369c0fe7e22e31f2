#!/bin/sh
# Reproduce the shipped DL2 policies, the ablations and the report (run from the repository root,
# in the background: nohup nice sh benchmarks/dl2/train_all.sh > benchmarks/dl2/runs/train_all.log 2>&1 &).
# RL runs checkpoint every 10 episodes and resume with --resume. Training workloads are Philly samples
# drawn like the Pollux artifact's (other seeds), 160 jobs each, run to their end.
set -e
R=benchmarks/dl2/runs
EP=${EPISODES:-80}
RL="--resume"  # the defaults: --lr 3e-5 --entropy 0.001 --updates 16 (1e-4 / 0.01 collapses after ~20 episodes, notes.md)
mkdir -p $R
# 1. supervised warm-ups, 64-row window: on srtf (shortest estimated remaining time first on the oracle speed
# model, learnt in its own order; one per restart penalty, since the states a penalty leads to differ), and on
# DRF (the paper's teacher, kept for comparison and the batch-scaling runs below)
for P in 30 150; do
  slurm-liquid policy train --supervised --teacher srtf --restart-penalty $P --out $R/srtf-warm-p$P.npz \
    --warmup-workloads 8 --warmup-epochs 6 --curves benchmarks/dl2/srtf-warm-p$P
done
slurm-liquid policy train --supervised --out $R/warm.npz --warmup-workloads 8 --warmup-epochs 3 --curves benchmarks/dl2/dl2
# 1b. the same srtf warm-ups followed by 2 DAgger rounds (srtf labels the states the student itself reaches, on
# Philly workloads at loads 1, 1.5 and 2); the 30 s one is the shipped 30 s file (the 150 s warm-up alone thrashes restarts
# at load 2; at 30 s DAgger is better at loads 1.5 and 2 of the held-out samples)
for P in 30 150; do
  slurm-liquid policy train --supervised --teacher srtf --dagger 2 --restart-penalty $P --out $R/dagger-p$P.npz \
    --warmup-workloads 8 --warmup-epochs 6
done
# 1c. the same with the restart-aware teacher (srtf-restart: a waiting job ranks 8 restart penalties later, a
# running job keeps its GPUs unless a change saves more than 8 penalties); candidates (notes.md)
for P in 30 150; do
  slurm-liquid policy train --supervised --teacher srtf-restart --dagger 2 --restart-penalty $P \
    --out $R/dagger-restart-p$P.npz --warmup-workloads 8 --warmup-epochs 6 --curves benchmarks/dl2/srtf-restart-p$P
done
# 1d. the 150 s candidate fine-tuned on the same teacher with jobs that scale their batch (warm-up and DAgger
# again from it): the shipped 150 s file (alone, 1c's stalls on overloaded batch-scaling samples)
slurm-liquid policy train --supervised --teacher srtf-restart --init $R/dagger-restart-p150.npz --dagger 2 \
  --batch-scaling --restart-penalty 150 --warmup-workloads 6 --warmup-epochs 3 --out $R/dagger-restart-bs-p150.npz
# 1e. the completion-rate teacher (most completions per second, restart-priced like srtf-restart; its price of each
# job's next step is the state's RATE column): warm-up and 2 DAgger rounds at fixed batch, then the same again from
# that file with jobs that scale their batch. The second 150 s file is shipped (trained/dl2-p150.npz), chosen on the
# held-out samples below (held-out-rate-*.json); the 30 s one is not (its margin of 8 penalties never grows the live
# cluster's short jobs: notes.md)
for P in 30 150; do
  slurm-liquid policy train --supervised --teacher completion-rate --dagger 2 --restart-penalty $P \
    --warmup-workloads 8 --warmup-epochs 6 --out $R/rate-p$P.npz
  slurm-liquid policy train --supervised --teacher completion-rate --init $R/rate-p$P.npz --dagger 2 --batch-scaling \
    --restart-penalty $P --warmup-workloads 6 --warmup-epochs 3 --out $R/rate-bs-p$P.npz
done
# 1f. the same at 30 s with the teacher's margin at one restart penalty (what a change costs): the second file is the
# shipped 30 s file (trained/dl2-p30.npz); the margin's cost on the oracle: restart_margins.py --teacher completion-rate
slurm-liquid policy train --supervised --teacher completion-rate --teacher-margin 1 --dagger 2 --restart-penalty 30 \
  --warmup-workloads 8 --warmup-epochs 6 --out $R/rate-m1-p30.npz
slurm-liquid policy train --supervised --teacher completion-rate --teacher-margin 1 --init $R/rate-m1-p30.npz --dagger 2 \
  --batch-scaling --restart-penalty 30 --warmup-workloads 6 --warmup-epochs 3 --out $R/rate-m1-bs-p30.npz
python benchmarks/dl2/restart_margins.py --teacher completion-rate --penalties 30 --margins 1:1,2:2,4:4,8:8 \
  > $R/margins-rate-p30.log
# 2. actor-critic RL from each srtf warm-up (keeps the best validated weights, the warm start included)
slurm-liquid policy train --rl --init $R/srtf-warm-p30.npz --episodes $EP $RL --restart-penalty 30 --out $R/rl-p30.npz --curves benchmarks/dl2/rl-p30 &
slurm-liquid policy train --rl --init $R/srtf-warm-p150.npz --episodes $EP $RL --restart-penalty 150 --out $R/rl-p150.npz --curves benchmarks/dl2/rl-p150
wait
# 3. the shipping decision: new policies, the warm-ups and the shipped files on 8 held-out Philly samples.
# The shipped files (slurm_liquid/policy/dl2/trained/) are replaced by hand, and only by the best of these;
# the 8 Pollux workloads never choose (they are the test set).
for P in 30 150; do
  python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --reference --baselines drf,tiresias,optimus --out $R/held-out-p$P.json \
    dl2=$R/rl-p$P.npz warm-up=$R/srtf-warm-p$P.npz drf-warm-up=$R/warm.npz shipped=slurm_liquid/policy/dl2/trained/dl2-p$P.npz
  python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --baselines "" --out $R/held-out-dagger-p$P.json dagger=$R/dagger-p$P.npz
  # the same samples' seeds drawn at loads 1.5 and 2 (the DAgger files were chosen on all three loads)
  python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --loads 1.5,2 --baselines drf --out $R/held-out-loads-p$P.json \
    warm-up=$R/srtf-warm-p$P.npz dagger=$R/dagger-p$P.npz
  # the restart-aware DAgger file on loads 1, 1.5 and 2, beside the srtf DAgger file's runs above
  python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --loads 1,1.5,2 --baselines drf,tiresias \
    --out $R/held-out-restart-p$P.json new=$R/dagger-restart-p$P.npz
  python benchmarks/dl2/generalise.py --penalties $P --no-bound --policy-file $R/dagger-restart-p$P.npz \
    --out $R/restart-generalise-p$P.json
  if [ $P = 150 ]; then  # the fine-tuned file, fixed batch and batch scaling, beside 1c's and the shipped one
    python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --loads 1,1.5,2 --baselines drf,tiresias \
      --out $R/held-out-restart-bs-p$P.json bs=$R/dagger-restart-bs-p$P.npz cand=$R/dagger-restart-p$P.npz
    python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --loads 1,1.5,2 --batch-scaling --baselines drf,tiresias \
      --out $R/held-out-restart-bs-scaling-p$P.json bs=$R/dagger-restart-bs-p$P.npz cand=$R/dagger-restart-p$P.npz \
      shipped=slurm_liquid/policy/dl2/trained/dl2-p$P.npz
  fi
  # the completion-rate files (1e) on the same samples, both batch modes, beside their teacher on the oracle
  python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --loads 1,1.5,2 --baselines drf,completion-rate \
    --out $R/held-out-rate-fixed-p$P.json a=$R/rate-p$P.npz b=$R/rate-bs-p$P.npz
  python benchmarks/dl2/evaluate.py --penalty $P --philly 8 --loads 1,1.5,2 --batch-scaling --baselines drf \
    --out $R/held-out-rate-scaling-p$P.json a=$R/rate-p$P.npz b=$R/rate-bs-p$P.npz
  if [ $P = 30 ]; then  # 1f's files, margin 1 (the second is shipped)
    python benchmarks/dl2/evaluate.py --penalty 30 --philly 8 --loads 1,1.5,2 --baselines drf \
      --out $R/held-out-rate-m1-fixed-p30.json a=$R/rate-m1-p30.npz b=$R/rate-m1-bs-p30.npz
    python benchmarks/dl2/evaluate.py --penalty 30 --philly 8 --loads 1,1.5,2 --batch-scaling --baselines drf \
      --out $R/held-out-rate-m1-scaling-p30.json b=$R/rate-m1-bs-p30.npz
  fi
  # does it finish under overload? (a policy that keeps restarting jobs never does; the simulator stops it)
  python benchmarks/dl2/generalise.py --loads 2 --penalties $P --modes fixed --policies drf,dl2 --no-bound \
    --policy-file $R/dagger-p$P.npz --out $R/overload-dagger-p$P.json
done
# 4. evaluation on the 8 Pollux workloads against the baselines and the oracle SRTF reference
for P in 30 150; do
  python benchmarks/dl2/evaluate.py --penalty $P --reference --out $R/eval-rl-p$P.json dl2=$R/rl-p$P.npz \
    shipped=slurm_liquid/policy/dl2/trained/dl2-p$P.npz &
  python benchmarks/dl2/evaluate.py --penalty $P --baselines "" --out $R/eval-warm-p$P.json warm-up=$R/srtf-warm-p$P.npz \
    dagger=$R/dagger-p$P.npz drf-warm-up=$R/warm.npz
  wait
done
# 5. ablations of the warm-up (teacher, the order its GPUs are learnt in, the ranking columns; held-out samples)
python benchmarks/dl2/ablate_teacher.py --workloads 4 --epochs 4 --variants "full,water-filling,no ranking columns,drf teacher" \
  --out $R/ablate-teacher.json
# 5b. the completion-rate warm-up with and without its RATE column, at both penalties
python benchmarks/dl2/ablate_teacher.py --variants "completion-rate,completion-rate without RATE" --out $R/ablate-rate.json
python benchmarks/dl2/ablate_teacher.py --penalty 150 --variants "completion-rate,completion-rate without RATE" \
  --out $R/ablate-rate-p150.json
# 6. jobs that pick their own goodput-best batch (--batch-scaling): DRF warm-up and RL for them, chosen on the
# held-out samples like the others, then every policy on the 8 workloads with and without that policy
slurm-liquid policy train --supervised --batch-scaling --out $R/warm-bs.npz --warmup-workloads 8 --warmup-epochs 3
slurm-liquid policy train --rl --batch-scaling --init $R/warm-bs.npz --episodes $EP $RL --restart-penalty 30 --out $R/rl-bs-p30.npz &
slurm-liquid policy train --rl --batch-scaling --init $R/warm-bs.npz --episodes $EP $RL --restart-penalty 150 --out $R/rl-bs-p150.npz
wait
for P in 30 150; do
  python benchmarks/dl2/evaluate.py --batch-scaling --penalty $P --philly 8 --baselines drf,tiresias --out $R/held-out-bs-p$P.json \
    dl2-bs=$R/rl-bs-p$P.npz warm-up-bs=$R/warm-bs.npz shipped=slurm_liquid/policy/dl2/trained/dl2-p$P.npz
  python benchmarks/dl2/evaluate.py --batch-scaling --penalty $P --reference --baselines drf,tiresias,optimus,fifo \
    --out $R/eval-scaling-p$P.json dl2=slurm_liquid/policy/dl2/trained/dl2-p$P.npz dl2-bs=$R/rl-bs-p$P.npz
done
# 7. the LP lower bound of every setting, the DL2 paper replica and the generalisation table.
# The replica runs every policy of a table under one placement (artifact: each task on the least-used node as
# decided; cpu-first, the default: counted against the cluster's totals, placed at the end of the slot). Three
# disjoint trace sets: training (seeds 0-6: 3 warm-up traces, 2 DAgger rounds of 2), validation (5000-5007: the
# teacher, the cpu-first order and each shipped file are chosen there) and held-out (10000-10007, measured after).
for P in 30 150; do
  python benchmarks/dl2/bound.py --penalty $P --out $R/bound-p$P.json
  python benchmarks/dl2/bound.py --penalty $P --batch-scaling --out $R/bound-bs-p$P.json
done
python benchmarks/dl2/paper_teachers.py > $R/paper-teachers-validation.log
python benchmarks/dl2/paper_teachers.py --setting dl2-paper-large > $R/paper-teachers-large-validation.log
# The files: `hull` warm-up, window 60 (every job of the small setting) or 40 sliding (large), 2 DAgger rounds,
# under each placement; the cpu-first ones are trained/dl2-paper-{small,large}.npz (the small warm-up alone was
# the other candidate). An artifact-trained file ships as trained/dl2-paper-S-artifact.npz only if it runs lower
# on validation than the cpu-first file run under artifact (paper-dl2-*-cpufirst-file-artifact-validation.log);
# without one, the artifact placement runs the setting's file.
python benchmarks/dl2/paper.py --settings dl2-paper-small --train $R/psw-small-hull.npz --teacher hull --window 60 --train-seeds 3
for PL in cpu-first artifact; do
  S=$([ $PL = cpu-first ] || echo -$PL)
  python benchmarks/dl2/paper.py --settings dl2-paper-small --train $R/psw-small-hull-dagger$S.npz --teacher hull --window 60 \
    --train-seeds 3 --dagger 2 --placement $PL
  python benchmarks/dl2/paper.py --settings dl2-paper-large --train $R/psw-large-hull-slide$S.npz --teacher hull --train-seeds 3 \
    --dagger 2 --sliding-window --placement $PL > $R/psw-large-hull-slide$S.log
done
# validation (name:file:placement)
for F in hull-warmup:psw-small-hull:cpu-first hull-dagger:psw-small-hull-dagger:cpu-first \
         hull-dagger-artifact:psw-small-hull-dagger-artifact:artifact \
         small-cpufirst-file-artifact:psw-small-hull-dagger:artifact; do
  N=${F%%:*}; REST=${F#*:}; FILE=${REST%%:*}; PL=${REST#*:}
  python benchmarks/dl2/paper.py --settings dl2-paper-small --first 5000 --policies drf,optimus,hull,dl2 --seeds 8 \
    --placement $PL --policy-file $R/$FILE.npz > $R/paper-dl2-$N-validation.log
done
for PL in cpu-first artifact; do
  S=$([ $PL = cpu-first ] || echo -$PL)
  python benchmarks/dl2/paper.py --settings dl2-paper-large --first 5000 --seeds 8 --policies drf,optimus,hull,dl2 \
    --placement $PL --policy-file $R/psw-large-hull-slide$S.npz > $R/paper-dl2-large$S-validation.log
done
python benchmarks/dl2/paper.py --settings dl2-paper-large --first 5000 --seeds 8 --policies drf,optimus,hull,dl2 \
  --placement artifact --policy-file $R/psw-large-hull-slide.npz > $R/paper-dl2-large-cpufirst-file-artifact-validation.log
# held-out, with the shipped files (the chosen ones copied into slurm_liquid/policy/dl2/trained/)
python benchmarks/dl2/paper.py --seeds 8 --policies drf,optimus,drf-best-split,hull,dl2 --out $R/paper.json
python benchmarks/dl2/generalise.py --out $R/generalise.json
python benchmarks/dl2/report.py
