// tests/kernels/test_quantized_gemm_cpu.cpp: the CPU's int8 code GEMM sums exactly, whichever path this CPU takes
// (oneDNN's s8 matmul with VNNI; without it, whose pairs of products would saturate in int16, f32 K slices).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/quantized_gemm.h"

namespace mpt {
namespace {

// Codes at the range's ends, where int16 pairs overflow (2 x 127 x 127 > 32767), over K long enough to cross the
// f32 path's 512-long slices, against an int64 loop.
TEST(CpuQuantizedGemm, Int8CodesSumExactlyAtTheRangeEnds) {
  for (const int64_t k : {64, 1100}) {
    const int64_t m = 5, n = 7;
    std::vector<int8_t> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int8_t>(i % 3 == 0 ? 127 : -128 + static_cast<int>(i % 5));
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int8_t>(i % 4 == 0 ? -127 : 127 - static_cast<int>(i % 3));
    std::vector<int32_t> acc(static_cast<size_t>(m * n));
    kernels::cpu::gemm_s8s8s32(m, n, k, a.data(), b.data(), acc.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t want = 0;
        for (int64_t l = 0; l < k; ++l)
          want += int64_t{a[static_cast<size_t>(i * k + l)]} * b[static_cast<size_t>(j * k + l)];
        EXPECT_EQ(acc[static_cast<size_t>(i * n + j)], want) << "k " << k << " row " << i << " column " << j;
      }
    }
  }
}

}  // namespace
}  // namespace mpt
