// tests/emu/test_elementwise_emu.cpp: the CUDA add/mul/scale/dropout kernels under emulation against the CPU kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed, 2.0).template to_vector<T>();
}

template <class T>
bool same_bits(const T* a, const T* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(T)) == 0;
}

// Same functors and the same (uncontracted) arithmetic order: bit-identical results. `misalign` shifts every
// pointer by one element, which forces the scalar kernels.
template <class T>
void check_binary(int64_t n, int64_t period, int64_t misalign) {
  const auto a_all = random_values<T>(n + misalign, 10 + n), b_all = random_values<T>(period + misalign, 20 + period);
  const auto base = random_values<T>(n + misalign, 30 + n);
  const T *a = a_all.data() + misalign, *b = b_all.data() + misalign;
  for (bool accumulate : {false, true}) {
    const cpu::BinaryShape shape{n, period, accumulate};
    auto want = base, got = base;
    cpu::mul(a, b, want.data() + misalign, shape);
    ASSERT_EQ(cuda::mul(a, b, got.data() + misalign, shape, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(want.data(), got.data(), n + misalign))
        << "mul n=" << n << " period=" << period << " misalign=" << misalign << " accumulate=" << accumulate;
  }
  for (double alpha : {1.0, -0.3}) {
    auto want = base, got = base;
    cpu::add(a, b, want.data() + misalign, {n, period}, alpha);
    ASSERT_EQ(cuda::add(a, b, got.data() + misalign, {n, period}, alpha, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(want.data(), got.data(), n + misalign))
        << "add n=" << n << " period=" << period << " misalign=" << misalign << " alpha=" << alpha;
  }
}

template <class T>
void check_unary(int64_t n, int64_t misalign) {
  const auto x_all = random_values<T>(n + misalign, 40 + n), base = random_values<T>(n + misalign, 50 + n);
  const T* x = x_all.data() + misalign;
  for (bool accumulate : {false, true}) {
    auto want = base, got = base;
    cpu::scale(x, want.data() + misalign, n, 0.7, accumulate);
    ASSERT_EQ(cuda::scale(x, got.data() + misalign, n, 0.7, accumulate, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(want.data(), got.data(), n + misalign)) << "scale n=" << n << " accumulate=" << accumulate;
    const cpu::DropoutArgs args{1234, 77, 0.35f, accumulate};
    want = base;
    got = base;
    cpu::dropout(x, want.data() + misalign, n, args);
    ASSERT_EQ(cuda::dropout(x, got.data() + misalign, n, args, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(want.data(), got.data(), n + misalign)) << "dropout n=" << n << " accumulate=" << accumulate;
  }
}

}  // namespace

TEST(ElementwiseEmu, BinaryOpsMatchCpuBitForBit) {
  // Same shape (map.cuh) and periodic b (broadcast kernel, vectorised when the period is a multiple of the
  // vector width and pointers are aligned).
  for (int64_t misalign : {0, 1}) {
    for (int64_t n : {1, 13, 61, 256}) {  // 256: whole vectors (map.cuh's vector path)
      check_binary<float>(n, n, misalign);
      check_binary<mpt::bf16>(n, n, misalign);
    }
    for (int64_t period : {1, 8, 13, 64}) {
      check_binary<float>(period * 9, period, misalign);
      check_binary<mpt::f16>(period * 9, period, misalign);
      check_binary<mpt::bf16>(period * 9, period, misalign);
    }
  }
}

TEST(ElementwiseEmu, ScaleAndDropoutMatchCpuBitForBit) {
  for (int64_t misalign : {0, 1}) {
    for (int64_t n : {1, 3, 5, 258, 1031}) {
      check_unary<float>(n, misalign);
      check_unary<mpt::f16>(n, misalign);
      check_unary<mpt::bf16>(n, misalign);
    }
  }
}

// ops::fan_out's backward: two or three f16/bf16/f32 gradients summed in f32 ((c + b) + a), against the CPU kernel and
// against that sum written out here.
template <class T>
void check_widen_sum(int64_t n) {
  const std::vector<T> a = random_values<T>(n, 5 + n), b = random_values<T>(n, 6 + n), c = random_values<T>(n, 7 + n);
  for (bool three : {false, true}) {
    std::vector<float> want(n), got_cpu(n, -1.0f), got_emu(n, -1.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float ab = static_cast<float>(b[i]) + static_cast<float>(a[i]);
      want[i] = three ? (static_cast<float>(c[i]) + static_cast<float>(b[i])) + static_cast<float>(a[i]) : ab;
    }
    const T* cp = three ? c.data() : nullptr;
    cpu::widen_sum(a.data(), b.data(), cp, got_cpu.data(), n);
    ASSERT_EQ(cuda::widen_sum(a.data(), b.data(), cp, got_emu.data(), n, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(got_cpu.data(), want.data(), n)) << "CPU, n " << n << (three ? ", three" : ", two");
    EXPECT_TRUE(same_bits(got_emu.data(), want.data(), n)) << "emulated, n " << n << (three ? ", three" : ", two");
  }
}

TEST(ElementwiseEmu, WidenSumMatchesCpuBitForBit) {
  for (int64_t n : {1, 7, 258, 40000}) {
    check_widen_sum<mpt::bf16>(n);
    check_widen_sum<mpt::f16>(n);
    check_widen_sum<float>(n);  // f32 gradients (an f32 input's, FP8 codes')
  }
  EXPECT_EQ(cuda::widen_sum<mpt::bf16>(nullptr, nullptr, nullptr, nullptr, 4, nullptr), cudaErrorInvalidValue);
}

TEST(ElementwiseEmu, RejectsInvalidArguments) {
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(cuda::add<float>(x, x, x, {4, 3}, 1.0, nullptr), cudaErrorInvalidValue);  // 3 does not divide 4
  EXPECT_EQ(cuda::mul<float>(x, x, x, {4, 0}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::mul<float>(x, nullptr, x, {4, 4}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::dropout<float>(x, x, 4, {1, 0, 1.0f}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::dropout<float>(x, x, -1, {1, 0, 0.5f}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::add<float>(nullptr, nullptr, nullptr, {0, 1}, 1.0, nullptr), cudaSuccess);
}
