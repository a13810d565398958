// tests/emu/test_attention_emu.cpp: emulated CUDA causal softmax vs the CPU rows and float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/math/numerics.h"
#include "test_util.h"

namespace {

using mpt::bf16;
using mpt::f16;
using mpt::testing::to_double;
using mpt::testing::poison;
using mpt::testing::relative_ulp;
using mpt::testing::subnormal_step;

constexpr int64_t kHeads = 2;  // B * H
constexpr float kScale = 0.2f;
// 7, 33, 100: odd row lengths (33: a partial last warp); 64 and 100 take the vector path for float when aligned,
// 64 for bf16/f16 too.
const int64_t kLengths[] = {1, 7, 33, 64, 100};

// Float error of one backend relative to a probability: scaled scores in [-4, 4] make exp's argument round
// with <= 8 * 2^-23 relative error, the sum of n positive terms adds <= n ulp, reciprocal and product one more;
// then one rounding to T.
template <class T>
double bound(int64_t n) {
  return (static_cast<double>(n) + 8) * 0x1p-23 + (std::is_same_v<T, float> ? 0.0 : relative_ulp<T>() / 2);
}

template <class T>
std::vector<T> random_values(int64_t n, uint32_t seed, float low, float high) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<T> x(static_cast<size_t>(n));
  for (T& v : x) v = static_cast<T>(dist(rng));
  return x;
}

// Key padding for the kHeads rows blocks as two samples of one head: the first holds about half its positions.
struct Padding {
  bool on = false;
  int32_t lengths[kHeads] = {};
  Padding(int64_t t, bool padded) : on(padded), lengths{static_cast<int32_t>((t + 1) / 2), static_cast<int32_t>(t)} {}
  mpt::kernels::math::KeyPadding view() const {
    return on ? mpt::kernels::math::KeyPadding{lengths, 1} : mpt::kernels::math::KeyPadding{};
  }
  // Written from the definition: query i of sample b attends keys j <= i with j < lengths[b].
  int64_t keys(int64_t r, int64_t t) const {
    const int64_t causal = r % t + 1;
    return on ? std::min<int64_t>(causal, lengths[r / t]) : causal;
  }
};

template <class T>
void check_forward(int64_t t, int offset, bool padded = false) {
  SCOPED_TRACE(testing::Message() << "forward t " << t << " offset " << offset << " padded " << padded);
  const Padding pad(t, padded);
  const int64_t rows = kHeads * t, n = rows * t;
  const std::vector<T> storage = random_values<T>(n + offset, static_cast<uint32_t>(t + offset), -20, 20);
  const T* x = storage.data() + offset;  // offset != 0: misaligned, the scalar path
  std::vector<T> y_emu_storage(storage.size(), poison<T>()), y_cpu(n, poison<T>());
  std::vector<float> lse_emu(rows, NAN), lse_cpu(rows, NAN);
  T* y_emu = y_emu_storage.data() + offset;
  ASSERT_EQ(mpt::kernels::cuda::causal_softmax_forward(x, y_emu, lse_emu.data(), rows, t, kScale, nullptr,
                                                       pad.view()),
            cudaSuccess);
  mpt::kernels::cpu::causal_softmax_forward(x, y_cpu.data(), lse_cpu.data(), rows, t, kScale, pad.view());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t keys = pad.keys(r, t);
    double mx = -INFINITY, sum = 0;  // float64 reference from the stored inputs
    for (int64_t c = 0; c < keys; ++c) mx = std::max(mx, to_double(x[r * t + c]) * double(kScale));
    for (int64_t c = 0; c < keys; ++c) sum += std::exp(to_double(x[r * t + c]) * double(kScale) - mx);
    EXPECT_NEAR(lse_cpu[r], mx + std::log(sum), 1e-6 * (std::abs(mx) + 1) + 2 * bound<float>(keys)) << "row " << r;
    EXPECT_NEAR(lse_emu[r], lse_cpu[r], 1e-6 * (std::abs(mx) + 1) + 2 * bound<float>(keys)) << "row " << r;
    for (int64_t c = 0; c < t; ++c) {
      const int64_t i = r * t + c;
      const double emu = to_double(y_emu[i]), cpu = to_double(y_cpu[i]);
      if (c >= keys) {
        ASSERT_EQ(emu, 0.0) << "emulated CUDA, masked element " << i;
        ASSERT_EQ(cpu, 0.0) << "CPU, masked element " << i;
        continue;
      }
      const double ref = std::exp(to_double(x[i]) * double(kScale) - mx) / sum;
      ASSERT_TRUE(std::isfinite(emu)) << "element " << i << " not written by the kernel";
      EXPECT_NEAR(cpu, ref, ref * bound<T>(keys) + subnormal_step<T>() / 2) << "CPU vs float64, element " << i;
      // Same functor, sums rounded in different orders: within twice the float bound, one step of T after rounding.
      const double apart = std::is_same_v<T, float> ? 2 * bound<T>(keys) : relative_ulp<T>();
      EXPECT_NEAR(emu, cpu, std::max(emu, cpu) * apart + subnormal_step<T>()) << "emulated CUDA vs CPU, element " << i;
    }
  }
  for (int i = 0; i < offset; ++i) EXPECT_TRUE(std::isnan(to_double(y_emu_storage[i]))) << "wrote before y";
}

