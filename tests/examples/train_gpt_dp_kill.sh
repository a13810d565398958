#!/usr/bin/env bash
# tests/examples/train_gpt_dp_kill.sh: SIGKILL one rank of `mpirun -np 2 train_gpt` mid-training: the whole job ends
# with an error naming the rank within a bounded time (mpirun tears the other rank down; had it not, that rank's
# collective would time out after MPT_DIST_TIMEOUT_S).
# Usage: train_gpt_dp_kill.sh MPIEXEC TRAIN_GPT WORK_DIR [mpirun flags...]
set -euo pipefail
mpiexec=$1 train_gpt=$2 work=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
export MPT_DIST_TIMEOUT_S=20
"$mpiexec" -n 2 --oversubscribe "$@" "$train_gpt" --steps 100000 --layers 1 --heads 2 --embd 32 --seq 32 --batch 2 \
  --eval-every 0 --sample 0 --log-every 1 --log-json "$work/log.jsonl" >"$work/out" 2>"$work/err" &
job=$!
for _ in $(seq 600); do  # until a few steps are logged (at most 60 s)
  [[ $(grep -c '"loss"' "$work/log.jsonl" 2>/dev/null || true) -ge 5 ]] && break
  sleep 0.1
done
# The train_gpt process of rank 1 among this job's own processes (mpiexec's children): other mpirun tests running
# at the same time start the same binary (a CI run once found none of ours and another job's processes instead).
victim=""
for _ in $(seq 50); do
  for p in $(pgrep -P "$job" || true); do
    if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$p; fi
  done
  [[ -n $victim ]] && break
  sleep 0.1
done
[[ -n $victim ]] || { echo "no rank-1 process found"; kill -9 "$job"; exit 1; }
start=$(date +%s.%N)
kill -9 "$victim"
rc=0
wait "$job" 2>/dev/null || rc=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
steps=$(grep -c '"loss"' "$work/log.jsonl" || true)
echo "killed rank 1 (pid $victim) after $steps logged steps: the job ended in ${elapsed} s with status $rc"
cat "$work/err" | grep -m2 -E "signal|rank" || true
[[ $rc -ne 0 ]] || { echo "FAIL: the job exited 0"; exit 1; }
awk "BEGIN { exit !($elapsed < 30) }" || { echo "FAIL: took ${elapsed} s"; exit 1; }
echo "PASS"
