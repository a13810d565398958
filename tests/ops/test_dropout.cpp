// tests/ops/test_dropout.cpp: dropout statistics, the mask against the uniform stream, replay in backward,
// finite differences with a fixed mask, and argument checks.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "kernels/math/philox.h"
#include "mpt/ops/dropout.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

// The mask from its definition: element i is kept when the uniform fill of the same stream is >= p.
std::vector<bool> expected_mask(uint64_t seed, uint64_t offset, int64_t n, float p) {
  Generator gen(seed, offset);
  const auto u = Tensor::uniform({n}, 0, 1, DType::F32, Device::cpu(), gen).to_vector<float>();
  std::vector<bool> keep(static_cast<size_t>(n));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = u[i] >= p;
  return keep;
}

}  // namespace

TEST(Dropout, MaskIsTheUniformStreamAndValuesAreScaledInEveryDtype) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t n : {1, 3, 5, 33, 4099, 70001}) {
      const float p = 0.3f;
      const Tensor x = random_tensor({n}, dt, 10 + n, 2.0);
      Generator gen(1234 + n, 77);
      ops::DropoutState state;
      const Tensor y = ops::dropout(x, p, gen, &state);
      EXPECT_EQ(state.seed, 1234u + n);
      EXPECT_EQ(state.offset, 77u);
      EXPECT_EQ(state.p, p);
      EXPECT_EQ(gen.offset(), 77 + kernels::math::philox_offset_increment(n));
      const auto keep = expected_mask(1234 + n, 77, n, p);
      const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
      std::vector<double> ref(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        ref[i] = keep[i] ? xv[i] / (1.0 - p) : 0.0;
        if (!keep[i]) {
          ASSERT_EQ(yv[i], 0.0) << dtype_name(dt) << " n=" << n << " i=" << i;
        }
      }
      // x * (1 / (1 - p)) with the scale rounded to float (double for f64), then rounded to dt.
      mpt::testing::expect_close(y, Tensor::from_vector(ref, {n}), mpt::testing::tolerance(dt),
                                 fmt::format("dropout {} n={}", dtype_name(dt), n));
    }
  }
}

TEST(Dropout, DropsTheRightFractionAndPreservesTheMean) {
  const int64_t n = 1 << 20;
  Generator gen(99);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const auto y = ops::dropout(Tensor::ones({n}), p, gen).to_vector<float>();
    int64_t dropped = 0;
    double total = 0;
    for (float v : y) {
      dropped += v == 0.0f;
      total += v;
    }
    // Binomial(n, p): within 5 sigma; the mean of y = keep / (1 - p) has sigma sqrt(p / ((1 - p) n)).
    const double sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_LE(std::abs(dropped - n * static_cast<double>(p)), 5 * sigma) << "p=" << p;
    EXPECT_LE(std::abs(total / n - 1.0), 5 * std::sqrt(p / ((1.0 - p) * n))) << "p=" << p;
  }
}

TEST(Dropout, BackwardRegeneratesTheForwardMaskExactly) {
  const Tensor x = random_tensor({7, 1001}, DType::F32, 5);
  Generator gen(2024);
  ops::DropoutState state;
  const auto y = ops::dropout(x, 0.25f, gen, &state).to_vector<float>();
  // A second draw uses fresh counters: a different mask.
  const auto y2 = ops::dropout(x, 0.25f, gen).to_vector<float>();
  EXPECT_NE(y, y2);
  const auto dx = ops::dropout_backward(Tensor::ones({7, 1001}), state).to_vector<float>();
  const auto xv = x.to_vector<float>();
  const float scale = 1.0f / (1.0f - 0.25f);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(dx[i] != 0.0f, y[i] != 0.0f) << i;
    ASSERT_EQ(dx[i], y[i] != 0.0f ? scale : 0.0f) << i;
    ASSERT_EQ(y[i], y[i] != 0.0f ? xv[i] * scale : 0.0f) << i;  // the forward of x is the backward of dy = x
  }
  EXPECT_EQ(ops::dropout_backward(x, state).to_vector<float>(), y);
}

