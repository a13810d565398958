// tests/ops/test_concat.cpp: cat, stack, split and chunk: values, views, gradients and errors.
#include <gtest/gtest.h>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::contains;
using mpt::testing::error_message;
using mpt::testing::random_tensor;

TEST(Cat, JoinsAlongAnyDimension) {
  const Tensor a = Tensor::arange(0, 6, 1, DType::F32).reshape({2, 3});
  const Tensor b = Tensor::arange(6, 10, 1, DType::F32).reshape({2, 2});
  EXPECT_EQ(ops::cat({a, b}, 1).to_vector<float>(), (std::vector<float>{0, 1, 2, 6, 7, 3, 4, 5, 8, 9}));
  EXPECT_EQ(ops::cat({a, a}, -2).shape(), (Shape{4, 3}));
  EXPECT_EQ(ops::cat({a.t(), b.t()}, 0).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5, 6, 8, 7, 9}));
  const Tensor s = ops::stack({a, a * 2.0}, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 1, 2, 0, 2, 4, 3, 4, 5, 6, 8, 10}));
  EXPECT_EQ(ops::stack({a, a}, -1).shape(), (Shape{2, 3, 2}));
}

TEST(Cat, GradientsAreTheSlices) {
  const Tensor a = random_tensor({2, 3, 2}, DType::F64, 1), b = random_tensor({2, 1, 2}, DType::F64, 2);
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::cat({in[0], in[1], in[0]}, 1); },
                                  {a, b}));
  const Tensor c = random_tensor({2, 3, 2}, DType::F64, 3);
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::stack({in[0], in[1]}, 0); },
                                  {a, c}));
}

TEST(Split, ViewsThatRecordGradients) {
  const Tensor x = Tensor::arange(0, 10, 1, DType::F32);
  const auto parts = ops::split(x, 4, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].to_vector<float>(), (std::vector<float>{8, 9}));
  EXPECT_TRUE(parts[1].shares_storage(x));
  const auto sized = ops::split(x, {1, 6, 3}, 0);
  EXPECT_EQ(sized[1].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const auto ch = ops::chunk(Tensor::zeros({2, 7}), 3, 1);
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[0].size(1), 3);
  EXPECT_EQ(ch[2].size(1), 1);
  EXPECT_EQ(ops::chunk(Tensor::zeros({4}), 6, 0).size(), 4u) << "torch.chunk gives fewer pieces when they run out";
  // A SwiGLU-style split of one projection into two halves, differentiated.
  const Tensor h = random_tensor({3, 8}, DType::F64, 4);
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        const auto gu = ops::chunk(in[0], 2, -1);
        return ops::silu(gu[0]) * gu[1];
      },
      {h}));
}

TEST(Cat, RejectsMismatches) {
  const std::string m = error_message([] { ops::cat({Tensor::zeros({2, 3}), Tensor::zeros({3, 3})}, 1); });
  EXPECT_TRUE(contains(m, "[cat]") && contains(m, "[2, 3]") && contains(m, "[3, 3]")) << m;
  EXPECT_TRUE(contains(error_message([] { ops::cat({Tensor::zeros({2}), Tensor::zeros({2}, DType::BF16)}, 0); }),
                       "one dtype"));
  EXPECT_TRUE(contains(error_message([] { ops::cat({}, 0); }), "at least one"));
  EXPECT_TRUE(contains(error_message([] { ops::stack({Tensor::zeros({2}), Tensor::zeros({3})}, 0); }), "[stack]"));
  EXPECT_TRUE(contains(error_message([] { ops::split(Tensor::zeros({5}), {2, 2}, 0); }), "must add up"));
  EXPECT_TRUE(contains(error_message([] { ops::chunk(Tensor::zeros({5}), 0, 0); }), "[chunk]"));
}
