#!/usr/bin/env bash
# tools/gpu-suite.sh: everything to run on the day a GPU is lent (docs/verification.md, section 3): build (or reuse
# carried binaries), the CUDA tests, the kernel and GEMM benchmarks, and GPT-2 124M training throughput and MFU against
# PyTorch on CUDA; one JSON file and one markdown report, every stage's outcome recorded, non-zero exit if one failed.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bash tools/gpu-suite.sh [options]

Stages (each runs when what it needs is there; a failure is recorded and the later stages still run):
  env      nvidia-smi, the GPUs it sees, the Python and torch (CUDA build? sees the GPU? torchao/TransformerEngine?)
  build    configure and build the `cuda` preset (build/cuda), or check the build given by --build-dir: every
           binary present, its shared libraries found (ldd)
  tests    test_gpu (every case), GptGolden.* on cuda:0, and the Cuda*/CublasLt*/OptimCuda*/Stream.Gpu* cases of
           test_core, test_optim, test_kernels, test_nn, test_amp, test_fp8, test_train, test_ops; fails if one fails or skips (other than
           the cases written for machines without a GPU: NoGpu, CudaWithoutGpu, NoDriver)
  kernels  benchmarks/bench_kernels (the host CPU's kernels and GEMMs next to its peaks: it has no device option)
  fp8      benchmarks/bench_fp8 --device cuda: each piece of an FP8 Linear (the GEMM per recipe, with and without fast
           accumulation; amax, quantize, cast + transpose (+ dbias), 1x128/128x128 blocks) beside the BF16 GEMM of the
           same shape, and whole FP8 Linears against the BF16 one, at GPT 1.3B's MLP shape and GPT-2 124M's
  quant    benchmarks/bench_generate --device cuda --quantized int8,int4,fp8 on GPT-2 124M's shape in bf16: KV-cache
           decoding with the Linear weights as codes (W8A8 on cuBLASLt's INT8 kernels, FP8 x FP8, INT4 dequantized)
           against the BF16 model, same run (issue 33)
  gemm     cuBLAS BF16 and FP8 GEMM TFLOP/s through torch (compare_pytorch.py --gemm-only): a square 8192 GEMM and
           GPT-2's own shapes
  profile  bench_train --device cuda --profile --kernel-times --cuda-graph on GPT-2 124M in bf16 and fp8-delayed:
           where one step's time goes (each module, phase and autograd node, the device synchronized at every range;
           and each kernel's own device time, traced with CUPTI: libcupti.so.13 on LD_LIBRARY_PATH), the
           free-running step against the time the host needs to queue it (host-bound or device-bound), and the step
           replayed as a CUDA graph; then bench_train's small default shape eager against graph replays
  train    compare_pytorch.py --device cuda: GPT-2 124M (12 layers, 768 wide, 12 heads, vocab 50257, T 1024) on
           cuda:0, mptrain's bench_train --device cuda in bf16, fp8-delayed, fp8-current, fp8-block against PyTorch
           bf16 autocast (and torch.compile, full mode), torchao / TransformerEngine FP8 where importable: tokens/s,
           TFLOP/s, MFU = tokens/s x (6N + 12 L C T) / dense peak (PaLM appendix B; N without the position embedding)

Options:
  --out DIR            results folder (default ./gpu-suite-results): gpu-suite.json, gpu-suite.md, raw/, logs/
  --build-dir DIR      use these binaries instead of building (env MPT_BUILD_DIR): a CMake build tree (tests/,
                       benchmarks/) or one flat folder; NAME.gz files are decompressed to a temporary folder
  --lib-dir DIR        shared libraries carried with the binaries, put first on LD_LIBRARY_PATH (env MPT_LIB_DIR);
                       CUDA's own (cudart, cuBLAS(Lt), cuDNN, NCCL) are searched for on the machine when ldd misses them
  --python PY          the Python with torch (env MPT_PYTHON; default python3)
  --quick              fit a 15-minute device lease: one repetition of short runs, no torch.compile, shorter timeouts
  --stages LIST        comma-separated subset of env,build,tests,kernels,fp8,quant,gemm,profile,train (env and build always
                       run)
  --batch N            sequences per training step (default 8)
  --peak-tflops T      dense BF16 peak for MFU instead of the table by GPU name (H100/H200 989, A100 312); FP8
                       peak is 2x on sm_89 and later unless --peak-fp8-tflops
  --peak-fp8-tflops T  dense FP8 peak
  --force              run the GPU stages even when no GPU is visible (to see each one's own error)
  -h, --help           this text

Exit status: 0 when every stage ran and passed, 1 otherwise (the JSON says which and why), 2 on a bad option.
EOF
}

caller=$PWD
cd "$(dirname "$0")/.."
repo=$PWD
out=./gpu-suite-results
build_dir=${MPT_BUILD_DIR:-}
lib_dir=${MPT_LIB_DIR:-}
py=${MPT_PYTHON:-python3}
quick=0 force=0 batch=8 peak="" peak_fp8="" models=gpt2,gpt2-padded compile=0
stages=env,build,tests,kernels,fp8,quant,gemm,profile,train
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift ;;
    --build-dir) build_dir=$2; shift ;;
    --lib-dir) lib_dir=$2; shift ;;
    --python) py=$2; shift ;;
    --quick) quick=1 ;;
    --stages) stages=env,build,$2; shift ;;
    --batch) batch=$2; shift ;;
    --models) models=$2; shift ;;
    --compile) compile=1 ;;
    --peak-tflops) peak=$2; shift ;;
    --peak-fp8-tflops) peak_fp8=$2; shift ;;
    --force) force=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-suite: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
