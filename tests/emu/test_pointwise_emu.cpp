// tests/emu/test_pointwise_emu.cpp: the CUDA pointwise kernels (unary, binary, their gradients, comparisons, where,
// max/min with indices) under the emulation harness against the CPU kernels, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/pointwise.h"
#include "kernels/cuda/pointwise.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;
namespace math = mpt::kernels::math;

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed, 2.0).template to_vector<T>();
}

template <class T>
bool same_bits(const T* a, const T* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(T)) == 0;
}

const math::UnaryKind kUnary[] = {math::UnaryKind::Neg,   math::UnaryKind::Abs,     math::UnaryKind::Relu,
                                  math::UnaryKind::Silu,  math::UnaryKind::Tanh,    math::UnaryKind::Sigmoid,
                                  math::UnaryKind::Exp,   math::UnaryKind::Log,     math::UnaryKind::Sqrt,
                                  math::UnaryKind::Rsqrt, math::UnaryKind::Pow,     math::UnaryKind::Clamp,
                                  math::UnaryKind::Softplus};
const math::BinaryKind kBinary[] = {math::BinaryKind::Sub, math::BinaryKind::Div, math::BinaryKind::Maximum,
                                    math::BinaryKind::Minimum, math::BinaryKind::Pow, math::BinaryKind::SiluMul};

// Same functors and the same order of operations: identical bits. `misalign` shifts every pointer by one element,
// which forces the scalar kernels. Pow uses exponent 2 (exact arithmetic) and 2.5 (powf: the host's under emulation).
template <class T>
void check_unary(int64_t n, int64_t misalign) {
  const auto x_all = random_values<T>(n + misalign, 1 + n), dy_all = random_values<T>(n + misalign, 2 + n);
  const auto base = random_values<T>(n + misalign, 3 + n);
  const T *x = x_all.data() + misalign, *dy = dy_all.data() + misalign;
  for (math::UnaryKind k : kUnary) {
    for (double p : {2.0, 2.5}) {
      const math::UnaryParams params{k == math::UnaryKind::Clamp ? -0.5 : p, 1.0};
      std::vector<T> want(n), got(n);
      cpu::unary(k, params, x, want.data(), n);
      ASSERT_EQ(cuda::unary(k, params, x, got.data(), n, nullptr), cudaSuccess);
      EXPECT_TRUE(same_bits(want.data(), got.data(), n)) << "unary " << int(k) << " n=" << n;
      for (bool accumulate : {false, true}) {
        auto dw = base, dg = base;
        cpu::unary_backward(k, params, dy, x, dw.data(), n, accumulate);
        ASSERT_EQ(cuda::unary_backward(k, params, dy, x, dg.data(), n, accumulate, nullptr), cudaSuccess);
        EXPECT_TRUE(same_bits(dw.data(), dg.data(), n)) << "unary backward " << int(k) << " acc=" << accumulate;
      }
    }
  }
}

