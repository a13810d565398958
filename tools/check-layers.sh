#!/usr/bin/env bash
# tools/check-layers.sh: fails when a file in src/ or include/mpt/ includes a header of a higher layer (docs/design.md).
# Usage: bash tools/check-layers.sh [ROOT]   (prints each upward include and the count; exit 1 if any)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
# Bottom to top. backend/ is core's device implementation (same layer); autograd/ is tied to core/ (a Tensor carries
# its autograd metadata, and a node is made from Tensors): the two are one layer, the Tensor<->autograd knot.
layers="kernels:0 core:1 backend:1 autograd:1 io:2 dist:3 ops:4 fp8:5 amp:6 nn:7 optim:8 data:9 train:10 deploy:11"
# The upward includes the design allows, by file, with the reason in docs/design.md ("file -> layer"): the
# Tensor<->autograd knot reaches ops for gradient arithmetic (accumulating "+=" into a gradient; expand's backward sums
# back to the input's shape).
allowed=("src/autograd/node.cpp -> ops" "src/autograd/engine.cpp -> ops" "src/autograd/leaf_adds.cpp -> ops"
         "src/core/tensor.cpp -> ops")
rank_of() {
  local l
  for l in $layers; do [[ ${l%%:*} == "$1" ]] && { echo "${l##*:}"; return; }; done
  echo ""
}
count=0
while IFS= read -r -d '' file; do
  case "$file" in
    include/mpt/*/*) from=$(cut -d/ -f3 <<<"$file") ;;
    src/*/*) from=$(cut -d/ -f2 <<<"$file") ;;
    *) continue ;;
  esac
  rf=$(rank_of "$from")
  [[ -n "$rf" ]] || { echo "check-layers: $file: folder '$from' has no layer (add it to tools/check-layers.sh)"; exit 1; }
  while IFS= read -r inc; do
    path=${inc#mpt/}
    to=${path%%/*}
    [[ "$to" == "$path" ]] && continue  # a header beside the file
    rt=$(rank_of "$to")
    [[ -n "$rt" ]] || continue
    if (( rt > rf )); then
      ok=0
      for a in "${allowed[@]}"; do [[ "$a" == "$file -> $to" ]] && ok=1; done
      if (( ! ok )); then
        echo "upward include: $file ($from) includes \"$inc\" ($to)"
        count=$((count + 1))
      fi
    fi
  done < <(sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$file")
done < <(find src include/mpt -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
echo "check-layers: $count upward include(s)"
(( count == 0 ))