TEST(Dropout, BackwardMatchesFiniteDifferencesWithAFixedMask) {
  const Tensor x = random_tensor({3, 37}, DType::F64, 7), w = random_tensor({3, 37}, DType::F64, 8);
  Generator gen(555, 9);
  ops::DropoutState state;
  ops::dropout(x, 0.4f, gen, &state);
  const auto numeric = mpt::testing::numeric_gradients(
      [&](const std::vector<Tensor>& in) {
        Generator replay(state.seed, state.offset);  // the same mask on every evaluation
        return ops::dropout(in[0], state.p, replay);
      },
      {x}, w);
  mpt::testing::expect_close(ops::dropout_backward(w, state), numeric[0], {1e-7, 1e-9}, "dropout backward vs FD");
}

TEST(Dropout, BackwardAccumulatesIntoAGivenGradient) {
  const Tensor dy = random_tensor({333}, DType::F64, 21);
  Tensor dx = random_tensor({333}, DType::F64, 22);
  const auto before = dx.to_vector<double>();
  const ops::DropoutState state{17, 5, 0.5f};
  const auto fresh = ops::dropout_backward(dy, state).to_vector<double>();
  const Tensor out = ops::dropout_backward(dy, state, dx);
  EXPECT_TRUE(out.shares_storage(dx));
  const auto got = dx.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], before[i] + fresh[i]);
  // p = 0: dx += dy; p = 1: dx unchanged.
  const auto dyv = dy.to_vector<double>();
  ops::dropout_backward(dy, {1, 0, 0.0f}, dx);
  ops::dropout_backward(dy, {1, 0, 1.0f}, dx);
  const auto got2 = dx.to_vector<double>();
  for (size_t i = 0; i < got2.size(); ++i) EXPECT_DOUBLE_EQ(got2[i], got[i] + dyv[i]);
}

TEST(Dropout, ZeroAndOneProbabilitiesAndNonFiniteInputs) {
  const Tensor x = random_tensor({100}, DType::F32, 31);
  Generator gen(3, 40);
  ops::DropoutState state;
  EXPECT_EQ(ops::dropout(x, 0.0f, gen, &state).to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(gen.offset(), 40u);  // no counters drawn
  EXPECT_EQ(ops::dropout_backward(x, state).to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(ops::dropout(x, 1.0f, gen, &state).to_vector<float>(), std::vector<float>(100, 0.0f));
  EXPECT_EQ(ops::dropout_backward(x, state).to_vector<float>(), std::vector<float>(100, 0.0f));
  // A dropped element is exactly 0 even where x is Inf; a kept Inf stays Inf.
  const auto y = ops::dropout(Tensor::full({64}, INFINITY), 0.5f, gen).to_vector<float>();
  for (float v : y) EXPECT_TRUE(v == 0.0f || v == INFINITY) << v;
}

TEST(Dropout, ResultDoesNotDependOnTheThreadCount) {
  const Tensor x = random_tensor({200003}, DType::BF16, 41);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Generator g1(8, 8);
  const auto y1 = ops::dropout(x, 0.2f, g1).to_vector<float>();
  omp_set_num_threads(2);
  Generator g2(8, 8);
  EXPECT_EQ(ops::dropout(x, 0.2f, g2).to_vector<float>(), y1);
  omp_set_num_threads(threads);
}

TEST(Dropout, RejectsBadArguments) {
  Generator gen;
  EXPECT_MPT_ERROR(ops::dropout(Tensor::zeros({3}), -0.1f, gen), "[dropout] the drop probability must be in [0, 1], got -0.1");
  EXPECT_MPT_ERROR(ops::dropout(Tensor::zeros({3}), 1.5f, gen), "[dropout] the drop probability must be in [0, 1]");
  EXPECT_MPT_ERROR(ops::dropout(Tensor::zeros({3}), NAN, gen), "[dropout] the drop probability must be in [0, 1]");
  EXPECT_MPT_ERROR(ops::dropout(Tensor::zeros({3}, DType::I64), 0.5f, gen), "[dropout] expected a f32, f64, f16 or bf16");
  EXPECT_MPT_ERROR(ops::dropout(Tensor(), 0.5f, gen), "[dropout] argument 0 is an undefined tensor");
  EXPECT_MPT_ERROR(ops::dropout_backward(Tensor::zeros({3}), {1, 0, 2.0f}), "[dropout_backward] the drop probability");
  EXPECT_MPT_ERROR(ops::dropout_backward(Tensor::zeros({3}), {1, 0, 0.5f}, Tensor::zeros({4})),
                   "[dropout_backward] dx must have shape [3]");
  EXPECT_MPT_ERROR(ops::dropout_backward(Tensor::zeros({3}), {1, 0, 0.5f}, Tensor::zeros({3}, DType::BF16)),
                   "dtype mismatch");
}
