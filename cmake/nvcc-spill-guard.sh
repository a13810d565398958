#!/usr/bin/env bash
# cmake/nvcc-spill-guard.sh: runs nvcc quietly and fails the build when a kernel spills registers or uses local
# memory, unless the kernel is listed in cmake/spill-allowlist.txt with a reason.
# Usage (as CMAKE_CUDA_COMPILER_LAUNCHER): nvcc-spill-guard.sh ALLOWLIST [ccache] nvcc args...
# nvcc runs with --resource-usage; its ptxas report is kept out of the build log on success (thousands of lines).
# Anything else nvcc prints (errors, warnings) passes through; a spill is reported with the kernel and architecture.
set -uo pipefail
allowlist="$1"; shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
rc=$?
# ptxas's resource report: "ptxas info : ..." lines and the "N bytes stack frame, ..." line under each function.
# The spill warnings are reported below, by kernel and architecture.
grep -v -E '^ptxas info +:|^ +[0-9]+ bytes stack frame, |^ptxas warning : (Registers are spilled|Local memory used)' \
  "$log" >&2
[[ $rc -ne 0 ]] && exit $rc

# "function|arch" for every kernel that ptxas warned about, the arch taken from the report block that follows.
offenders=$(awk '
  /ptxas warning : (Registers are spilled to local memory|Local memory used) (in|for) function/ {
    match($0, /function \047[^\047]+\047/); warned[substr($0, RSTART + 10, RLENGTH - 11)] = 1; next }
  /ptxas info +: Compiling entry function/ {
    match($0, /function \047[^\047]+\047/); fn = substr($0, RSTART + 10, RLENGTH - 11)
    match($0, /for \047[^\047]+\047/); arch = substr($0, RSTART + 5, RLENGTH - 6); next }
  / bytes stack frame, / && fn != "" {
    if ($1 != "0" || $5 != "0" || $9 != "0") usage[fn "|" arch] = $0; fn = "" }
  END {
    for (f in warned) {
      n = 0
      for (k in usage) { split(k, p, "|"); if (p[1] == f) { print k "|" usage[k]; ++n } }
      if (n == 0) print f "|unknown arch|"
    } }' "$log" | sort -u)
[[ -z "$offenders" ]] && exit 0
bad=0
while IFS='|' read -r fn arch usage; do
  usage="${usage#"${usage%%[![:space:]]*}"}"
  name=$(c++filt "$fn" 2>/dev/null || echo "$fn")
  allowed=0
  while IFS='|' read -r pattern reason; do
    pattern="${pattern%"${pattern##*[![:space:]]}"}"
    [[ -z "$pattern" || "$pattern" == \#* ]] && continue
    if [[ "$name" == *"$pattern"* && -n "${reason// /}" ]]; then allowed=1; break; fi
  done < "$allowlist"
  if [[ $allowed -eq 0 ]]; then
    echo "error: kernel '$name' spills registers or uses local memory on $arch (${usage});" \
         "fix it or list it in $(basename "$allowlist") with a reason" >&2
    bad=1
  fi
done <<< "$offenders"
exit $bad
