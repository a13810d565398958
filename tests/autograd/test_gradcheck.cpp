// tests/autograd/test_gradcheck.cpp: autograd::gradcheck passes correct backwards and names the element a wrong,
// missing or partial backward gets wrong.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mpt/autograd/gradcheck.h"
#include "mpt/autograd/node.h"
#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using mpt::testing::random_tensor;

// y = x * x with a backward the test chooses: `factor` * x * dy (2 is right).
Tensor square(const Tensor& x, double factor, bool drop_gradient = false) {
  Tensor y = ops::mul(x.detach(), x.detach());
  auto backward = [x = x.detach(), factor, drop_gradient](const std::vector<Tensor>& g) {
    if (drop_gradient) return std::vector<Tensor>{Tensor{}};
    return std::vector<Tensor>{ops::scale(ops::mul(g[0], x), factor)};
  };
  autograd::record("TestSquareBackward", {&x}, {&y}, backward);
  return y;
}

TEST(Gradcheck, PassesTheLibrarysBackwards) {
  const Tensor x = random_tensor({3, 5}, DType::F64, 1), w = random_tensor({4, 5}, DType::F64, 2);
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::gelu(ops::linear(in[0], in[1])); },
                                  {x, w}));
  const Tensor q = random_tensor({2, 2, 6, 4}, DType::F64, 3), k = random_tensor({2, 2, 6, 4}, DType::F64, 4);
  const Tensor v = random_tensor({2, 2, 6, 4}, DType::F64, 5);
  ops::AttentionOptions padded;
  padded.lengths = Tensor::from_vector(std::vector<int32_t>{6, 3}, {2});
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return ops::causal_attention(in[0], in[1], in[2], padded).out; },
      {q, k, v}));
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return square(in[0], 2.0); }, {x}));
}

TEST(Gradcheck, NamesTheInputAndElementOfAWrongBackward) {
  const Tensor a = random_tensor({2, 3}, DType::F64, 7), b = random_tensor({2, 3}, DType::F64, 8);
  const std::string e = mpt::testing::error_message([&] {
    autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::add(in[0], square(in[1], 3.0)); }, {a, b});
  });
  EXPECT_PRED2(mpt::testing::contains, e, "[gradcheck] input 1 f64[2, 3] cpu, element 0: autograd ");
  // The backward computes 3 x b x w where 2 x b x w is right: the two reported values are in that ratio.
  double analytic = 0, numeric = 0;
  ASSERT_EQ(std::sscanf(e.c_str() + e.find("autograd "), "autograd %lf but finite differences %lf", &analytic, &numeric),
            2) << e;
  EXPECT_NEAR(analytic / numeric, 1.5, 1e-6) << e;
}

TEST(Gradcheck, AMissingGradientIsAnError) {
  const Tensor x = random_tensor({4}, DType::F64, 9);
  const std::string e = mpt::testing::error_message([&] {
    autograd::gradcheck([](const std::vector<Tensor>& in) { return square(in[0], 2.0, true); }, {x});
  });
  EXPECT_PRED2(mpt::testing::contains, e, "(autograd gave this input no gradient)");
}

TEST(Gradcheck, AnUnusedInputPasses) {
  const Tensor x = random_tensor({3}, DType::F64, 10), unused = random_tensor({2}, DType::F64, 11);
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::gelu(in[0]); }, {x, unused}));
}

TEST(Gradcheck, NumericGradientsOfALinearMap) {
  // d/dx sum(w * (A x)) = A^T w, exactly up to the finite-difference rounding.
  const Tensor a = random_tensor({3, 4}, DType::F64, 12), x = random_tensor({4, 1}, DType::F64, 13);
  const Tensor w = random_tensor({3, 1}, DType::F64, 14);
  const auto g = autograd::numeric_gradients([&](const std::vector<Tensor>& in) { return ops::matmul(a, in[0]); }, {x},
                                             w);
  const auto av = a.to_vector<double>(), wv = w.to_vector<double>(), gv = g.at(0).to_vector<double>();
  for (int j = 0; j < 4; ++j) {
    double want = 0;
    for (int i = 0; i < 3; ++i) want += av[i * 4 + j] * wv[i];
    EXPECT_NEAR(gv[j], want, 1e-8) << j;
  }
}

TEST(Gradcheck, RejectsWhatFiniteDifferencesCannotCheck) {
  const Tensor f32 = random_tensor({3}, DType::F32, 15);
  EXPECT_PRED2(mpt::testing::contains, mpt::testing::error_message([&] {
                 autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::gelu(in[0]); }, {f32});
               }),
               "[gradcheck] input 0 must be an f64 CPU tensor (finite differences in lower precision are noise), got "
               "f32[3]");
  EXPECT_PRED2(mpt::testing::contains, mpt::testing::error_message([&] {
                 autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0]; }, {});
               }),
               "[gradcheck] needs at least one input");
}

}  // namespace
}  // namespace mpt
