// tests/support/device_test.h: running tests on a CUDA device next to the CPU: the device under test, skips, copies, and CUDA-vs-CPU comparisons (bit-exact under emulation, tolerances on a real GPU).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "mpt/core/device.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace mpt::testing {

// The device a device-parameterised test runs on: MPT_TEST_DEVICE ("cpu", "cuda", "cuda:0", ...) or the CPU when
// unset or empty. Only the syntax is checked here (Device::parse); use device_unusable_reason before using it.
Device test_device();

// Empty when `device` can run tests (the CPU, or a CUDA device the probe found with compute capability >= min_major),
// else why not (the probe's reason: no CUDA backend, no driver, no such device, too old).
std::string device_unusable_reason(Device device, int min_major = 0);

// True in the emulation build (MPT_CUDA_EMULATION is defined publicly there): the CUDA backend runs on the CPU
// against test doubles of cudart/cuBLASLt/NCCL, with the custom kernels compiled as host C++ with -ffp-contract=off,
// so order-identical kernels give the CPU backend's bits.
constexpr bool cuda_is_emulated() {
#if defined(MPT_CUDA_EMULATION)
  return true;
#else
  return false;
#endif
}

Tensor to_cpu(const Tensor& t);  // a copy (or t itself) on the CPU, same dtype
Tensor to_gpu(const Tensor& t);  // a copy on cuda:0, same dtype

// How a CUDA result must match the CPU's.
struct Match {
  // BitExactUnderEmulation: same bits when cuda_is_emulated() (the kernels do the same arithmetic in the same
  // order); on a real GPU (FMA contraction, libdevice, other reduction trees in libraries) `tol` applies.
  // Tolerance: `tol` always (the two backends compute differently even under emulation, e.g. GEMMs).
  enum class Kind { BitExactUnderEmulation, Tolerance } kind;
  Tolerance tol;
  // Same bits under emulation; on a GPU tolerance(dtype) scaled by slack.
  static Match exact(DType dtype, double gpu_slack = 2) {
    return {Kind::BitExactUnderEmulation, scaled(dtype, gpu_slack)};
  }
  // Same bits under emulation; on a GPU the explicit tolerance (integer codes, derived bounds).
  static Match exact(Tolerance gpu_tol) { return {Kind::BitExactUnderEmulation, gpu_tol}; }
  // tolerance(dtype) scaled by slack, also under emulation.
  static Match close(DType dtype, double slack) { return {Kind::Tolerance, scaled(dtype, slack)}; }
  static Match close(Tolerance t) { return {Kind::Tolerance, t}; }
  static Tolerance scaled(DType dtype, double slack) {
    Tolerance t = tolerance(dtype);
    t.rtol *= slack;
    t.atol *= slack;
    return t;
  }
};

// Expects `got` (on CUDA, or any device) to match `want` (usually the CPU's result) as `m` says: same dtype and shape;
// bit-exact compares every byte after copying both to the CPU and names the first differing element and the count.
void expect_match(const Tensor& got, const Tensor& want, const Match& m, const std::string& what);

// Every entry of two state dicts (same keys; each tensor as expect_match with `m`).
void expect_match(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want, const Match& m,
                  const std::string& what);

// max |got - want| / max |want| (the normwise relative error the GPT goldens use; max |got - want| when want is 0).
double normwise_error(const Tensor& got, const Tensor& want);

// Unit roundoff of a result dtype's final rounding (f32 2^-24, bf16 2^-8, f16 2^-11, e4m3 2^-4, e5m2 2^-3).
double unit_roundoff(DType t);

// |x| as f64 on the CPU.
Tensor abs64(const Tensor& t);

// The CPU GEMM (oneDNN, FP32 accumulation in its own order) and the CUDA one (cuBLASLt; emulated: float64
// accumulation, one rounding) each compute sum_k a_ik b_kj within k u32 (|A||B|)_ij (the standard gamma_k bound,
// u32 = 2^-24), and each rounds once to the output dtype (<= u_out |value|). So elementwise
//   |got - want| <= 2 k u32 mag_ij + 2 u_out |want_ij| + atol
// with mag = |alpha| |A||B| (f64, the result's shape, from abs64 operands) and atol the f16 subnormal step plus
// `extra_atol`. Not bit-exact even under emulation: the accumulation orders differ.
// `accum_u` replaces u32 where the device's accumulation is coarser (fp8_accumulation_roundoff()).
void expect_gemm_close(const Tensor& got, const Tensor& want, const Tensor& mag, int64_t k, double extra_atol,
                       const std::string& what, double accum_u = 0x1p-24);

// The unit roundoff of the device's accumulation of FP8 products, for expect_gemm_close's accum_u. The emulated
// cuBLASLt accumulates in float64, so FP32's 2^-24 bounds it. Real Ada/Hopper FP8 tensor cores do not accumulate in
// full FP32 (DeepSeek-V3 technical report, section 3.3.2: about 14 bits retained inside the MMA; cuBLASLt without
// FAST_ACCUM promotes the partial sums to FP32 between K blocks). Measured on an H200 (docs/benchmarks.md, GPU
// section): the worst |got - CPU| / (k |A||B|) over the FP8 GEMM and fp8_linear tests was 2^-19.7, so 2^-17 in the
// bound 2 k u |A||B| keeps an 8x margin and still fails a GEMM whose error grows faster than the accumulation's.
double fp8_accumulation_roundoff();

// The extra error of a bias that cuBLASLt's BIAS epilogue reads in a narrower type than the CPU's f32 (the output's
// dtype, bf16 for FP8 GEMMs with an f32 output; torch's cuBLASLt addmm does the same): one rounding of each bias
// element, <= u(read type) max |bias|. 0 when the bias is read in f32 (or on the CPU).
double bias_read_roundoff(const Tensor& bias, DType out, bool fp8_inputs);

}  // namespace mpt::testing

// Skips the test (GTEST_SKIP, reported as skipped with the reason) unless cuda:0 is usable with compute capability
// at least min_major. Use it before touching Device::cuda().
#define MPT_REQUIRE_GPU(min_major)                                                                     \
  do {                                                                                                 \
    const std::string mpt_reason_ = ::mpt::testing::device_unusable_reason(::mpt::Device::parse("cuda:0"), \
                                                                          (min_major));                \
    if (!mpt_reason_.empty()) GTEST_SKIP() << mpt_reason_;                                             \
  } while (0)
