#!/bin/bash
# Rehearse a slurm-liquid resize of a training command on one machine, without Slurm or the daemon:
# start it as Slurm job $JOB on $GPUS_BEFORE GPUs, send SIGUSR1 (the daemon's checkpoint request) to
# the command once its report shows step >= $SIGNAL_AT, send SIGTERM
# (Slurm's requeue) once it reports the checkpoint, then start it again on $GPUS_AFTER GPUs and let it
# finish. Prints the report before the signal, after the checkpoint, and at the end.
#
#   examples/elastic/resize_locally.sh python examples/elastic/hf_train.py --steps 80 --output-dir /tmp/hf-run
#
# A command that dies of the signal, ends before the requeue, or does not resume is what this shows.
set -u
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
JOB=${JOB:-4242}; SIGNAL_AT=${SIGNAL_AT:-20}; GPUS_BEFORE=${GPUS_BEFORE:-4}; GPUS_AFTER=${GPUS_AFTER:-2}
PYTHON=${PYTHON:-python3}; TIMEOUT_S=${TIMEOUT_S:-300}
export SLURM_JOB_ID=$JOB SLURM_JOB_NUM_NODES=1
export SLURM_LIQUID_PROGRESS_DIR=${SLURM_LIQUID_PROGRESS_DIR:-$(mktemp -d)}
report="$SLURM_LIQUID_PROGRESS_DIR/$JOB.json"
field() { "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$report" "$1" 2>/dev/null; }
wait_until() {  # wait_until TEST: poll every 0.5 s, at most TIMEOUT_S
    local end=$((SECONDS + TIMEOUT_S))
    until eval "$1"; do
        [ $SECONDS -lt $end ] && kill -0 "$pid" 2>/dev/null || { echo "gave up waiting for: $1" >&2; return 1; }
        sleep 0.5
    done
}

SLURM_GPUS_ON_NODE=$GPUS_BEFORE "$@" &
pid=$!
wait_until '[ "$(field step)" -ge "$SIGNAL_AT" ] 2>/dev/null' || { kill "$pid"; exit 1; }
echo "before the signal: $(cat "$report")"
kill -USR1 "$pid"
wait_until '[ "$(field checkpoint)" != None ]' || { kill "$pid"; exit 1; }
sleep 2
kill -0 "$pid" 2>/dev/null && echo "checkpoint reported; still running, waiting for the requeue (as it should)" \
    || echo "checkpoint reported, but the process has ended: Slurm would mark the job COMPLETED, not resize it"
echo "after the checkpoint: $(cat "$report")"
kill -TERM "$pid" 2>/dev/null; wait "$pid"; echo "first run ended with $?"

SLURM_GPUS_ON_NODE=$GPUS_AFTER "$@"
echo "second run ended with $?"
echo "at the end: $(cat "$report")"
