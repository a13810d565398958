#!/usr/bin/env bash
# cmake/nvcc-spill-guard.sh: runs nvcc and fails the build when a kernel spills registers or uses local
# memory, unless the kernel is listed in cmake/spill-allowlist.txt with a reason.
# Usage (as CMAKE_CUDA_COMPILER_LAUNCHER): nvcc-spill-guard.sh ALLOWLIST [ccache] nvcc args...
set -uo pipefail
allowlist="$1"; shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2> >(tee "$log" >&2)
rc=$?
wait
[[ $rc -ne 0 ]] && exit $rc
bad=0
while IFS= read -r fn; do
  name=$(c++filt "$fn" 2>/dev/null || echo "$fn")
  allowed=0
  while IFS='|' read -r pattern reason; do
    pattern="${pattern%"${pattern##*[![:space:]]}"}"
    [[ -z "$pattern" || "$pattern" == \#* ]] && continue
    if [[ "$name" == *"$pattern"* && -n "${reason// /}" ]]; then allowed=1; break; fi
  done < "$allowlist"
  if [[ $allowed -eq 0 ]]; then
    echo "error: kernel '$name' spills registers or uses local memory (see ptxas output above);" \
         "fix it or list it in $(basename "$allowlist") with a reason" >&2
    bad=1
  fi
done < <(grep -E "ptxas warning : (Registers are spilled to local memory|Local memory used) (in|for) function" "$log" \
         | sed -E "s/.*function '([^']+)'.*/\1/" | sort -u)
exit $bad
