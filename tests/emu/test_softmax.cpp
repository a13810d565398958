// tests/emu/test_softmax.cpp: emulated CUDA row softmax forward/backward vs the CPU path and a float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/softmax.h"
#include "kernels/cuda/softmax.h"
#include "kernels/math/numerics.h"
#include "test_util.h"

namespace {

using mpt::bf16;
using mpt::f16;
using mpt::testing::to_double;
using mpt::testing::poison;
using mpt::testing::relative_ulp;
using mpt::testing::subnormal_step;

constexpr int64_t kRows = 3;
// 33: a partial last warp of data; 100 and 1000: not powers of two; 1000 and 1024 take the vector
// path for float (and 1000, 1024 for bf16/f16), the others the scalar path.
const int64_t kCols[] = {1, 7, 33, 100, 1000, 1024};

template <class T>
std::vector<T> random_rows(int64_t rows, int64_t cols, uint32_t seed, float low, float high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<T> x(static_cast<size_t>(rows * cols));
  for (T& v : x) v = static_cast<T>(dist(rng));
  return x;
}

// exp(x_j - max) / sum_k exp(x_k - max) in float64 from the stored inputs.
template <class T>
std::vector<double> reference(const std::vector<T>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < cols; ++c) max = std::max(max, to_double(x[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(to_double(x[r * cols + c]) - max);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(to_double(x[r * cols + c]) - max) / sum;
  }
  return y;
}

// Float arithmetic bound for one backend, relative to the output: inputs span at most 8, so x - max
// rounds with relative error <= 4 * 2^-23 and exp adds <= 1 ulp; the sum of `cols` positive terms in
// any order adds <= (cols - 1) ulp; the reciprocal and the product 1 ulp more. Then one rounding to T.
template <class T>
double bound(int64_t cols) {
  return (static_cast<double>(cols) + 8) * 0x1p-23 + (std::is_same_v<T, float> ? 0.0 : relative_ulp<T>() / 2);
}

template <class T>
double tolerance(double ref, int64_t cols) {
  return ref * bound<T>(cols) + subnormal_step<T>() / 2;
}

template <class T>
void check_against_cpu_and_reference(int64_t cols, int offset) {
  SCOPED_TRACE(testing::Message() << "cols " << cols << " offset " << offset);
  const std::vector<T> x_storage = random_rows<T>(kRows * cols + offset, 1, static_cast<uint32_t>(cols + offset), -4, 4);
  const std::vector<T> x(x_storage.begin() + offset, x_storage.end());
  std::vector<T> y_emu_storage(x_storage.size(), poison<T>()), y_cpu(x.size(), poison<T>());
  T* y_emu = y_emu_storage.data() + offset;  // offset != 0: misaligned, the scalar path

  ASSERT_EQ(mpt::kernels::cuda::softmax_rows(x_storage.data() + offset, y_emu, kRows, cols, nullptr), cudaSuccess);
  mpt::kernels::cpu::softmax_rows(x.data(), y_cpu.data(), kRows, cols);
  const std::vector<double> ref = reference(x, kRows, cols);

  for (int64_t r = 0; r < kRows; ++r) {
    double row_sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double emu = to_double(y_emu[i]), cpu = to_double(y_cpu[i]);
      ASSERT_TRUE(std::isfinite(emu)) << "element " << i << " not written by the kernel";
      ASSERT_TRUE(std::isfinite(cpu)) << "element " << i << " not written by the CPU path";
      EXPECT_NEAR(emu, ref[i], tolerance<T>(ref[i], cols)) << "emulated CUDA, element " << i;
      EXPECT_NEAR(cpu, ref[i], tolerance<T>(ref[i], cols)) << "CPU, element " << i;
      // Both compute the same functor with sums rounded in different orders: within twice the sum's bound
      // in float, and at most one step of T apart after rounding to T.
      const double apart = std::is_same_v<T, float> ? 2 * bound<T>(cols) : relative_ulp<T>();
      EXPECT_NEAR(emu, cpu, std::max(emu, cpu) * apart + subnormal_step<T>()) << "emulated CUDA vs CPU, element " << i;
      row_sum += emu;
    }
    EXPECT_NEAR(row_sum, 1.0, static_cast<double>(cols) * relative_ulp<T>() + 1e-6) << "row " << r;
  }
  for (int i = 0; i < offset; ++i) EXPECT_TRUE(std::isnan(to_double(y_emu_storage[i]))) << "wrote before y";
}

TEST(EmuSoftmax, FloatMatchesCpuAndFloat64Reference) {
  for (int64_t cols : kCols) {
    check_against_cpu_and_reference<float>(cols, 0);
    check_against_cpu_and_reference<float>(cols, 1);
  }
}

TEST(EmuSoftmax, Bf16MatchesCpuAndFloat64Reference) {
  for (int64_t cols : kCols) {
    check_against_cpu_and_reference<bf16>(cols, 0);
    check_against_cpu_and_reference<bf16>(cols, 3);
  }
}

TEST(EmuSoftmax, F16MatchesCpuAndFloat64Reference) {
  for (int64_t cols : kCols) check_against_cpu_and_reference<f16>(cols, 0);
}

// When every exp is 0 or 1 the sums are exact in any order, so the shared functor must give the
// CPU's bits exactly: rows of equal values, with and without -inf (masked) entries.
TEST(EmuSoftmax, BitExactWithCpuWhenTheSumIsOrderIndependent) {
  for (int64_t cols : kCols) {
    std::vector<float> x(static_cast<size_t>(kRows * cols));
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const bool masked = r > 0 && c % (r + 2) == 1;
        x[r * cols + c] = masked ? -INFINITY : 1.5f * static_cast<float>(r + 1);
      }
    }
    std::vector<float> y_emu(x.size(), NAN), y_cpu(x.size(), NAN);
    ASSERT_EQ(mpt::kernels::cuda::softmax_rows(x.data(), y_emu.data(), kRows, cols, nullptr), cudaSuccess);
    mpt::kernels::cpu::softmax_rows(x.data(), y_cpu.data(), kRows, cols);
    for (int64_t r = 0; r < kRows; ++r) {
      int64_t kept = 0;
      for (int64_t c = 0; c < cols; ++c) kept += !std::isinf(x[r * cols + c]);
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        ASSERT_EQ(std::bit_cast<uint32_t>(y_emu[i]), std::bit_cast<uint32_t>(y_cpu[i])) << "cols " << cols << " " << i;
        EXPECT_EQ(y_emu[i], std::isinf(x[i]) ? 0.0f : 1.0f / static_cast<float>(kept));
      }
    }
  }
}

