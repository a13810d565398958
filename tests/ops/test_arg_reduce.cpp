// tests/ops/test_arg_reduce.cpp: max / min with indices, argmax / argmin and var against brute force and float64.
#include <gtest/gtest.h>

#include <cmath>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

TEST(ArgReduce, MatchesBruteForceOverEveryDimension) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    const Tensor x = random_tensor({3, 5, 4}, dt, 1);
    const auto v = x.to_vector<double>();
    for (int64_t d = 0; d < 3; ++d) {
      const ops::ValuesIndices mx = ops::max(x, d), mn = ops::min(x, d);
      const auto mv = mx.values.to_vector<double>(), nv = mn.values.to_vector<double>();
      const auto mi = mx.indices.to_vector<int64_t>(), ni = mn.indices.to_vector<int64_t>();
      EXPECT_EQ(mx.indices.dtype(), DType::I64);
      EXPECT_EQ(mx.values.dtype(), dt);
      const Shape s = x.shape();
      const int64_t len = s[d];
      int64_t out = 0;
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j)
          for (int64_t k = 0; k < 4; ++k) {
            const int64_t idx[3] = {i, j, k};
            if (idx[d] != 0) continue;
            double best = -INFINITY, worst = INFINITY;
            int64_t bi = 0, wi = 0;
            for (int64_t t = 0; t < len; ++t) {
              int64_t p[3] = {i, j, k};
              p[d] = t;
              const double e = v[static_cast<size_t>((p[0] * 5 + p[1]) * 4 + p[2])];
              if (e > best) best = e, bi = t;
              if (e < worst) worst = e, wi = t;
            }
            EXPECT_EQ(mv[out], best);
            EXPECT_EQ(mi[out], bi);
            EXPECT_EQ(nv[out], worst);
            EXPECT_EQ(ni[out], wi);
            ++out;
          }
      EXPECT_EQ(ops::argmax(x, d).to_vector<int64_t>(), mi);
      EXPECT_EQ(ops::argmin(x, d, true).shape()[static_cast<size_t>(d)], 1);
    }
  }
}

TEST(ArgReduce, TiesTakeTheFirstAndNaNWins) {
  const Tensor x = Tensor::from_vector<float>({1, 3, 3, 0, 2, NAN, 5, NAN}, {2, 4});
  const auto r = ops::max(x, 1);
  EXPECT_EQ(r.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(std::isnan(r.values.to_vector<double>()[1]));
  EXPECT_EQ(ops::argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(mpt::testing::contains(mpt::testing::error_message([] { ops::max(Tensor::zeros({2, 0}), 1); }),
                                     "is empty"));
}

TEST(ArgReduce, GradientGoesToTheChosenElement) {
  const Tensor x = random_tensor({4, 6}, DType::F64, 3);
  for (int64_t d : {0, 1}) {
    EXPECT_TRUE(autograd::gradcheck([d](const std::vector<Tensor>& in) { return ops::max(in[0], d).values; }, {x}));
    EXPECT_TRUE(
        autograd::gradcheck([d](const std::vector<Tensor>& in) { return ops::min(in[0], d, true).values; }, {x}));
  }
}

TEST(Var, MatchesFloat64AndDifferentiates) {
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    const Tensor x = random_tensor({3, 50}, dt, 4, 2.0);
    const auto v = x.to_vector<double>();
    for (int64_t correction : {0, 1}) {
      const auto got = ops::var(x, 1, false, correction).to_vector<double>();
      for (int r = 0; r < 3; ++r) {
        double m = 0, s = 0;
        for (int j = 0; j < 50; ++j) m += v[r * 50 + j] / 50;
        for (int j = 0; j < 50; ++j) s += (v[r * 50 + j] - m) * (v[r * 50 + j] - m);
        const double want = s / (50 - correction);
        EXPECT_NEAR(got[r], want, want * mpt::testing::tolerance(dt).rtol) << dtype_name(dt) << " row " << r;
      }
    }
  }
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::var(in[0], 0, true); },
                                  {random_tensor({5, 3}, DType::F64, 5)}));
}
