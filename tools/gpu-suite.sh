#!/usr/bin/env bash
# tools/gpu-suite.sh: the CUDA test suite on a machine with a real GPU (docs/verification.md): build the cuda preset,
# run every test that needs a device, and fail if one of them skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv || true
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
cmake --preset cuda
cmake --build --preset cuda --target test_gpu test_core test_optim test_kernels test_nn test_amp test_ops
# Tests that need a device: tests/gpu (label gpu: every op family, training steps, the PyTorch goldens on cuda:0),
# the CUDA cases of core, optim and the cuBLASLt wrapper. Those written for machines without a GPU skip by design.
log=$(mktemp)
ctest --preset cuda -L gpu --output-on-failure | tee "$log"
ctest --preset cuda -R '^(Cuda|CublasLt|OptimCuda)|^Stream\.Gpu' --output-on-failure | tee -a "$log"
if grep -E '\(Skipped\)' "$log" | grep -vE 'NoGpu|CudaWithoutGpu|NoDriver'; then
  echo "gpu-suite: the tests above skipped on a GPU machine (see their reasons)" >&2
  exit 1
fi
echo "gpu-suite: passed"