// dx = scale y (dy - dot): the dot products (float, different orders) differ by <= 2 n u max|dy y| (u = 2^-24,
// |dy| <= 1, y <= 1), times scale y <= scale; then both round to T, at most one step of T apart.
template <class T>
void check_backward(int64_t t, int offset, bool padded = false) {
  SCOPED_TRACE(testing::Message() << "backward t " << t << " offset " << offset << " padded " << padded);
  const Padding pad(t, padded);
  const int64_t rows = kHeads * t, n = rows * t;
  const std::vector<T> x = random_values<T>(n, static_cast<uint32_t>(t), -20, 20);
  std::vector<T> y(n);
  mpt::kernels::cpu::causal_softmax_forward(x.data(), y.data(), static_cast<float*>(nullptr), rows, t, kScale,
                                            pad.view());
  const std::vector<T> dy_storage = random_values<T>(n + offset, static_cast<uint32_t>(t + 1), -1, 1);
  const T* dy = dy_storage.data() + offset;
  std::vector<T> dx_emu_storage(n + offset, poison<T>()), dx_cpu(n, poison<T>());
  T* dx_emu = dx_emu_storage.data() + offset;
  mpt::kernels::cpu::causal_softmax_backward(dy, y.data(), dx_cpu.data(), rows, t, kScale, pad.view());
  ASSERT_EQ(mpt::kernels::cuda::causal_softmax_backward(dy, y.data(), dx_emu, rows, t, kScale, nullptr, pad.view()),
            cudaSuccess);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t keys = pad.keys(r, t);
    double dot = 0;
    for (int64_t c = 0; c < keys; ++c) dot += to_double(dy[r * t + c]) * to_double(y[r * t + c]);
    for (int64_t c = 0; c < t; ++c) {
      const int64_t i = r * t + c;
      const double emu = to_double(dx_emu[i]), cpu = to_double(dx_cpu[i]);
      if (c >= keys) {
        ASSERT_EQ(emu, 0.0) << "emulated CUDA, masked element " << i;
        ASSERT_EQ(cpu, 0.0) << "CPU, masked element " << i;
        continue;
      }
      const double ref = double(kScale) * to_double(y[i]) * (to_double(dy[i]) - dot);
      const double step = std::is_same_v<T, float> ? 0x1p-23 : relative_ulp<T>();
      const double tol =
          kScale * 2.0 * static_cast<double>(keys) * 0x1p-24 + std::abs(ref) * step + subnormal_step<T>();
      EXPECT_NEAR(cpu, ref, tol) << "CPU vs float64, element " << i;
      EXPECT_NEAR(emu, cpu, tol) << "emulated CUDA vs CPU, element " << i;
    }
  }
}

}  // namespace

TEST(EmuAttention, CausalSoftmaxForwardMatchesCpuAndFloat64) {
  for (int64_t t : kLengths) {
    check_forward<float>(t, 0);
    check_forward<float>(t, 1);
    check_forward<bf16>(t, 0);
    check_forward<bf16>(t, 3);
    check_forward<f16>(t, 0);
  }
}

TEST(EmuAttention, CausalSoftmaxBackwardMatchesCpuAndFloat64) {
  for (int64_t t : kLengths) {
    check_backward<float>(t, 0);
    check_backward<float>(t, 1);
    check_backward<bf16>(t, 0);
    check_backward<f16>(t, 5);
  }
}

TEST(EmuAttention, KeyPaddedSoftmaxMatchesCpuAndFloat64) {
  for (int64_t t : kLengths) {
    check_forward<float>(t, 0, true);
    check_forward<float>(t, 1, true);
    check_forward<bf16>(t, 0, true);
    check_backward<float>(t, 0, true);
    check_backward<bf16>(t, 3, true);
  }
}

TEST(EmuAttention, CausalSoftmaxInPlaceAndWithoutLse) {
  const int64_t t = 64, rows = kHeads * t;
  std::vector<float> x = random_values<float>(rows * t, 9, -20, 20), y(x.size());
  mpt::kernels::cpu::causal_softmax_forward(x.data(), y.data(), static_cast<float*>(nullptr), rows, t, kScale);
  ASSERT_EQ(mpt::kernels::cuda::causal_softmax_forward(x.data(), x.data(), nullptr, rows, t, kScale, nullptr),
            cudaSuccess);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], y[i] * 2 * bound<float>(t)) << i;
}

TEST(EmuAttention, CausalSoftmaxRejectsInvalidArguments) {
  float x[4] = {1, 2, 3, 4}, y[4];
  using mpt::kernels::cuda::causal_softmax_backward;
  using mpt::kernels::cuda::causal_softmax_forward;
  EXPECT_EQ(causal_softmax_forward<float>(x, y, nullptr, 3, 2, 1.0f, nullptr), cudaErrorInvalidValue);  // 3 % 2
  EXPECT_EQ(causal_softmax_forward<float>(x, y, nullptr, 2, 0, 1.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(causal_softmax_forward<float>(x, y, nullptr, 2, 2, 0.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(causal_softmax_forward<float>(x, y, nullptr, 2, 2, NAN, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(causal_softmax_forward<float>(x, nullptr, nullptr, 2, 2, 1.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(causal_softmax_forward<float>(nullptr, nullptr, nullptr, 0, 2, 1.0f, nullptr), cudaSuccess);
  EXPECT_EQ(causal_softmax_backward<float>(x, y, nullptr, 2, 2, 1.0f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(causal_softmax_backward<float>(x, y, y, -2, 2, 1.0f, nullptr), cudaErrorInvalidValue);
}
