#!/usr/bin/env bash
# benchmarks/dp_scaling.sh: on one machine, one process with all the cores against mpirun -np N with one thread each
# (plain, ZeRO-1, BF16 and FP8 compression), ROUNDS times interleaved; prints each run and the median ratios.
# Usage: benchmarks/dp_scaling.sh BUILD_DIR [N] [ROUNDS] [bench_dp flags...]   (docs/distributed.md)
set -euo pipefail
build=${1:?build directory, e.g. build/release}
np=${2:-2}
rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
bench=$build/benchmarks/bench_dp
json=$(mktemp)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1)
for r in $(seq "$rounds"); do
  OMP_NUM_THREADS=$np "$bench" --label "1 process" --json "$json" "$@"
  "${mpi[@]}" "$bench" --label "np$np" --json "$json" "$@"
  "${mpi[@]}" "$bench" --label "np$np zero1" --zero1 --json "$json" "$@"
  "${mpi[@]}" "$bench" --label "np$np bf16" --compression bf16 --json "$json" "$@"
  "${mpi[@]}" "$bench" --label "np$np fp8" --compression fp8 --json "$json" "$@"
done
python3 - "$json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows: by.setdefault(r["label"], []).append(r["tokens_per_s"])
base = statistics.median(by["1 process"])
print(f"\nmedian tokens/s over {len(by['1 process'])} rounds (ratio to one process with all threads):")
for label, v in by.items():
    print(f"  {label:14s} {statistics.median(v):9.0f}  {statistics.median(v) / base:5.2f}x")
PY
rm -f "$json"
