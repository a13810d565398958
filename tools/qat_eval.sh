#!/usr/bin/env bash
# tools/qat_eval.sh: validation loss of FP32, post-training quantization (PTQ) and quantization-aware fine-tuning (QAT)
# of the README's character GPT and of a SentencePiece Llama, one table (docs/benchmarks.md, "QAT against PTQ").
#
# Usage: bash tools/qat_eval.sh [BUILD_DIR] [QAT_STEPS]   (default build/cpu, 200). Each model is trained in FP32 once
# (the README's run: 2000 steps), then for every scheme `train_gpt --init-from` the checkpoint with --qat: it reports
# the FP32 and the PTQ losses of the loaded weights before its first step, then fine-tunes QAT_STEPS steps (lr 3e-4
# cosine to 3e-5, 20 warmup) and reports the QAT loss. "FP32 + N" continues the FP32 model with the same steps and
# schedule without quantization: the part of QAT's gain that is only more training. Recovered = (PTQ - QAT) /
# (PTQ - FP32) of the loss increase. 32 validation batches per loss.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu}
n=${2:-200}
bin=$build/examples/train_gpt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ev=(--eval-batches 32 --eval-every 0 --sample 0 --log-every 1000)
ft=(--steps "$n" --lr 3e-4 --min-lr 3e-5 --warmup 20)
declare -A model_flags=(
  [gpt]=""
  [llama]="--model llama --tokenizer bpe --vocab-size 512 --layers 4 --heads 6 --kv-heads 2 --embd 192"
)
printf "%-6s %-10s %9s %9s %9s %9s %10s %8s\n" model scheme fp32 ptq qat "fp32+$n" recovered "qat s"
for m in gpt llama; do
  read -r -a flags <<<"${model_flags[$m]}"
  "$bin" "${flags[@]}" "${ev[@]}" --save-dir "$work/$m" >/dev/null
  cont=$("$bin" "${flags[@]}" "${ev[@]}" "${ft[@]}" --init-from "$work/$m" | sed -n 's/.*final val loss \([0-9.]*\).*/\1/p')
  for s in "int8" "int4 32" "int4 128" "fp8"; do
    read -r scheme group <<<"$s"
    t0=$(date +%s.%N)
    out=$("$bin" "${flags[@]}" "${ev[@]}" "${ft[@]}" --init-from "$work/$m" --qat "$scheme" --qat-group "${group:-32}")
    t1=$(date +%s.%N)
    fp=$(sed -n 's/^before QAT: val loss \([0-9.]*\) .*/\1/p' <<<"$out")
    ptq=$(sed -n 's/^before QAT: .* | \([0-9.]*\) quantized.*/\1/p' <<<"$out")
    qat=$(sed -n 's/.*final val loss \([0-9.]*\).*/\1/p' <<<"$out")
    rec=$(awk -v f="$fp" -v p="$ptq" -v q="$qat" 'BEGIN { d = p - f; if (d > 0) printf "%.0f%%", 100 * (p - q) / d; else print "-" }')
    printf "%-6s %-10s %9s %9s %9s %9s %10s %8.0f\n" "$m" "$scheme${group:+-g$group}" "$fp" "$ptq" "$qat" "$cont" "$rec" \
      "$(echo "$t1 - $t0" | bc)"
  done
done
