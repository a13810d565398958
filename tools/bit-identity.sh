#!/usr/bin/env bash
# tools/bit-identity.sh: train_gpt checkpoints of two binaries, compared byte for byte in every precision.
# Usage: tools/bit-identity.sh NEW_TRAIN_GPT OLD_TRAIN_GPT [WORK_DIR]
# Runs 4 steps of the tiny presets (4 layers, batch 4) with each binary and compares every file of the last step's
# checkpoint directory (model, optimizer, state.json, config). Exit status 1 when any run differs or fails. Keep the
# old binary before rebuilding (cp build/cpu/examples/train_gpt /tmp/train_gpt_before).
set -u
new=${1:?usage: $0 NEW_TRAIN_GPT OLD_TRAIN_GPT [WORK_DIR]}
old=${2:?usage: $0 NEW_TRAIN_GPT OLD_TRAIN_GPT [WORK_DIR]}
base=${3:-$(mktemp -d /tmp/bit_identity_XXXX)}
mkdir -p "$base"
status=0

run() {  # name, then train_gpt's arguments
  local name=$1; shift
  for side in old new; do
    local bin=$old; [ "$side" = new ] && bin=$new
    if ! "$bin" "$@" --save-dir "$base/${side}_$name" > "$base/${side}_$name.log" 2>&1; then
      echo "$name: the $side binary failed (see $base/${side}_$name.log)"; status=1; return
    fi
  done
  local d1 d2 same=1
  d1=$(ls -d "$base/old_$name"/step-*/ | sort -V | tail -1)
  d2=$(ls -d "$base/new_$name"/step-*/ | sort -V | tail -1)
  for f in $(cd "$d1" && ls); do
    cmp -s "$d1/$f" "$d2/$f" || { same=0; echo "$name: $f differs"; }
  done
  if [ "$same" = 1 ]; then echo "$name: identical"; else status=1; fi
}

common=(--preset tiny --layers 4 --steps 4 --batch 4)
for p in fp32 bf16 fp16 fp8-delayed fp8-current fp8-block; do run "$p" "${common[@]}" --precision "$p"; done
run bf16-accum2 "${common[@]}" --precision bf16 --grad-accum 2
run fp16-accum2 "${common[@]}" --precision fp16 --grad-accum 2
run bf16-checkpointed "${common[@]}" --precision bf16 --checkpoint-activations
for p in bf16 fp16 fp8-delayed; do
  run "llama-$p" --preset llama-tiny --layers 4 --steps 4 --batch 4 --precision "$p"
done
# Multi-head Llama (as many kv heads as query heads): what a change to grouped-query arithmetic leaves alone.
for p in fp32 bf16; do
  run "llama-mha-$p" --preset llama-tiny --kv-heads 4 --layers 4 --steps 4 --batch 4 --precision "$p"
done
exit $status