template <class T>
void check_binary(int64_t n, int64_t period, int64_t misalign) {
  const auto a_all = random_values<T>(n + misalign, 10 + n), b_all = random_values<T>(n + misalign, 20 + n);
  const auto dy_all = random_values<T>(n + misalign, 30 + n);
  const T *a = a_all.data() + misalign, *b = b_all.data() + misalign, *dy = dy_all.data() + misalign;
  const cpu::BinaryShape shape{n, period, false};
  for (math::BinaryKind k : kBinary) {
    std::vector<T> want(n), got(n);
    cpu::binary(k, a, b, want.data(), shape);
    ASSERT_EQ(cuda::binary(k, a, b, got.data(), shape, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(want.data(), got.data(), n)) << "binary " << int(k) << " n=" << n << " period=" << period;
    for (bool wrt_b : {false, true}) {
      std::vector<T> dw(n), dg(n);
      cpu::binary_backward(k, wrt_b, dy, a, b, dw.data(), n, false);
      ASSERT_EQ(cuda::binary_backward(k, wrt_b, dy, a, b, dg.data(), n, false, nullptr), cudaSuccess);
      EXPECT_TRUE(same_bits(dw.data(), dg.data(), n)) << "binary backward " << int(k) << " wrt_b=" << wrt_b;
    }
    // Both gradients in one kernel: each the CPU's single gradient, bit for bit.
    std::vector<T> da_cpu(n), db_cpu(n), da(n), db(n);
    cpu::binary_backward(k, false, dy, a, b, da_cpu.data(), n, false);
    cpu::binary_backward(k, true, dy, a, b, db_cpu.data(), n, false);
    ASSERT_EQ(cuda::binary_backward_both(k, dy, a, b, da.data(), db.data(), n, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(da_cpu.data(), da.data(), n)) << "binary backward both, da " << int(k) << " n=" << n;
    EXPECT_TRUE(same_bits(db_cpu.data(), db.data(), n)) << "binary backward both, db " << int(k) << " n=" << n;
  }
  for (auto k : {math::CompareKind::Eq, math::CompareKind::Ne, math::CompareKind::Lt, math::CompareKind::Le,
                 math::CompareKind::Gt, math::CompareKind::Ge}) {
    std::vector<uint8_t> want(n), got(n);
    cpu::compare(k, a, b, want.data(), shape);
    ASSERT_EQ(cuda::compare(k, a, b, got.data(), shape, nullptr), cudaSuccess);
    EXPECT_EQ(want, got) << "compare " << int(k);
  }
  std::vector<uint8_t> cond(n);
  for (int64_t i = 0; i < n; ++i) cond[i] = static_cast<uint8_t>((i * 7) % 3 == 0);
  std::vector<T> want(n), got(n);
  cpu::where(cond.data(), a, b, want.data(), n);
  ASSERT_EQ(cuda::where(cond.data(), a, b, got.data(), n, nullptr), cudaSuccess);
  EXPECT_TRUE(same_bits(want.data(), got.data(), n)) << "where";
}

template <class T>
void check_arg_reduce(const math::ReduceShape& s) {
  const int64_t n = s.outer * s.len * s.inner, outputs = s.outer * s.inner;
  auto x = random_values<T>(n, 40 + n);
  if (n > 3) x[3] = x[1];  // a tie
  for (bool is_max : {true, false}) {
    std::vector<T> vw(outputs), vg(outputs);
    std::vector<int64_t> iw(outputs), ig(outputs);
    cpu::arg_reduce(is_max, x.data(), vw.data(), iw.data(), s);
    ASSERT_EQ(cuda::arg_reduce(is_max, x.data(), vg.data(), ig.data(), s, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(vw.data(), vg.data(), outputs));
    EXPECT_EQ(iw, ig);
  }
}

}  // namespace

TEST(PointwiseEmu, UnaryMatchesCpuBitForBit) {
  for (int64_t n : {1, 16, 37, 515}) {
    for (int64_t misalign : {0, 1}) {
      check_unary<float>(n, misalign);
      check_unary<mpt::bf16>(n, misalign);
      check_unary<mpt::f16>(n, misalign);
    }
  }
}

TEST(PointwiseEmu, BinaryCompareWhereMatchCpuBitForBit) {
  for (auto [n, period] : {std::pair<int64_t, int64_t>{64, 64}, {96, 16}, {45, 5}, {2048, 1}}) {
    for (int64_t misalign : {0, 1}) {
      check_binary<float>(n, period, misalign);
      check_binary<mpt::bf16>(n, period, misalign);
      check_binary<mpt::f16>(n, period, misalign);
    }
  }
}

TEST(PointwiseEmu, ArgReduceMatchesCpu) {
  for (const math::ReduceShape& s : {math::ReduceShape{3, 7, 1}, math::ReduceShape{2, 5, 4},
                                     math::ReduceShape{1, 300, 1}}) {
    check_arg_reduce<float>(s);
    check_arg_reduce<mpt::bf16>(s);
  }
}

TEST(PointwiseEmu, RejectsInvalidArguments) {
  float x = 1;
  EXPECT_EQ(cuda::unary<float>(math::UnaryKind::Exp, {}, &x, nullptr, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::unary<float>(math::UnaryKind::Exp, {}, nullptr, &x, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::where<float>(nullptr, &x, &x, &x, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::arg_reduce<float>(true, &x, &x, nullptr, {1, 0, 1}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::unary<float>(math::UnaryKind::Exp, {}, nullptr, nullptr, 0, nullptr), cudaSuccess);
}
