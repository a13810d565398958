#!/usr/bin/env bash
# tools/convergence.sh: trains the small GPT under every precision with the same seed and data order, then plots.
# Usage: bash tools/convergence.sh [OUT_DIR] [extra train_gpt flags]   (train_gpt's built-in tinyshakespeare, or MPT_DATA)
# Writes OUT_DIR/<precision>.jsonl (train_gpt --log-json) and the plot $PLOT (default docs/numerics_convergence.png;
# tools/plot_convergence.py, matplotlib from pip; PYTHON picks the interpreter). PRECISIONS overrides the list. The
# tables in docs/numerics.md come from the "final" line of each log. The Llama table:
#   PRECISIONS="fp32 bf16 fp8-block" PLOT=docs/numerics_convergence_llama.png \
#     bash tools/convergence.sh build/convergence-llama --model llama --kv-heads 2
set -euo pipefail
out=${1:-build/convergence}
shift || true
bin=build/release/examples/train_gpt
mkdir -p "$out"
common=(--layers 6 --heads 6 --embd 384 --seq 256 --batch 8 --steps 300 --lr 1e-3 --min-lr 1e-4 --warmup 30
        --eval-every 50 --eval-batches 16 --log-every 10 --sample 0 --seed 1337)
for precision in ${PRECISIONS:-fp32 bf16 fp16 fp8-delayed fp8-current fp8-block}; do
  echo "== $precision"
  "$bin" "${common[@]}" --precision "$precision" --log-json "$out/$precision.jsonl" "$@" | tail -n 3
done
"${PYTHON:-python3}" tools/plot_convergence.py "$out" "${PLOT:-docs/numerics_convergence.png}"
