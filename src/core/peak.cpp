// src/core/peak.cpp: dense peaks for MFU: the GPU datasheet table and the CPU's register-only loops, measured once.
#include "mpt/core/peak.h"

#include "kernels/cpu/peak.h"
#include "mpt/core/error.h"

namespace mpt {
namespace {

void check_gemm_dtype(DType t) {
  MPT_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || is_fp8(t),
            "[dense_peak] expected a GEMM compute dtype (f32, f16, bf16, f8e4m3 or f8e5m2), got {}", t);
}

DensePeak from_loop(const kernels::cpu::PeakLoop& loop) {
  if (loop.gflops <= 0) return {0.0, "no register-only peak loop runs on this CPU (it needs at least AVX2 and FMA)"};
  return {loop.gflops * 1e9, fmt::format("CPU register-only {} loop, {} threads", loop.isa, loop.threads)};
}

// Function-local statics: each loop runs once per process, on first use, and concurrent first callers wait for it.
const DensePeak& cpu_fp32_peak() {
  static const DensePeak p = from_loop(kernels::cpu::fp32_fma_peak());
  return p;
}

const DensePeak& cpu_bf16_peak() {
  static const DensePeak p = [] {
    const kernels::cpu::PeakLoop amx = kernels::cpu::amx_bf16_peak(), dot = kernels::cpu::bf16_dot_peak();
    const kernels::cpu::PeakLoop& best = amx.gflops >= dot.gflops ? amx : dot;
    return best.gflops > 0 ? from_loop(best) : cpu_fp32_peak();
  }();
  return p;
}

}  // namespace

DensePeak datasheet_peak(std::string_view gpu_name, DType gemm_dtype) {
  check_gemm_dtype(gemm_dtype);
  struct Sheet {
    std::string_view match;  // a substring of the CUDA device name; the more specific first
    double fp32, bf16, fp8;  // TFLOP/s, dense (fp32: CUDA cores, without TF32; bf16 = fp16; fp8 0: no FP8 cores)
  };
  static constexpr Sheet kSheets[] = {
      {"H200", 66.9, 989.4, 1978.9},
      {"H100 PCIe", 51.0, 756.5, 1513.0},
      {"H100 NVL", 60.0, 835.5, 1670.5},
      {"H100", 66.9, 989.4, 1978.9},  // SXM
      {"A100", 19.5, 312.0, 0.0},
      {"L40S", 91.6, 362.1, 733.0},
  };
  for (const Sheet& s : kSheets) {
    if (gpu_name.find(s.match) == std::string_view::npos) continue;
    const bool fp8 = is_fp8(gemm_dtype) && s.fp8 > 0;
    const double tflops = fp8 ? s.fp8 : gemm_dtype == DType::F32 ? s.fp32 : s.bf16;
    const std::string_view kind =
        fp8 ? "fp8" : gemm_dtype == DType::F32 ? "fp32" : gemm_dtype == DType::F16 ? "fp16" : "bf16";
    return {tflops * 1e12, fmt::format("{} datasheet, {} dense", s.match, kind)};
  }
  return {0.0, fmt::format("no datasheet peak for '{}' (known: H100, H200, A100, L40S): MFU unknown", gpu_name)};
}

DensePeak dense_peak(DType gemm_dtype, Device device) {
  check_gemm_dtype(gemm_dtype);
  check_device_available(device);
  if (device.is_cuda()) {
    return datasheet_peak(cuda_status().devices.at(static_cast<size_t>(device.index())).name, gemm_dtype);
  }
  const bool bf16_path = gemm_dtype == DType::BF16 || is_fp8(gemm_dtype);
  return bf16_path ? cpu_bf16_peak() : cpu_fp32_peak();
}

double mfu(double achieved_flops, const DensePeak& peak) {
  return peak.flops > 0 ? achieved_flops / peak.flops : 0.0;
}

}  // namespace mpt
