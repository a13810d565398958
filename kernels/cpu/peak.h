// kernels/cpu/peak.h: this CPU's compute peaks, measured by register-only loops on every OpenMP thread.
#pragma once

#include <cstdint>

namespace mpt::kernels::cpu {

// Each loop keeps its operands and independent accumulators in registers (no loads or stores in the timed body), so
// it runs at the issue rate of its instruction: no real GEMM, which also moves data, can beat it. That makes these the
// honest denominators of MFU on a CPU. Each thread is timed by its own CPU time (CLOCK_THREAD_CPUTIME_ID), so other
// processes sharing the cores do not lower the figure. A loop the CPU (or the OS) cannot run reports gflops 0, isa "".
struct PeakLoop {
  double gflops = 0;    // the sum over threads of each one's rate; the median of a few runs
  int threads = 0;      // OpenMP threads that ran it at once
  const char* isa = ""; // the instruction measured, e.g. "AVX-512 FMA"
};

// FP32 fused multiply-add: 512-bit with AVX-512F, else 256-bit with AVX2 + FMA.
PeakLoop fp32_fma_peak();
// AVX512-BF16 dot product (vdpbf16ps: 2 bf16 products summed into each FP32 lane).
PeakLoop bf16_dot_peak();
// AMX-BF16 tile dot product (tdpbf16ps, 16x16 FP32 += 16x32 by 32x16 bf16). On Linux the process first asks for
// permission to use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM); if refused, gflops is 0.
PeakLoop amx_bf16_peak();

}  // namespace mpt::kernels::cpu