TEST(EmuSoftmax, LargeInputsDoNotOverflowAndInPlaceWorks) {
  for (int64_t cols : {int64_t{33}, int64_t{1024}}) {
    std::vector<float> x = random_rows<float>(kRows, cols, 7, 80.0f, 100.0f);  // exp(100) overflows float
    const std::vector<double> ref = reference(x, kRows, cols);
    ASSERT_EQ(mpt::kernels::cuda::softmax_rows(x.data(), x.data(), kRows, cols, nullptr), cudaSuccess);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], ref[i], ref[i] * bound<float>(cols) * 4) << i;
  }
}

// Backward: dx = y * (dy - dot). The dot products (float, different orders) differ by <= 2 cols u max|dy|
// (u = 2^-24, |dy| <= 1 here), multiplied by y <= 1; then both round to T, at most one step of T apart.
template <class T>
void check_backward(int64_t cols, int offset, bool accumulate) {
  SCOPED_TRACE(testing::Message() << "backward cols " << cols << " offset " << offset << " accumulate " << accumulate);
  const int64_t n = kRows * cols;
  const std::vector<T> x = random_rows<T>(kRows, cols, static_cast<uint32_t>(cols), -4, 4);
  std::vector<T> y(x.size());
  mpt::kernels::cpu::softmax_rows(x.data(), y.data(), kRows, cols);
  const std::vector<T> dy_storage = random_rows<T>(n + offset, 1, static_cast<uint32_t>(cols + 1), -1, 1);
  const std::vector<T> dx0 = random_rows<T>(n + offset, 1, static_cast<uint32_t>(cols + 2), -1, 1);
  std::vector<T> dx_cpu(dx0.begin() + offset, dx0.end()), dx_emu = dx0;
  const T* dy = dy_storage.data() + offset;
  mpt::kernels::cpu::softmax_backward_rows(dy, y.data(), dx_cpu.data(), kRows, cols, accumulate);
  ASSERT_EQ(mpt::kernels::cuda::softmax_backward_rows(dy, y.data(), dx_emu.data() + offset, kRows, cols, accumulate,
                                                      nullptr),
            cudaSuccess);
  for (int64_t i = 0; i < n; ++i) {
    const double emu = to_double(dx_emu[offset + i]), cpu = to_double(dx_cpu[i]);
    const double step = std::is_same_v<T, float> ? 0x1p-23 : relative_ulp<T>();
    EXPECT_NEAR(emu, cpu, 2.0 * static_cast<double>(cols) * 0x1p-24 + std::abs(cpu) * step + subnormal_step<T>())
        << "element " << i;
  }
}

TEST(EmuSoftmax, BackwardMatchesCpu) {
  for (int64_t cols : {1, 33, 1000}) {
    check_backward<float>(cols, 0, false);
    check_backward<float>(cols, 1, true);
    check_backward<bf16>(cols, 0, true);
    check_backward<f16>(cols, 3, false);
  }
}

TEST(EmuSoftmax, InvalidArgumentsAreRejected) {
  float x[4] = {1, 2, 3, 4}, y[4] = {NAN, NAN, NAN, NAN};
  EXPECT_EQ(mpt::kernels::cuda::softmax_rows(x, y, 1, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::softmax_rows(x, y, -1, 4, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::softmax_rows(x, static_cast<float*>(nullptr), 1, 4, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::softmax_rows(x, y, int64_t{1} << 31, 4, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::softmax_rows(x, y, 0, 4, nullptr), cudaSuccess);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(mpt::kernels::cuda::softmax_backward_rows(x, x, y, 1, 0, false, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::softmax_backward_rows(x, x, static_cast<float*>(nullptr), 1, 4, false, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
