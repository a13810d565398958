// tests/ops/test_fan_out.cpp: ops::fan_out: aliases of one tensor whose readers' gradients are summed in f32 with
// the bits of each reader casting its own copy.
#include <gtest/gtest.h>

#include <cstring>

#include "mpt/autograd/engine.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/fan_out.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

using mpt::testing::same_bits;

// The gradient an f32 leaf receives when readers of its `dt` copy get gradients g (undefined: that reader gets
// none): through one cast and ops::fan_out, or (fanned = false) through a cast per reader, the engine summing
// their f32 gradients.
Tensor leaf_gradient(const Tensor& values, DType dt, const std::vector<Tensor>& g, bool fanned) {
  Tensor leaf = values.clone();
  leaf.requires_grad_();
  std::vector<Tensor> readers;
  if (fanned) {
    readers = ops::fan_out(leaf.to(dt), static_cast<int64_t>(g.size()));
  } else {
    for (size_t i = 0; i < g.size(); ++i) readers.push_back(leaf.to(dt));
  }
  std::vector<Tensor> roots, seeds;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!g[i].defined()) continue;
    roots.push_back(ops::scale(readers[i], 1.0));  // a reader: its gradient is g[i] exactly
    seeds.push_back(g[i]);
  }
  autograd::backward(roots, seeds);
  return leaf.grad();
}

}  // namespace

TEST(FanOut, ReadersAliasTheInput) {
  const Tensor x = random_tensor({3, 5}, DType::BF16, 1);
  const std::vector<Tensor> r = ops::fan_out(x, 3);
  ASSERT_EQ(r.size(), 3u);
  for (const Tensor& t : r) {
    EXPECT_TRUE(t.shares_storage(x));
    EXPECT_EQ(t.shape(), x.shape());
    EXPECT_FALSE(t.requires_grad()) << "nothing recorded for an input without gradient";
  }
}

// Two and three readers, f16 and bf16: the f32 gradient has the bits of a cast per reader (the engine summing the
// last reader's first); a reader without gradient adds nothing.
TEST(FanOut, GradientsSumInF32WithTheBitsOfACastPerReader) {
  for (DType dt : {DType::BF16, DType::F16}) {
    const Tensor x = random_tensor({4, 33}, DType::F32, 2);
    for (size_t n : {2u, 3u}) {
      std::vector<Tensor> g;
      for (size_t i = 0; i < n; ++i) g.push_back(random_tensor({4, 33}, dt, 10 + i, 1e-3 * static_cast<double>(i + 1)));
      const Tensor fanned = leaf_gradient(x, dt, g, true), cast_each = leaf_gradient(x, dt, g, false);
      ASSERT_TRUE(fanned.defined());
      EXPECT_EQ(fanned.dtype(), DType::F32);
      EXPECT_TRUE(same_bits(fanned, cast_each)) << dtype_name(dt) << " " << n << " readers";
      g[1] = Tensor();
      EXPECT_TRUE(same_bits(leaf_gradient(x, dt, g, true), leaf_gradient(x, dt, g, false)))
          << dtype_name(dt) << " " << n << " readers, one without gradient";
    }
  }
}

// An f32 input's readers' gradients are added in f32, in the same order.
TEST(FanOut, F32InputAddsInF32) {
  Tensor leaf = random_tensor({6}, DType::F32, 3);
  leaf.requires_grad_();
  const std::vector<Tensor> r = ops::fan_out(leaf, 3);
  const std::vector<Tensor> g = {random_tensor({6}, DType::F32, 4), random_tensor({6}, DType::F32, 5),
                                 random_tensor({6}, DType::F32, 6)};
  autograd::backward({ops::scale(r[0], 1.0), ops::scale(r[1], 1.0), ops::scale(r[2], 1.0)}, g);
  const auto got = leaf.grad().to_vector<float>();
  const auto a = g[0].to_vector<float>(), b = g[1].to_vector<float>(), c = g[2].to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], (c[i] + b[i]) + a[i]) << i;
}

TEST(FanOut, RejectsBadArguments) {
  const Tensor x = random_tensor({2, 2}, DType::BF16, 7);
  EXPECT_MPT_ERROR(ops::fan_out(x, 1), "[fan_out] expected 2 or 3 readers, got 1");
  EXPECT_MPT_ERROR(ops::fan_out(x, 4), "[fan_out] expected 2 or 3 readers, got 4");
  EXPECT_MPT_ERROR(ops::fan_out(Tensor(), 2), "[fan_out] undefined input");
  Tensor leaf = random_tensor({2, 2}, DType::F32, 8);
  leaf.requires_grad_();
  const std::vector<Tensor> r = ops::fan_out(leaf.to(DType::BF16), 2);
  EXPECT_MPT_ERROR(autograd::backward({r[0]}, {Tensor::ones({2, 2}, DType::F32)}),
                   "[fan_out_backward] each reader's gradient must be bf16 [2, 2], got f32");
}
