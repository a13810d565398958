// tests/ops/test_activation.cpp: GELU against float64 math, NVIDIA's worked values, and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "mpt/ops/activation.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::tolerance;

namespace {

// Independent float64 reference (written from the formula, not from kernels/math).
double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

Tensor apply_ref(const Tensor& x, double (*f)(double)) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return Tensor::from_vector(v, x.shape());
}

}  // namespace

TEST(Gelu, MatchesNvidiaWorkedValues) {
  // vendor-semantics.md E5.2 (tanh GELU): gelu(1), gelu(-1), gelu(2) and the derivative at +-1.
  const Tensor x = Tensor::from_vector<double>({1, -1, 2}, {3});
  const auto y = ops::gelu(x).to_vector<double>();
  EXPECT_NEAR(y[0], 0.841192, 5e-6);
  EXPECT_NEAR(y[1], -0.158808, 5e-6);
  EXPECT_NEAR(y[2], 1.954598, 5e-6);
  const auto d = ops::gelu_backward(Tensor::ones({3}, DType::F64), x).to_vector<double>();
  EXPECT_NEAR(d[0], 1.082964, 5e-6);
  EXPECT_NEAR(d[1], -0.082964, 5e-6);
}

TEST(Gelu, ForwardMatchesFloat64ReferenceInEveryDtype) {
  mpt::testing::PoisonAllocations poison;  // an unwritten output element reads as NaN and fails
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t n : {1, 7, 33, 1000, 4099}) {
      const Tensor x = mpt::testing::random_tensor({n}, dt, 100 + n, 3.0);
      const Tensor y = ops::gelu(x);
      EXPECT_EQ(y.dtype(), dt);
      // The reference sees the same (already rounded) inputs; the output is rounded once to dt.
      mpt::testing::expect_close(y, apply_ref(x, gelu_ref), tolerance(dt),
                                 fmt::format("gelu {} n={}", dtype_name(dt), n));
    }
  }
}

TEST(Gelu, WorksOnNonContiguousInputs) {
  const Tensor x = mpt::testing::random_tensor({6, 5}, DType::F32, 3).t();
  mpt::testing::expect_close(ops::gelu(x), apply_ref(x, gelu_ref), tolerance(DType::F32), "transposed input");
}

TEST(Gelu, BackwardMatchesFiniteDifferencesInFloat64) {
  const Tensor x = mpt::testing::random_tensor({3, 41}, DType::F64, 7, 2.0);
  const Tensor w = mpt::testing::random_tensor({3, 41}, DType::F64, 8);
  const auto numeric = mpt::testing::numeric_gradients([](const std::vector<Tensor>& in) { return ops::gelu(in[0]); },
                                                       {x}, w);
  mpt::testing::expect_close(ops::gelu_backward(w, x), numeric[0], {1e-7, 1e-9}, "gelu backward vs finite differences");
}

TEST(Gelu, BackwardInLowPrecisionMatchesFloat64) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = mpt::testing::random_tensor({517}, dt, 11, 2.0);
    const Tensor dy = mpt::testing::random_tensor({517}, dt, 12);
    const Tensor ref = ops::gelu_backward(dy.to(DType::F64), x.to(DType::F64));
    mpt::testing::expect_close(ops::gelu_backward(dy, x), ref, tolerance(dt), fmt::format("gelu backward {}", dtype_name(dt)));
  }
}

TEST(Gelu, BackwardAccumulatesIntoAGivenGradient) {
  const Tensor x = mpt::testing::random_tensor({100}, DType::F64, 21);
  const Tensor dy = mpt::testing::random_tensor({100}, DType::F64, 22);
  Tensor dx = mpt::testing::random_tensor({100}, DType::F64, 23);
  const auto before = dx.to_vector<double>();
  const Tensor fresh = ops::gelu_backward(dy, x);
  const Tensor out = ops::gelu_backward(dy, x, dx);
  EXPECT_TRUE(out.shares_storage(dx));
  const auto got = dx.to_vector<double>(), add = fresh.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], before[i] + add[i]);
}

TEST(Gelu, RejectsBadArguments) {
  EXPECT_MPT_ERROR(ops::gelu(Tensor::zeros({3}, DType::I32)), "[gelu] expected a f32, f64, f16 or bf16 tensor, got i32");
  EXPECT_MPT_ERROR(ops::gelu(Tensor()), "[gelu] argument 0 is an undefined tensor");
  EXPECT_MPT_ERROR(ops::gelu_backward(Tensor::zeros({3}), Tensor::zeros({4})), "[gelu_backward] dy must have shape [4]");
  EXPECT_MPT_ERROR(ops::gelu_backward(Tensor::zeros({3}, DType::BF16), Tensor::zeros({3})), "dtype mismatch");
  EXPECT_MPT_ERROR(ops::gelu_backward(Tensor::zeros({3}), Tensor::zeros({3}), Tensor::zeros({2})), "dx must have shape");
  EXPECT_MPT_ERROR(ops::gelu_backward(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}), Tensor::zeros({2, 2}).t()),
                   "must be contiguous");
}