for s in ${stages//,/ }; do
  case $s in env|build|tests|kernels|fp8|quant|gemm|profile|train) ;; *) echo "gpu-suite: unknown stage '$s' in --stages" >&2; exit 2 ;; esac
done
wanted() { [[ ",$stages," == *",$1,"* ]]; }
# Paths given on the command line are relative to where the script was started.
abs() { case $1 in /*|"") printf '%s' "$1" ;; *) printf '%s/%s' "$caller" "$1" ;; esac; }
out=$(abs "$out") build_dir=$(abs "$build_dir") lib_dir=$(abs "$lib_dir")

mkdir -p "$out/raw" "$out/logs"
out=$(cd "$out" && pwd)
bin_tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-suite.XXXXXX")
trap 'rm -rf "$bin_tmp"' EXIT
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# ---------------------------------------------------------------- stage records
names=() statuses=() secs=() details=()
stage_t0=0
begin() { stage_t0=$SECONDS; printf '\n== gpu-suite: %s\n' "$1"; }
# record NAME ok|failed|skipped DETAIL: one line per stage on the terminal, all of them in the JSON and the report.
record() {
  names+=("$1") statuses+=("$2") secs+=($((SECONDS - stage_t0))) details+=("$3")
  printf '== gpu-suite: %-7s %-7s %s\n' "$1" "$2" "$3"
}
# run_logged LOG SECONDS CMD...: appends CMD's output to LOG within a time limit; returns CMD's status (124: timeout).
run_logged() {
  local log=$1 limit=$2
  shift 2
  printf '$ %s\n' "$*" >>"$log"
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1
}
# Why a command failed, for a detail line: its status, a timeout, and the last lines of its log.
why() {
  local rc=$1 limit=$2 log=$3
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then printf 'timed out after %s s' "$limit"; else printf 'exit %s' "$rc"; fi
  printf ': %s' "$(grep -v '^\$ ' "$log" | tail -n 3 | tr '\n' ' ' | cut -c1-400)"
}

# ---------------------------------------------------------------- env
begin env
gpu_visible=0 gpu_detail="" torch_detail=""
if command -v nvidia-smi >/dev/null; then
  if smi=$(timeout 60 nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader \
           2>&1) && [ -n "$smi" ]; then
    printf '%s\n' "$smi" >"$out/raw/nvidia-smi.csv"
    gpu_visible=1 gpu_detail="$(wc -l <<<"$smi") GPU(s): $(head -n 1 <<<"$smi")"
  else
    gpu_detail="nvidia-smi sees no GPU: $(tr '\n' ' ' <<<"$smi" | cut -c1-300)"
  fi
else
  gpu_detail="no nvidia-smi on PATH (no NVIDIA driver installed?)"
fi
if command -v "$py" >/dev/null; then
  torch_detail=$(timeout 300 "$py" -c 'import torch; print("torch %s (CUDA %s), torch.cuda.is_available() %s" % (
    torch.__version__, torch.version.cuda, torch.cuda.is_available()))' 2>&1 | tail -n 1) || true
else
  torch_detail="no Python '$py' (--python or MPT_PYTHON choose one)"
fi
if [ $gpu_visible = 0 ] && [[ $torch_detail == *"is_available() True"* ]]; then
  gpu_visible=1 gpu_detail="$gpu_detail; but torch sees a GPU"
fi
[ $gpu_visible = 0 ] && gpu_detail="no GPU visible: $gpu_detail (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
record env "$([ $gpu_visible = 1 ] && echo ok || echo failed)" "$gpu_detail; python $py: $torch_detail"
run_gpu=$((gpu_visible || force))
no_gpu_reason="not run: no GPU visible (--force runs it anyway)"

# ---------------------------------------------------------------- build
# Binaries each stage needs.
test_bins=(test_gpu test_core test_optim test_kernels test_nn test_amp test_fp8 test_train test_ops)
need=()
wanted tests && need+=("${test_bins[@]}")
wanted kernels && need+=(bench_kernels)
wanted fp8 && need+=(bench_fp8)
wanted quant && need+=(bench_generate)
{ wanted train || wanted profile; } && need+=(bench_train)
declare -A bin=()
begin build
build_ok=0
if [ $run_gpu = 0 ]; then
  record build skipped "$no_gpu_reason"
elif [ ${#need[@]} = 0 ]; then
  build_ok=1
  record build ok "no stage selected needs a binary"
else
  log=$out/logs/build.log
  : >"$log"
  detail=""
  if [ -n "$build_dir" ]; then
    if [ -d "$build_dir" ]; then build_ok=1; detail="reusing $build_dir"
    else detail="build dir $build_dir (--build-dir / MPT_BUILD_DIR) does not exist"; fi
  elif ! command -v cmake >/dev/null; then
    detail="no cmake on PATH, and no --build-dir / MPT_BUILD_DIR with binaries built elsewhere"
  elif ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    detail="no nvcc (CUDA toolkit) on PATH or in /usr/local/cuda, and no --build-dir / MPT_BUILD_DIR"
  else
    build_dir=$repo/build/cuda
    export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
    limit=$((quick ? 600 : 3600))
    rc=0
    run_logged "$log" "$limit" cmake --preset cuda || rc=$?
    [ $rc = 0 ] && { run_logged "$log" "$limit" cmake --build --preset cuda --target "${need[@]}" || rc=$?; }
    if [ $rc = 0 ]; then build_ok=1; detail="built the cuda preset in $build_dir"
    else detail="cmake $(why $rc "$limit" "$log")"; fi
  fi
  if [ $build_ok = 1 ]; then
    # Each binary: in tests/, benchmarks/ or the folder itself, plain or gzipped (how they travel to a lent machine).
    missing=()
    for b in "${need[@]}"; do
      for d in "$build_dir/tests" "$build_dir/benchmarks" "$build_dir"; do
        if [ -f "$d/$b" ] && [ -x "$d/$b" ]; then bin[$b]=$d/$b; break; fi
        if [ -f "$d/$b.gz" ] && gzip -dc "$d/$b.gz" >"$bin_tmp/$b" && chmod +x "$bin_tmp/$b"; then
          bin[$b]=$bin_tmp/$b; break
        fi
      done
      [ -n "${bin[$b]:-}" ] || missing+=("$b")
    done
    missing_libs() {
      local b
      for b in "${!bin[@]}"; do { ldd "${bin[$b]}" 2>/dev/null || true; } | awk '/not found/ {print $1}'; done | sort -u
    }
    # Shared libraries: the carried ones first, then CUDA's wherever this machine keeps them (toolkit, driver
    # packages, the nvidia-* wheels beside torch).
    if [ -n "$lib_dir" ]; then
      [ -d "$lib_dir" ] || detail="$detail; --lib-dir $lib_dir does not exist"
      export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    unresolved=$(missing_libs)
    if [ -n "$unresolved" ]; then
      site=$("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
      dirs=$(for l in $unresolved; do
               # shellcheck disable=SC2086 # $site is a list of folders
               { find /usr/local /usr/lib /usr/lib64 /opt $site -name "$l" 2>/dev/null || true; } | head -n 1 | xargs -r dirname
             done | sort -u | paste -sd: -)
      [ -n "$dirs" ] && export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      unresolved=$(missing_libs)
    fi
    # cuDNN's fused attention needs 9.16 or newer (older ones make mptrain take the slower GEMM path): when the one
    # found is older, a newer one elsewhere (the nvidia-cudnn wheel beside torch) goes first.
    cudnn_version() { "$py" -c 'import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).cudnnGetVersion())' "$1" 2>/dev/null || echo 0; }
    if [ -n "${bin[test_gpu]:-${bin[bench_train]:-}}" ]; then
      found=$(ldd "${bin[test_gpu]:-${bin[bench_train]}}" 2>/dev/null | awk '/libcudnn.so/ {print $3}' | head -n 1)
      best=$found best_v=$([ -n "$found" ] && cudnn_version "$found" || echo 0)
      site=$("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
      # shellcheck disable=SC2086 # $site is a list of folders
      for cand in $({ find $site /usr/local /opt -name 'libcudnn.so.9' 2>/dev/null || true; } | sort -u); do
        v=$(cudnn_version "$cand")
        if [ "$v" -gt "$best_v" ]; then best=$cand best_v=$v; fi
      done
      echo "cuDNN: $found ($(cudnn_version "${found:-none}")) linked; newest found $best ($best_v)" >>"$log"
      if [ -n "$best" ] && [ "$best" != "$found" ]; then
        export LD_LIBRARY_PATH="$(dirname "$best")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        detail="$detail; cuDNN $best_v from $(dirname "$best") (the one found first was $(cudnn_version "$found"))"
      fi
      [ "$best_v" -lt 91600 ] && detail="$detail; cuDNN $best_v: fused attention needs 9.16 or newer (GEMM attention)"
    fi
    # CUPTI (bench_train --kernel-times opens libcupti.so.13 with dlopen, so ldd does not ask for it): the
    # toolkit's, or the nvidia-cuda-cupti wheel's beside torch, unless the loader already finds one.
    if ! ldconfig -p 2>/dev/null | grep -q 'libcupti\.so\.13'; then
      site=$("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
      # shellcheck disable=SC2086 # $site is a list of folders
      cupti=$({ find ${lib_dir:-} /usr/local /opt $site -name 'libcupti.so.13' 2>/dev/null || true; } | head -n 1)
      [ -n "$cupti" ] && export LD_LIBRARY_PATH="$(dirname "$cupti")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "CUPTI: ${cupti:-not found (bench_train --kernel-times will say so)}" >>"$log"
    fi
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>"$log"
    [ ${#missing[@]} -gt 0 ] && { build_ok=0; detail="$detail; binaries missing: ${missing[*]}"; }
    [ -n "$unresolved" ] && { build_ok=0; detail="$detail; shared libraries not found (carry them, --lib-dir): $(
      paste -sd' ' - <<<"$unresolved")"; }
  fi
  record build "$([ $build_ok = 1 ] && echo ok || echo failed)" "$detail"
fi
# have NAME...: all of these binaries were found (their stage says which are missing otherwise).
have() { local b; for b in "$@"; do [ -n "${bin[$b]:-}" ] || return 1; done; }
absent() { local b m=(); for b in "$@"; do [ -n "${bin[$b]:-}" ] || m+=("$b"); done; echo "${m[*]}"; }

# ---------------------------------------------------------------- tests
if wanted tests; then
  begin tests
  if [ $run_gpu = 0 ]; then
    record tests skipped "$no_gpu_reason"
  elif ! have test_gpu test_nn; then
    record tests failed "not run: binaries missing: $(absent test_gpu test_nn) (see build)"
  else
    # The goldens' folder is compiled into test_nn and test_gpu: link it when the binaries were built elsewhere.
    for b in test_nn test_gpu; do
      g=$(grep -aoE -m1 '/[[:alnum:]_./+-]*/tests/goldens' "${bin[$b]}" | head -n 1 || true)
      if [ -n "$g" ] && [ ! -e "$g" ] && mkdir -p "$(dirname "$g")" 2>/dev/null && ln -s "$repo/tests/goldens" "$g"; then
        echo "gpu-suite: linked $g -> $repo/tests/goldens (the path compiled into $b)"
      fi
    done
    mkdir -p "$out/raw/tests"
    # tag|binary|gtest filter|MPT_TEST_DEVICE
    runs=("test_gpu|test_gpu|*|" "test_nn.GptGolden.on_cuda|test_nn|GptGolden.*|cuda:0")
    for b in test_core test_optim test_kernels test_nn test_amp test_fp8 test_train test_ops; do
      runs+=("$b.cuda|$b|Cuda*:CublasLt*:OptimCuda*:Stream.Gpu*|")
    done
    failures=() summary=()
    log=$out/logs/tests.log
    : >"$log"
    for r in "${runs[@]}"; do
      IFS='|' read -r tag b f dev <<<"$r"
      if ! have "$b"; then failures+=("$tag: binary missing"); continue; fi
      limit=$((quick ? 300 : 900))
      [ "$b" = test_gpu ] || limit=$((quick ? 120 : 600))
      part=$bin_tmp/$b.log
      rc=0
      (cd "$out/raw/tests" && MPT_TEST_DEVICE=$dev run_logged "$part" "$limit" "${bin[$b]}" --gtest_filter="$f" \
        --gtest_output="json:$out/raw/tests/$tag.json") || rc=$?
      cat "$part" >>"$log"
      passed=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?.*/\1/p' "$part" | tail -n 1)
      bad_skips=$(sed -nE 's/^\[  SKIPPED \] ([A-Za-z][^ ]*).*/\1/p' "$part" |
                  { grep -vE 'NoGpu|CudaWithoutGpu|NoDriver' || true; } | sort -u | wc -l)
      summary+=("$tag ${passed:-0} passed")
      if [ $rc != 0 ]; then failures+=("$tag $(why $rc "$limit" "$part")")
      elif [ "$bad_skips" -gt 0 ]; then failures+=("$tag: $bad_skips case(s) skipped on a GPU machine (logs/tests.log)"); fi
    done
    if [ ${#failures[@]} = 0 ]; then record tests ok "${summary[*]}"
    else record tests failed "$(printf '%s; ' "${failures[@]}")(${summary[*]})"; fi
  fi
fi

# ---------------------------------------------------------------- kernels
if wanted kernels; then
  begin kernels
  if [ $run_gpu = 0 ]; then
    record kernels skipped "$no_gpu_reason"
  elif ! have bench_kernels; then
    record kernels failed "not run: bench_kernels missing (see build)"
  else
    args=(--json "$out/raw/bench_kernels.json")
    [ $quick = 1 ] && args+=(--widths 768 --reps 3 --elements 8388608)
    limit=$((quick ? 120 : 600))
    rc=0
    run_logged "$out/logs/kernels.log" "$limit" "${bin[bench_kernels]}" "${args[@]}" || rc=$?
    if [ $rc = 0 ]; then record kernels ok "host CPU (bench_kernels has no device option): raw/bench_kernels.json"
    else record kernels failed "bench_kernels $(why $rc "$limit" "$out/logs/kernels.log")"; fi
  fi
fi

# ---------------------------------------------------------------- fp8 (bench_fp8 on cuda:0)
if wanted fp8; then
  begin fp8
  if [ $run_gpu = 0 ]; then
    record fp8 skipped "$no_gpu_reason"
  elif ! have bench_fp8; then
    record fp8 failed "not run: bench_fp8 missing (see build)"
  else
    limit=$((quick ? 120 : 600))
    rc=0
    # GPT 1.3B's MLP up-projection, then GPT-2 124M's, at batch 8 x 1024.
    run_logged "$out/logs/fp8.log" "$limit" "${bin[bench_fp8]}" --device cuda --tokens 8192 --in 2048 --out 8192 \
      --reps "$((quick ? 5 : 20))" --json "$out/raw/bench_fp8-1.3b.json" || rc=$?
    [ $rc = 0 ] && { run_logged "$out/logs/fp8.log" "$limit" "${bin[bench_fp8]}" --device cuda --tokens 8192 --in 768 \
      --out 3072 --reps "$((quick ? 5 : 20))" --json "$out/raw/bench_fp8-124m.json" || rc=$?; }
    if [ $rc = 0 ]; then record fp8 ok "raw/bench_fp8-1.3b.json, raw/bench_fp8-124m.json"
    else record fp8 failed "bench_fp8 $(why $rc "$limit" "$out/logs/fp8.log")"; fi
  fi
fi

# ---------------------------------------------------------------- quant (bench_generate --quantized on cuda:0)
if wanted quant; then
  begin quant
  if [ $run_gpu = 0 ]; then
    record quant skipped "$no_gpu_reason"
  elif ! have bench_generate; then
    record quant failed "not run: bench_generate missing (see build)"
  else
    limit=$((quick ? 120 : 600))
    rc=0
    run_logged "$out/logs/quant.log" "$limit" "${bin[bench_generate]}" --device cuda --layers 12 --heads 12 --embd 768 \
      --seq 1024 --vocab 50304 --tokens "$((quick ? 100 : 400))" --precision bf16 --quantized int8,int4,fp8 \
      --json "$out/raw/bench_generate-124m.json" || rc=$?
    if [ $rc = 0 ]; then record quant ok "raw/bench_generate-124m.json"
    else record quant failed "bench_generate $(why $rc "$limit" "$out/logs/quant.log")"; fi
  fi
fi

# ---------------------------------------------------------------- gemm and train (compare_pytorch.py)
compare=("$py" benchmarks/compare_pytorch.py --device cuda --batch "$batch")
[ -n "$peak" ] && compare+=(--peak-tflops "$peak")
[ -n "$peak_fp8" ] && compare+=(--peak-fp8-tflops "$peak_fp8")
# compare_pytorch's exit status: 2 no GPU, 3 one side missing (PyTorch, or its CUDA build, or bench_train).
compare_why() {
  case $1 in
    2) printf 'no GPU visible to it: %s' "$(grep -m1 'no GPU visible' "$2" | cut -c1-400)" ;;
    3) printf 'ran partly: %s' "$(grep -E 'skipped:|nothing to run|no PyTorch' "$2" | tr '\n' ' ' | cut -c1-500)" ;;
    1) printf '%s run(s) failed (raw/*.md lists them), the first: %s' "$(grep -c '^Failed: ' "$2")" \
         "$(grep -m1 '^Failed: ' "$2" | cut -c9-400)"
       grep -q 'rows skipped:' "$2" && printf '; %s' "$(grep -m1 'rows skipped:' "$2" | cut -c18-300)" ;;
    *) why "$1" "$3" "$2" ;;
  esac
}
if wanted gemm; then
  begin gemm
  if [ $run_gpu = 0 ]; then
    record gemm skipped "$no_gpu_reason"
  else
    limit=$((quick ? 180 : 600))
    rc=0
    run_logged "$out/logs/gemm.log" "$limit" "${compare[@]}" --gemm-only --steps "$((quick ? 4 : 20))" \
      --timeout "$limit" --json "$out/raw/gemm.json" || rc=$?
    if [ $rc = 0 ]; then record gemm ok "cuBLAS through torch: raw/gemm.json"
    else record gemm failed "compare_pytorch --gemm-only $(compare_why $rc "$out/logs/gemm.log" "$limit")"; fi
  fi
