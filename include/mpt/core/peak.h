// mpt/core/peak.h: the dense compute peak that MFU divides by: a GPU's datasheet figure, a CPU's register-only loop.
#pragma once

#include <string>
#include <string_view>

#include "mpt/core/device.h"
#include "mpt/core/dtype.h"

namespace mpt {

// MFU must never flatter. A GPU's peak is its datasheet's dense (no sparsity) tensor figure. A CPU's is measured once
// per process by register-only loops (kernels/cpu/peak.h) on all OpenMP threads, each thread timed by its own CPU
// time: no real GEMM, which also loads and stores, can run faster, and other processes on a shared machine do not
// lower it (they lower the GEMMs' wall-clock rate, which MFU then shows). So an MFU above 1 means a bug in the FLOP
// count or the timing: print it as it is, with a warning, and never clamp it away.
struct DensePeak {
  double flops = 0;    // FLOP/s; 0 when unknown (then `source` says why)
  std::string source;  // one line, e.g. "CPU register-only AVX-512 FMA loop, 2 threads" or "H100 datasheet, bf16 dense"
};

// The peak for GEMMs computing in `gemm_dtype` on `device`: F32, F16, BF16, or an FP8 type (F8E4M3, F8E5M2); any
// other dtype throws mpt::Error, as does a CUDA device that does not exist.
//  - CUDA: datasheet_peak() of the device's name. F32 is without TF32; FP8 falls back to the bf16 figure on GPUs
//    without FP8 tensor cores (A100).
//  - CPU: F32 and F16 (the CPU computes f16 GEMMs in f32: kernels/cpu/gemm.cpp): the FP32 FMA loop. BF16 and FP8 (FP8
//    GEMMs run as bf16 on the CPU): the faster of the AMX-BF16 and AVX512-BF16 loops, else the FP32 FMA loop. Each loop
//    runs at most once per process (thread-safe); later calls return the cached figure.
DensePeak dense_peak(DType gemm_dtype, Device device);

// The datasheet table behind the CUDA case, by the name CUDA reports (e.g. "NVIDIA H100 80GB HBM3"): H100, H200, A100,
// L40S. Any other GPU gives flops 0 and a source naming it.
DensePeak datasheet_peak(std::string_view gpu_name, DType gemm_dtype);

// achieved_flops / peak.flops, unclamped (see above); 0 when the peak is unknown (peak.flops == 0).
double mfu(double achieved_flops, const DensePeak& peak);

}  // namespace mpt
