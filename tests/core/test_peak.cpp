// tests/core/test_peak.cpp: the register-only CPU peak loops against theoretical bounds, dense_peak and its cache, the
// GPU datasheet table, and mfu.
#include <gtest/gtest.h>
#include <omp.h>

#include "test_util.h"

#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/peak.h"
#include "mpt/core/device.h"
#include "mpt/core/peak.h"

namespace {

using mpt::Device;
using mpt::DType;
using mpt::testing::contains;
namespace kc = mpt::kernels::cpu;

// No x86 core clocks above this; the bounds below are FLOP per cycle per core (one core per thread) times it.
constexpr double kMaxGhz = 6.0;

double bound_gflops(double flops_per_cycle, const kc::PeakLoop& p) { return flops_per_cycle * kMaxGhz * p.threads; }

TEST(Peak, Fp32FmaLoopIsPositiveAndBelowTheHardwareBound) {
  const mpt::CpuFeatures& f = mpt::cpu_features();
  const kc::PeakLoop p = kc::fp32_fma_peak();
  if (!f.avx2 && !f.avx512f) {
    EXPECT_EQ(p.gflops, 0.0);
    GTEST_SKIP() << "the CPU has neither AVX-512 nor AVX2";
  }
  EXPECT_EQ(p.threads, omp_get_max_threads());
  EXPECT_GT(p.gflops, 0.0);
  // 2 FLOP per FMA x lanes x 2 FMA ports.
  const int lanes = f.avx512f ? 16 : 8;
  EXPECT_STREQ(p.isa, f.avx512f ? "AVX-512 FMA" : "AVX2 FMA");
  EXPECT_LT(p.gflops, bound_gflops(2.0 * lanes * 2, p)) << p.threads << " threads";
}

TEST(Peak, Bf16DotLoopIsAtLeastTheFp32Loop) {
  if (!mpt::cpu_features().avx512_bf16) GTEST_SKIP() << "the CPU has no AVX512-BF16";
  const kc::PeakLoop dot = kc::bf16_dot_peak(), fma = kc::fp32_fma_peak();
  EXPECT_STREQ(dot.isa, "AVX512-BF16 dot product");
  EXPECT_GE(dot.gflops, fma.gflops);  // twice the products per instruction at the same issue rate
  EXPECT_LT(dot.gflops, bound_gflops(2.0 * 2 * 16 * 2, dot));  // 2 products + 2 adds per lane, 2 ports
}

TEST(Peak, AmxLoopIsAtLeastTheBf16DotLoop) {
  const mpt::CpuFeatures& f = mpt::cpu_features();
  if (!f.amx_bf16) {
    EXPECT_EQ(kc::amx_bf16_peak().gflops, 0.0);
    GTEST_SKIP() << "the CPU (or its OS) has no AMX-BF16";
  }
  const kc::PeakLoop amx = kc::amx_bf16_peak(), dot = kc::bf16_dot_peak();
  EXPECT_STREQ(amx.isa, "AMX-BF16 tile dot product");
  EXPECT_GE(amx.gflops, dot.gflops);
  EXPECT_LT(amx.gflops, bound_gflops(16.0 * 16 * 32 * 2 / 16, amx));  // one 16x16x32 tile product per 16 cycles
}

TEST(Peak, CpuDensePeakIsTheLoopFigureMeasuredOnce) {
  const mpt::DensePeak f32 = mpt::dense_peak(DType::F32, Device::cpu());
  const mpt::DensePeak again = mpt::dense_peak(DType::F32, Device::cpu());
  EXPECT_EQ(again.flops, f32.flops);  // cached: bit-identical
  EXPECT_EQ(again.source, f32.source);
  if (!mpt::cpu_features().avx2 && !mpt::cpu_features().avx512f) {
    EXPECT_EQ(f32.flops, 0.0);
    EXPECT_TRUE(contains(f32.source, "no register-only peak loop runs on this CPU")) << f32.source;
    GTEST_SKIP() << "the CPU has neither AVX-512 nor AVX2";
  }
  const kc::PeakLoop loop = kc::fp32_fma_peak();  // a fresh measurement: the same order
  ASSERT_GT(loop.gflops, 0.0);
  EXPECT_GT(f32.flops, 0.5 * loop.gflops * 1e9);
  EXPECT_LT(f32.flops, 2.0 * loop.gflops * 1e9);
  EXPECT_TRUE(contains(f32.source, "CPU register-only")) << f32.source;
  EXPECT_TRUE(contains(f32.source, std::string(loop.isa) + " loop, " + std::to_string(omp_get_max_threads()) +
                                       " threads")) << f32.source;
  // f16 GEMMs compute in f32 on the CPU; FP8 ones in bf16.
  EXPECT_EQ(mpt::dense_peak(DType::F16, Device::cpu()).flops, f32.flops);
  const mpt::DensePeak bf16 = mpt::dense_peak(DType::BF16, Device::cpu());
  EXPECT_GE(bf16.flops, f32.flops);
  EXPECT_EQ(mpt::dense_peak(DType::F8E4M3, Device::cpu()).flops, bf16.flops);
  EXPECT_EQ(mpt::dense_peak(DType::F8E5M2, Device::cpu()).source, bf16.source);
  if (mpt::cpu_features().amx_bf16) {
    EXPECT_TRUE(contains(bf16.source, "AMX-BF16 tile dot product loop")) << bf16.source;
  } else if (mpt::cpu_features().avx512_bf16) {
    EXPECT_TRUE(contains(bf16.source, "AVX512-BF16 dot product loop")) << bf16.source;
  } else {
    EXPECT_EQ(bf16.source, f32.source);
  }
}

TEST(Peak, ConcurrentCallersSeeOneMeasurement) {
  std::vector<double> seen(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i)
    threads.emplace_back([&seen, i] { seen[i] = mpt::dense_peak(DType::BF16, Device::cpu()).flops; });
  for (std::thread& t : threads) t.join();
  for (double s : seen) EXPECT_EQ(s, seen[0]);
  EXPECT_EQ(mpt::dense_peak(DType::BF16, Device::cpu()).flops, seen[0]);
}

TEST(Peak, DatasheetTable) {
  const mpt::DensePeak h100 = mpt::datasheet_peak("NVIDIA H100 80GB HBM3", DType::BF16);
  EXPECT_DOUBLE_EQ(h100.flops, 989.4e12);
  EXPECT_EQ(h100.source, "H100 datasheet, bf16 dense");
  EXPECT_DOUBLE_EQ(mpt::datasheet_peak("NVIDIA H100 80GB HBM3", DType::F16).flops, 989.4e12);
  EXPECT_DOUBLE_EQ(mpt::datasheet_peak("NVIDIA H100 80GB HBM3", DType::F32).flops, 66.9e12);
  EXPECT_DOUBLE_EQ(mpt::datasheet_peak("NVIDIA H100 80GB HBM3", DType::F8E4M3).flops, 1978.9e12);
  EXPECT_DOUBLE_EQ(mpt::datasheet_peak("NVIDIA H200", DType::BF16).flops, 989.4e12);
  EXPECT_DOUBLE_EQ(mpt::datasheet_peak("NVIDIA H100 PCIe", DType::BF16).flops, 756.5e12);
  EXPECT_DOUBLE_EQ(mpt::datasheet_peak("NVIDIA L40S", DType::F8E5M2).flops, 733.0e12);
  // The A100 has no FP8 tensor cores: FP8 GEMMs are measured against bf16.
  const mpt::DensePeak a100 = mpt::datasheet_peak("NVIDIA A100-SXM4-80GB", DType::F8E4M3);
  EXPECT_DOUBLE_EQ(a100.flops, 312.0e12);
  EXPECT_EQ(a100.source, "A100 datasheet, bf16 dense");

  const mpt::DensePeak unknown = mpt::datasheet_peak("Some Unknown GPU", DType::BF16);
  EXPECT_EQ(unknown.flops, 0.0);
  EXPECT_TRUE(contains(unknown.source, "no datasheet peak for 'Some Unknown GPU'")) << unknown.source;
}

TEST(Peak, RefusesNonGemmDtypesAndMissingDevices) {
  EXPECT_MPT_ERROR(mpt::dense_peak(DType::I32, Device::cpu()), "[dense_peak] expected a GEMM compute dtype");
  EXPECT_MPT_ERROR(mpt::datasheet_peak("NVIDIA H100 80GB HBM3", DType::F64), "got f64");
  EXPECT_MPT_ERROR(mpt::dense_peak(DType::BF16, Device::parse("cuda:63")), "[cuda] cuda:63 was requested");
}

TEST(Peak, CudaDensePeakIsTheDatasheetOfItsName) {
  if (!mpt::cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << mpt::cuda_status().reason;
  const std::string& name = mpt::cuda_status().devices.at(0).name;
  const mpt::DensePeak p = mpt::dense_peak(DType::BF16, Device::cuda(0));
  EXPECT_EQ(p.flops, mpt::datasheet_peak(name, DType::BF16).flops);
  EXPECT_EQ(p.source, mpt::datasheet_peak(name, DType::BF16).source);
}

TEST(Peak, MfuIsTheUnclampedFraction) {
  const mpt::DensePeak peak{100e12, "test"};
  EXPECT_DOUBLE_EQ(mpt::mfu(40e12, peak), 0.4);
  EXPECT_DOUBLE_EQ(mpt::mfu(150e12, peak), 1.5);  // a bug to report, not to hide
  EXPECT_EQ(mpt::mfu(1e12, mpt::DensePeak{0.0, "unknown"}), 0.0);
}

}  // namespace
