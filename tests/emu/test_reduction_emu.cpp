// tests/emu/test_reduction_emu.cpp: the CUDA sum/mean, sum-of-squares, norm finish and finite check under
// emulation against the CPU kernels (the same canonical order, so bit for bit) or float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/reduction.h"
#include "kernels/cuda/optim.h"
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
  // The finish sums in a block tree (one block, thread j over partials j, j + 256, ...): against float64.
  for (int64_t count : {1, 4, 256, 5000}) {
    const auto p = random_values<float>(count, 300 + count);
    std::vector<float> partials(p.size());
    double want = 0;
    for (size_t k = 0; k < p.size(); ++k) want += static_cast<double>(partials[k] = std::abs(p[k]));
    float norm = NAN;
    ASSERT_EQ(cuda::sqrt_of_sum(partials.data(), count, &norm, nullptr), cudaSuccess);
    EXPECT_NEAR(norm, std::sqrt(want), 2e-7 * std::sqrt(want)) << count;
  }
}

// Gradient clipping's multi-tensor sum of squares: one partial per 2048-element chunk of each tensor, in order,
// each the chunk's sum of squares (f32, against float64); tables of tensors flushed (more than fit one launch's
// arguments) and batches of descriptors (more than 256 tensors) keep the order.
template <class T>
void check_sum_squares_multi(const std::vector<int64_t>& sizes) {
  std::vector<std::vector<T>> xs;
  std::vector<const T*> ptrs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    xs.push_back(random_values<T>(sizes[k] + 1, 50 + k));
    ptrs.push_back(xs.back().data());
  }
  const int64_t count = static_cast<int64_t>(sizes.size());
  const int64_t blocks = cuda::sum_squares_partials(sizes.data(), count);
  int64_t want_blocks = 0;
  for (int64_t n : sizes) want_blocks += (n + 2047) / 2048;
  ASSERT_EQ(blocks, want_blocks);
  std::vector<float> partials(static_cast<size_t>(blocks) + 1, NAN);
  ASSERT_EQ(cuda::sum_squares_multi(ptrs.data(), sizes.data(), count, partials.data(), nullptr), cudaSuccess);
  EXPECT_TRUE(std::isnan(partials.back())) << "written past the last partial";
  size_t b = 0;
  double total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (int64_t begin = 0; begin < sizes[k]; begin += 2048, ++b) {
      double want = 0;
      for (int64_t i = begin; i < std::min<int64_t>(begin + 2048, sizes[k]); ++i) {
        const double v = static_cast<double>(static_cast<float>(xs[k][static_cast<size_t>(i)]));
        want += v * v;
      }
      total += want;
      ASSERT_NEAR(partials[b], want, 1e-6 * want + 1e-30) << "tensor " << k << " chunk at " << begin;
    }
  }
  float norm = NAN;
  ASSERT_EQ(cuda::sqrt_of_sum(partials.data(), blocks, &norm, nullptr), cudaSuccess);
  EXPECT_NEAR(norm, std::sqrt(total), 1e-6 * std::sqrt(total));
}

TEST(ReductionEmu, MultiTensorSumOfSquaresPerChunk) {
  check_sum_squares_multi<float>({0, 1, 31, 2048, 2049, 7000});
  check_sum_squares_multi<mpt::bf16>({5, 4100, 0, 2047});
  check_sum_squares_multi<mpt::f16>({3000, 1});
  check_sum_squares_multi<float>(std::vector<int64_t>(300, 3));  // 3 tables of 96 and 2 descriptor batches
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