fi
if wanted profile; then
  begin profile
  if [ $run_gpu = 0 ]; then
    record profile skipped "$no_gpu_reason"
  elif ! have bench_train; then
    record profile failed "not run: bench_train missing (see build)"
  else
    failures=() done_=()
    for p in bf16 fp8-delayed; do
      limit=$((quick ? 150 : 600))
      rc=0
      run_logged "$out/logs/profile.log" "$limit" "${bin[bench_train]}" --device cuda --precision $p --layers 12 \
        --heads 12 --embd 768 --seq 1024 --vocab 50257 --batch "$batch" --warmup 2 --steps "$((quick ? 3 : 10))" \
        --profile 40 --kernel-times 40 --cuda-graph --json "$out/raw/profile-$p.json" || rc=$?
      if [ $rc = 0 ]; then done_+=("$p"); else failures+=("$p $(why $rc "$limit" "$out/logs/profile.log")"); fi
    done
    # bench_train's default shape, small enough to be host-bound: eager against CUDA graph replays.
    rc=0
    run_logged "$out/logs/profile.log" 150 "${bin[bench_train]}" --device cuda --precision bf16 --steps 20 \
      --cuda-graph --json "$out/raw/profile-small-graph.json" || rc=$?
    if [ $rc = 0 ]; then done_+=("small-graph"); else failures+=("small-graph $(why $rc 150 "$out/logs/profile.log")"); fi
    if [ ${#failures[@]} = 0 ]; then record profile ok "${done_[*]}: logs/profile.log, raw/profile-*.json"
    else record profile failed "$(printf '%s; ' "${failures[@]}")"; fi
  fi
fi
if wanted train; then
  begin train
  if [ $run_gpu = 0 ]; then
    record train skipped "$no_gpu_reason"
  else
    if [ $quick = 1 ]; then runs=(--reps 1 --warmup 2 --steps 5 --timeout 180); limit=420
    else runs=(--reps 3 --warmup 3 --steps 10 --timeout 600 --compile); limit=3000; fi
    [ $quick = 1 ] && [ $compile = 1 ] && runs+=(--compile) && limit=900
    rc=0
    run_logged "$out/logs/train.log" "$limit" "${compare[@]}" --bench "${bin[bench_train]:-bench_train-missing}" \
      --models "$models" "${runs[@]}" --json "$out/raw/train.json" --markdown "$out/raw/train.md" || rc=$?
    if [ $rc = 0 ]; then record train ok "GPT-2 124M, T 1024, batch $batch: raw/train.json, raw/train.md"
    else record train failed "compare_pytorch $(compare_why $rc "$out/logs/train.log" "$limit")"; fi
  fi
fi

# ---------------------------------------------------------------- report: gpu-suite.json and gpu-suite.md
json_str() {
  local s=$1
  s=${s//\\/\\\\} s=${s//\"/\\\"} s=${s//$'\n'/\\n} s=${s//$'\t'/\\t} s=${s//$'\r'/}
  printf '"%s"' "$(tr -d '\000-\037' <<<"$s")"
}
{
  printf '{"suite": "tools/gpu-suite.sh", "started": %s, "host": %s, "commit": %s, "quick": %s, "stages": [' \
    "$(json_str "$started")" "$(json_str "$(hostname)")" "$(json_str "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)")" \
    "$([ $quick = 1 ] && echo true || echo false)"
  for i in "${!names[@]}"; do
    [ "$i" = 0 ] || printf ', '
    printf '{"name": %s, "status": %s, "seconds": %s, "detail": %s}' "$(json_str "${names[$i]}")" \
      "$(json_str "${statuses[$i]}")" "${secs[$i]}" "$(json_str "${details[$i]}")"
  done
  printf ']}\n'
} >"$out/gpu-suite.json"
{
  printf '# GPU suite (%s, %s, commit %s%s)\n\n| stage | status | seconds | detail |\n|---|---|---|---|\n' "$started" \
    "$(hostname)" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$([ $quick = 1 ] && echo ', --quick')"
  for i in "${!names[@]}"; do
    printf '| %s | %s | %s | %s |\n' "${names[$i]}" "${statuses[$i]}" "${secs[$i]}" "${details[$i]//|/\\|}"
  done
  if [ -f "$out/raw/train.md" ]; then printf '\n## Training: mptrain against PyTorch on CUDA\n\n'; cat "$out/raw/train.md"; fi
} >"$out/gpu-suite.md"
# With a Python at hand, the raw results go into the one JSON file too (the stage table above stands without it).
merger=$(command -v "$py" || command -v python3 || true)
if [ -n "$merger" ]; then
  "$merger" - "$out" <<'EOF' || echo "gpu-suite: could not merge raw/ into gpu-suite.json (the stage records are there)" >&2
import glob, json, os, sys
out = sys.argv[1]
suite = json.load(open(os.path.join(out, "gpu-suite.json")))
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return None if isinstance(e, FileNotFoundError) else {"unreadable": str(e)}
raw = os.path.join(out, "raw")
if os.path.exists(os.path.join(raw, "nvidia-smi.csv")):
    suite["gpus"] = [ln.strip() for ln in open(os.path.join(raw, "nvidia-smi.csv")) if ln.strip()]
tests = {}
for path in sorted(glob.glob(os.path.join(raw, "tests", "*.json"))):
    t = load(path) or {}
    cases = [c for s in t.get("testsuites", []) for c in s.get("testsuite", [])]
    tests[os.path.basename(path)[:-5]] = {
        "tests": t.get("tests"), "failures": t.get("failures"), "disabled": t.get("disabled"),
        "skipped": [c["classname"] + "." + c["name"] for c in cases if c.get("result") == "SKIPPED"],
        "failed": [c["classname"] + "." + c["name"] for c in cases if c.get("failures")]}
suite.update(tests=tests or None, kernels=load(os.path.join(raw, "bench_kernels.json")),
             fp8={s: load(os.path.join(raw, "bench_fp8-%s.json" % s)) for s in ("1.3b", "124m")},
             quant=load(os.path.join(raw, "bench_generate-124m.json")),
             profile={p: load(os.path.join(raw, "profile-%s.json" % p)) for p in ("bf16", "fp8-delayed", "small-graph")},
             gemm=load(os.path.join(raw, "gemm.json")), train=load(os.path.join(raw, "train.json")))
with open(os.path.join(out, "gpu-suite.json"), "w") as f:
    json.dump(suite, f, indent=2)
EOF
fi

failed=() skipped=()
for i in "${!names[@]}"; do
  case ${statuses[$i]} in failed) failed+=("${names[$i]}") ;; skipped) skipped+=("${names[$i]}") ;; esac
done
printf '\ngpu-suite: %s and %s written\n' "$out/gpu-suite.json" "$out/gpu-suite.md"
if [ ${#failed[@]} -gt 0 ] || [ ${#skipped[@]} -gt 0 ]; then
  echo "gpu-suite: FAILED: ${failed[*]:-none}; not run: ${skipped[*]:-none} (details above and in the JSON; logs in" \
    "$out/logs)" >&2
  exit 1
fi
echo "gpu-suite: passed"
