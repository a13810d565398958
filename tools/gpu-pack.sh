#!/usr/bin/env bash
# tools/gpu-pack.sh: packs what a lent GPU machine needs to measure mptrain with tools/gpu-measure.sh, built here.
# Usage: bash tools/gpu-pack.sh BUILD_DIR [OUT] [--baseline BUILD_DIR2]
#   BUILD_DIR  a CUDA build (the `main` or `release` preset) with bench_train, bench_fp8, test_gpu and train_gpt built
#   OUT        the folder to fill (default .gpu; it must be ignored by git: .git/info/exclude gets "/OUT/")
#   --baseline another CUDA build (an earlier commit's) whose bench_train and bench_fp8 run beside the new ones, so
#              that a change is measured against its baseline in the same lease
# Environment: LLMC_GIT, a git directory of llm.c (the `fetch` tool brings github:karpathy/llm.c), adds llm.c's
# train_gpt2cu built by ../shared/tools/llmc-baseline.sh (about 3 minutes here). Binaries are stripped and xz'd;
# the shared libraries the GPU image lacks (oneDNN, fmt, OpenMPI, ...: whatever ldd resolves outside CUDA's
# libraries and the C/C++ runtime) and libcupti (bench_train --kernel-times) travel beside them. Then, with the
# device tool: run `bash tools/gpu-measure.sh OUT SECONDS` with carry [OUT].
set -euo pipefail
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
[ "$1" = -h ] || [ "$1" = --help ] && { usage; exit 0; }
build=$1; shift
out=.gpu baseline=""
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) baseline=$2; shift ;;
    -*) echo "gpu-pack: unknown option '$1'" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bins=(benchmarks/bench_train benchmarks/bench_fp8 tests/test_gpu examples/train_gpt)
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "gpu-pack: $build/$b is missing (cmake --build $build --target $(basename "$b"))" >&2; exit 1; }
done
case $out in
  /*) echo "gpu-pack: $out is not inside the repository: the device tool carries only paths inside it" >&2 ;;
  *) out=${out%/}; grep -qxF "/$out/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo "/$out/" >>.git/info/exclude; } ;;
esac
rm -rf "$out/bin" "$out/lib"
mkdir -p "$out/bin" "$out/lib"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pack() {  # pack BINARY NAME
  strip -o "$tmp/$2" "$1"
  xz -T2 -6 -c "$tmp/$2" >"$out/bin/$2.xz"
}
for b in "${bins[@]}"; do pack "$build/$b" "$(basename "$b")"; done
if [ -n "$baseline" ]; then
  for b in benchmarks/bench_train benchmarks/bench_fp8; do
    [ -x "$baseline/$b" ] || { echo "gpu-pack: $baseline/$b is missing" >&2; exit 1; }
    pack "$baseline/$b" "$(basename "$b")_old"
  done
fi
# The libraries to carry: resolved by ldd, not CUDA's own (the image has its toolkit, NCCL and torch's cuDNN), not
# the C/C++ runtime.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libz\.|libudev|libcuda|libcudart|libcublas|libcudnn|libnccl|libnvrtc)'
for b in "${bins[@]}"; do ldd "$build/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] && continue
    xz -T2 -6 -c "$(readlink -f "$path")" >"$out/lib/$name.xz"
  done
cupti=$(find "$(dirname "$(readlink -f "$(command -v nvcc)")")/.." /usr/local/cuda* -name 'libcupti.so.13' 2>/dev/null | head -n 1 || true)
if [ -n "$cupti" ]; then xz -T2 -6 -c "$(readlink -f "$cupti")" >"$out/lib/libcupti.so.13.xz"
else echo "gpu-pack: no libcupti.so.13 here: --kernel-times will use the GPU machine's, if any" >&2; fi
if [ -n "${LLMC_GIT:-}" ]; then
  bash "$repo/../shared/tools/llmc-baseline.sh" "$out/llmc" >"$tmp/llmc.log" 2>&1 ||
    { tail -n 20 "$tmp/llmc.log" >&2; echo "gpu-pack: llm.c's build failed" >&2; exit 1; }
fi
git rev-parse --short HEAD >"$out/commit"
echo "gpu-pack: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/bin" | tr '\n' ' ')); libraries: $(ls "$out/lib" | tr '\n' ' ')"
[ -d "$out/llmc" ] || echo "gpu-pack: no llm.c (set LLMC_GIT to include it)"
