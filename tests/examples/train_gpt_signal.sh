#!/usr/bin/env bash
# tests/examples/train_gpt_signal.sh: SIGINT or SIGTERM stops train_gpt at a step boundary with a checkpoint and
# exit 0; after SIGKILL the last --save-every checkpoint remains. --resume continues from the checkpoint and the JSONL
# log then has every step once (the killed run's records past the checkpoint are dropped).
# Usage: train_gpt_signal.sh TRAIN_GPT WORK_DIR INT|TERM|KILL
set -euo pipefail
train_gpt=$1 work=$2 sig=$3
rm -rf "$work" && mkdir -p "$work"
args=(--steps 100000 --layers 1 --heads 2 --embd 32 --seq 32 --batch 2 --eval-every 0 --sample 0 --log-every 1)
[[ $sig == KILL ]] && args+=(--save-every 5)
"$train_gpt" "${args[@]}" --save-dir "$work/ckpt" --log-json "$work/log.jsonl" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 600); do  # until a few steps are logged (at most 60 s)
  [[ $(grep -c '"loss"' "$work/log.jsonl" 2>/dev/null || true) -ge 12 ]] && break
  sleep 0.1
done
if [[ $sig == KILL ]]; then
  # Freeze the run where it has logged steps past its last checkpoint (those are what a resume must drop), then kill.
  for _ in $(seq 200); do
    kill -STOP "$pid"
    ckpt=$(sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' "$work/ckpt/latest" 2>/dev/null || true)
    last=$(grep -o '"step":[0-9]*' "$work/log.jsonl" | tail -1 | cut -d: -f2)
    [[ -n $ckpt && $last -ge $ckpt ]] && break
    kill -CONT "$pid"
    sleep 0.05
  done
fi
kill "-$sig" "$pid"
rc=0
wait "$pid" 2>/dev/null || rc=$?
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$work/out"; echo "--- stderr"; cat "$work/err"; exit 1; }
if [[ $sig == KILL ]]; then
  [[ $rc -eq 137 ]] || fail "train_gpt exited $rc after SIGKILL (expected 137)"
  step=$(sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' "$work/ckpt/latest")
  [[ -n $step && $((step % 5)) -eq 0 ]] || fail "latest is '$(cat "$work/ckpt/latest")', not a --save-every 5 step"
  last=$(grep -o '"step":[0-9]*' "$work/log.jsonl" | tail -1 | cut -d: -f2)
  [[ $last -ge $step ]] || fail "the killed run logged up to step $last, not past its checkpoint $step"
else
  [[ $rc -eq 0 ]] || fail "train_gpt exited $rc after SIG$sig (expected 0)"
  grep -q "stopping at the end of this step" "$work/err" || fail "no message on stderr for SIG$sig"
  grep -Eq "^stopped after step [0-9]+ of 100000; resume with: train_gpt --resume $work/ckpt$" "$work/out" ||
    fail "no resume hint"
  step=$(sed -n 's/^stopped after step \([0-9]*\) of.*/\1/p' "$work/out")
fi
[[ -f "$work/ckpt/step-$(printf %08d "$step")/state.json" ]] || fail "no checkpoint of step $step"

# Resume for two more steps: it continues the log after the checkpoint's step, each step once.
"$train_gpt" --resume "$work/ckpt" --stop-after 2 >"$work/out2" 2>"$work/err2" || fail "resume failed: $(cat "$work/err2")"
grep -q "resumed from $work/ckpt/step-$(printf %08d "$step") at step $step" "$work/out2" || fail "no resume line"
steps=$(grep -o '"step":[0-9]*' "$work/log.jsonl" | cut -d: -f2)
expected=$(seq 0 $((step + 1)))
[[ "$steps" == "$expected" ]] || fail "log steps are $(echo $steps) (expected $(echo $expected))"
echo "SIG$sig: checkpoint of step $step, resumed to step $((step + 2)); log steps 0..$((step + 1))"
