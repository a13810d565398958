#!/usr/bin/env bash
# tools/qat_eval.sh: validation loss of FP32, post-training quantization (PTQ) and quantization-aware fine-tuning (QAT)
# of the README's character GPT and of a SentencePiece Llama, one table (docs/quantization.md, "Measured").
#
# Usage: bash tools/qat_eval.sh [BUILD_DIR] [QAT_STEPS] [FILTER]   (default build/cpu, 200, every row; FILTER: an
# extended regex over "MODEL SCHEME..." lines, e.g. 'lsq' or '^llama'; a model none of whose rows match is not trained). Each model is trained in FP32 once
# (2000 steps, the README's run) into A, and continued QAT_STEPS more FP32 steps into B (lr 3e-4 cosine to 3e-5, 20
# warmup). For every scheme, `train_gpt --init-from A --qat S` reports A's FP32 and PTQ losses before its first step,
# then fine-tunes QAT_STEPS steps with the same schedule (the QAT loss); `--init-from B --qat S --steps 1` reports B's
# PTQ loss. B is the fair baseline: the same training budget without quantization, quantized afterwards. Recovered =
# (PTQ(B) - QAT) / (PTQ(B) - FP32(B)): the share of post-training quantization's loss increase that QAT wins back.
# Every loss is over the same 32 validation batches. Prints the table and the seconds each QAT run took.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/cpu}
n=${2:-200}
filter=${3:-.}
bin=$build/examples/train_gpt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ev=(--eval-batches 32 --eval-every 0 --sample 0 --log-every 1000)
ft=(--lr 3e-4 --min-lr 3e-5 --warmup 20)
declare -A model_flags=(
  [gpt]=""
  [llama]="--model llama --tokenizer bpe --vocab-size 512 --layers 4 --heads 8 --kv-heads 2 --embd 256"
)
# "SCHEME [GROUP] [lsq]": lsq adds --qat-lsq (learned weight scales, started at the absmax ones).
declare -A schemes=([gpt]="int8|int4 32|int4 64|fp8|int4 32 lsq|int4 64 lsq"
                    [llama]="int8|int4 32|int4 128|fp8|int4 32 lsq|int4 128 lsq")
before() { sed -n "s/^before QAT: val loss \([0-9.]*\) .* | \([0-9.]*\) quantized.*/\1 \2/p"; }
final() { sed -n 's/.*final val loss \([0-9.]*\).*/\1/p'; }
printf "%-6s %-14s %8s %8s %8s %10s %8s %10s %7s\n" model scheme fp32 ptq "fp32+$n" "ptq(+$n)" qat recovered "qat s"
for m in gpt llama; do
  IFS='|' read -r -a list <<<"${schemes[$m]}"
  rows=()
  for s in "${list[@]}"; do [[ "$m $s" =~ $filter ]] && rows+=("$s"); done
  [ ${#rows[@]} = 0 ] && continue
  read -r -a flags <<<"${model_flags[$m]}"
  "$bin" "${flags[@]}" "${ev[@]}" --save-dir "$work/$m-A" >/dev/null
  "$bin" "${flags[@]}" "${ev[@]}" "${ft[@]}" --steps "$n" --init-from "$work/$m-A" --save-dir "$work/$m-B" >/dev/null
  for s in "${rows[@]}"; do
    read -r scheme group lsq <<<"$s"
    q=(--qat "$scheme" --qat-group "${group:-32}")
    [ -n "$lsq" ] && q+=(--qat-lsq)
    t0=$(date +%s%N)
    out=$("$bin" "${flags[@]}" "${ev[@]}" "${ft[@]}" --steps "$n" --init-from "$work/$m-A" "${q[@]}")
    t1=$(date +%s%N)
    read -r fp ptq <<<"$(before <<<"$out")"
    qat=$(final <<<"$out")
    read -r fpb ptqb <<<"$("$bin" "${flags[@]}" "${ev[@]}" --steps 1 --init-from "$work/$m-B" "${q[@]}" | before)"
    rec=$(awk -v f="$fpb" -v p="$ptqb" -v q="$qat" 'BEGIN { d = p - f; if (d > 0) printf "%.0f%%", 100 * (p - q) / d; else print "n/a" }')
    printf "%-6s %-14s %8s %8s %8s %10s %8s %10s %7.0f\n" "$m" "$scheme${group:+-g$group}${lsq:+-lsq}" "$fp" "$ptq" "$fpb" "$ptqb" \
      "$qat" "$rec" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e9 }')"
  done
done
