// tests/emu/test_reduction_emu.cpp: the CUDA sum/mean, sum-of-squares, norm finish and finite check under
// emulation against the CPU kernels: the same canonical order, so bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/reduction.h"
#include "kernels/cuda/reduction.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;
using mpt::kernels::math::ReduceShape;

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed).template to_vector<T>();
}

template <class T>
void check_sum(const ReduceShape& s, int64_t misalign) {
  const int64_t n = s.outer * s.len * s.inner, outputs = s.outer * s.inner;
  const auto x_all = random_values<T>(n + misalign, 7 + n);
  const auto base = random_values<T>(outputs + 1, 9 + outputs);
  std::vector<float> workspace(cuda::sum_axis_workspace(s) + 1, NAN);
  // A plain sum, and an accumulated mean.
  for (bool accumulate : {false, true}) {
    const double divisor = accumulate ? static_cast<double>(s.len) : 1.0;
    auto want = base, got = base;
    cpu::sum_axis(x_all.data() + misalign, want.data(), s, divisor, accumulate);
    ASSERT_EQ(cuda::sum_axis(x_all.data() + misalign, got.data(), s, static_cast<float>(divisor), accumulate,
                             workspace.data(), nullptr),
              cudaSuccess);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(T)), 0)
        << "shape [" << s.outer << ", " << s.len << ", " << s.inner << "] accumulate=" << accumulate
        << " divisor=" << divisor << " misalign=" << misalign;
  }
}

}  // namespace

TEST(ReductionEmu, SumAxisMatchesCpuBitForBit) {
  // Rows (one warp per chunk) and columns (a thread per column), one pass and two (len > 2048).
  const ReduceShape shapes[] = {{3, 100, 1}, {2, 5000, 1}, {1, 33, 1}, {2, 37, 5}, {1, 2100, 3}, {1, 4097, 2}, {2, 0, 3}};
  check_sum<mpt::f16>({2, 2100, 1}, 0);
  check_sum<mpt::f16>({1, 2100, 3}, 1);
  for (const ReduceShape& s : shapes) {
    check_sum<float>(s, 1);
    check_sum<mpt::bf16>(s, 0);
  }
}

TEST(ReductionEmu, SumOfSquaresAndNormFinishMatchCpu) {
  for (int64_t n : {0, 1, 31, 2048, 2049, 7000}) {
    const auto x = random_values<float>(n + 1, 100 + n);
    const auto xb = random_values<mpt::bf16>(n + 1, 200 + n);
    std::vector<float> workspace(cuda::sum_axis_workspace({1, n, 1}) + 1, NAN);
    float got = NAN, got_b = NAN;
    ASSERT_EQ(cuda::sum_squares(x.data(), n, &got, workspace.data(), nullptr), cudaSuccess);
    ASSERT_EQ(cuda::sum_squares(xb.data() + 1, n, &got_b, workspace.data(), nullptr), cudaSuccess);
    EXPECT_EQ(got, cpu::sum_squares(x.data(), n)) << n;
    EXPECT_EQ(got_b, cpu::sum_squares(xb.data() + 1, n)) << n;
  }
  const std::vector<float> partials = {3.5f, 0.25f, 1e-3f, 7.0f};
  float norm = NAN;
  ASSERT_EQ(cuda::sqrt_of_sum(partials.data(), 4, &norm, nullptr), cudaSuccess);
  EXPECT_EQ(norm, std::sqrt(((3.5f + 0.25f) + 1e-3f) + 7.0f));
}

TEST(ReductionEmu, CheckFiniteFindsNaNAndInf) {
  std::vector<mpt::f16> h(3000, mpt::f16(1.0f));
  uint8_t flag = 1;
  ASSERT_EQ(cuda::check_finite(h.data(), 3000, &flag, nullptr), cudaSuccess);
  EXPECT_EQ(flag, 1);
  h[2999] = mpt::f16(std::numeric_limits<float>::infinity());
  ASSERT_EQ(cuda::check_finite(h.data(), 3000, &flag, nullptr), cudaSuccess);
  EXPECT_EQ(flag, 0);
  std::vector<float> f(513, 2.0f);
  f[256] = NAN;
  flag = 1;
  ASSERT_EQ(cuda::check_finite(f.data(), 513, &flag, nullptr), cudaSuccess);
  EXPECT_EQ(flag, 0);
  EXPECT_EQ(cuda::check_finite<float>(f.data(), 1, nullptr, nullptr), cudaErrorInvalidValue);
}
