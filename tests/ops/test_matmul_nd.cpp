// tests/ops/test_matmul_nd.cpp: matmul with several batch dimensions, broadcast NumPy-style, forward and backward.
#include <gtest/gtest.h>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

// Float64 reference: every batch entry multiplied on its own, batch indices broadcast by hand.
Tensor reference(const Tensor& a, const Tensor& b, bool trans_b) {
  const Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                       Shape(b.shape().begin(), b.shape().end() - 2), "ref");
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), a.shape().end() - 2, a.shape().end());
  sb.insert(sb.end(), b.shape().end() - 2, b.shape().end());
  const Tensor ea = a.expand(sa).contiguous().to(DType::F64), eb = b.expand(sb).contiguous().to(DType::F64);
  const int64_t nb = numel(batch), m = a.size(-2), k = a.size(-1), n = trans_b ? b.size(-2) : b.size(-1);
  const auto va = ea.to_vector<double>(), vb = eb.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(nb * m * n));
  for (int64_t z = 0; z < nb; ++z)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t)
          s += va[static_cast<size_t>(z * m * k + i * k + t)] *
               vb[static_cast<size_t>(trans_b ? z * n * k + j * k + t : z * k * n + t * n + j)];
        out[static_cast<size_t>(z * m * n + i * n + j)] = s;
      }
  Shape so = batch;
  so.push_back(m);
  so.push_back(n);
  return Tensor::from_vector(out, so);
}

}  // namespace

TEST(MatmulNd, BroadcastBatchDimensionsMatchFloat64) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4, 5}, {2, 3, 5, 6}}, {{2, 1, 4, 5}, {3, 5, 6}}, {{2, 3, 4, 5}, {5, 6}}, {{4, 5}, {2, 2, 5, 3}},
      {{1, 1, 4, 5}, {2, 3, 5, 2}}};
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const auto& [sa, sb] : cases) {
      const Tensor a = random_tensor(sa, dt, 1), b = random_tensor(sb, dt, 2);
      const Tensor c = ops::matmul(a, b);
      mpt::testing::expect_close(c, reference(a, b, false), mpt::testing::tolerance(dt),
                                 fmt::format("{} @ {} {}", shape_str(sa), shape_str(sb), dtype_name(dt)));
    }
  }
  // Attention-shaped: (B, H, T, D) x (B, H, T, D)^T.
  const Tensor q = random_tensor({2, 3, 4, 8}, DType::F32, 3), k = random_tensor({2, 3, 4, 8}, DType::F32, 4);
  mpt::testing::expect_close(ops::matmul(q, k, {.trans_b = true}), reference(q, k, true),
                             mpt::testing::tolerance(DType::F32), "q k^T");
}

TEST(MatmulNd, GradientsSumOverBroadcastBatches) {
  const Tensor a = random_tensor({2, 1, 3, 4}, DType::F64, 5), b = random_tensor({3, 4, 2}, DType::F64, 6);
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); }, {a, b}));
  const Tensor c = random_tensor({2, 2, 3, 4}, DType::F64, 7), d = random_tensor({2, 2, 5, 4}, DType::F64, 8);
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], {.trans_b = true}); }, {c, d}));
  const std::string m = mpt::testing::error_message(
      [] { ops::matmul(Tensor::zeros({2, 3, 4, 5}), Tensor::zeros({3, 3, 5, 6})); });
  EXPECT_TRUE(mpt::testing::contains(m, "[matmul]")) << m;
}
