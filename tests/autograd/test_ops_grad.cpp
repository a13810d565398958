// tests/autograd/test_ops_grad.cpp: every differentiable op through autograd against float64 finite differences (gradcheck).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "mpt/autograd/engine.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
using testing::random_tensor;

// Compares the gradients autograd gives for loss = sum(w * fn(inputs)) (w random) with central differences of
// the same loss in float64. Inputs are f64 CPU tensors; each gets requires_grad. Returns the worst relative error.
void gradcheck(const std::string& what, const Fn& fn, const std::vector<Tensor>& inputs, double tol = 1e-7) {
  Tensor shape_probe;
  {
    autograd::NoGradGuard no_grad;
    shape_probe = fn(inputs);
  }
  const Tensor w = random_tensor(shape_probe.shape(), DType::F64, 4242);
  const std::vector<Tensor> numeric = testing::numeric_gradients(fn, inputs, w);
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) leaves.push_back(x.clone().requires_grad_());
  const Tensor loss = ops::sum(ops::mul(fn(leaves), w));
  ASSERT_TRUE(loss.requires_grad()) << what;
  loss.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(leaves[i].grad().defined()) << what << ": input " << i << " got no gradient";
    const std::vector<double> got = leaves[i].grad().to_vector<double>(), want = numeric[i].to_vector<double>();
    double scale = 1, worst = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < got.size(); ++j) worst = std::max(worst, std::abs(got[j] - want[j]) / scale);
    EXPECT_LE(worst, tol) << what << ": input " << i;
  }
}

Tensor f64(const Shape& shape, uint64_t seed) { return random_tensor(shape, DType::F64, seed); }

TEST(OpGradients, ElementwiseWithBroadcasting) {
  gradcheck("add bias", [](const std::vector<Tensor>& t) { return ops::add(t[0], t[1]); }, {f64({3, 5}, 1), f64({5}, 2)});
  gradcheck("mul [B,1,C]", [](const std::vector<Tensor>& t) { return ops::mul(t[0], t[1]); },
            {f64({2, 3, 4}, 3), f64({2, 1, 4}, 4)});
  gradcheck("scale", [](const std::vector<Tensor>& t) { return ops::scale(t[0], -2.5); }, {f64({7}, 5)});
  gradcheck("gelu", [](const std::vector<Tensor>& t) { return ops::gelu(t[0]); }, {f64({4, 9}, 6)});
}

TEST(OpGradients, Reductions) {
  gradcheck("sum all", [](const std::vector<Tensor>& t) { return ops::sum(t[0]); }, {f64({3, 4}, 7)});
  gradcheck("sum dim 1", [](const std::vector<Tensor>& t) { return ops::sum(t[0], 1); }, {f64({3, 4, 2}, 8)});
  gradcheck("mean dim -1 keepdim", [](const std::vector<Tensor>& t) { return ops::mean(t[0], -1, true); },
            {f64({3, 5}, 9)});
}

TEST(OpGradients, MatmulTransposesAndBatchBroadcast) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const ops::MatmulOptions opt{.trans_a = ta, .trans_b = tb, .alpha = 0.5f};
      gradcheck(fmt::format("matmul ta={} tb={}", ta, tb),
                [opt](const std::vector<Tensor>& t) { return ops::matmul(t[0], t[1], opt); },
                {f64(ta ? Shape{2, 6, 5} : Shape{2, 5, 6}, 10), f64(tb ? Shape{3, 6} : Shape{6, 3}, 11)});
    }
}

TEST(OpGradients, LayerNormAndResidualLayerNorm) {
  gradcheck("layer_norm", [](const std::vector<Tensor>& t) { return ops::layer_norm(t[0], t[1], t[2]).y; },
            {f64({4, 6}, 12), f64({6}, 13), f64({6}, 14)}, 1e-6);
  // Both outputs feed the loss: the residual stream and the normalised branch.
  gradcheck("residual_layer_norm",
            [](const std::vector<Tensor>& t) {
              const auto r = ops::residual_layer_norm(t[0], t[1], t[2], t[3]);
              return ops::add(r.y, ops::scale(r.sum, 0.5));
            },
            {f64({3, 8}, 15), f64({3, 8}, 16), f64({8}, 17), f64({8}, 18)}, 1e-6);
}

TEST(OpGradients, Softmax) {
  gradcheck("softmax", [](const std::vector<Tensor>& t) { return ops::softmax(t[0]); }, {f64({3, 6}, 30)});
}

TEST(OpGradients, ViewsAndCopies) {
  const Tensor x = f64({2, 3, 4}, 31);
  gradcheck("view", [](const std::vector<Tensor>& t) { return t[0].view({6, 4}); }, {x});
  gradcheck("reshape of a transpose (copies)", [](const std::vector<Tensor>& t) { return t[0].transpose(0, 2).reshape({-1}); },
            {x});
  gradcheck("slice with step", [](const std::vector<Tensor>& t) { return t[0].slice(2, 1, 4, 2); }, {x});
  gradcheck("select", [](const std::vector<Tensor>& t) { return t[0].select(1, -1); }, {x});
  gradcheck("permute", [](const std::vector<Tensor>& t) { return t[0].permute({2, 0, 1}).contiguous(); }, {x});
  gradcheck("expand", [](const std::vector<Tensor>& t) { return t[0].unsqueeze(0).expand({3, 2, 3, 4}); }, {x});
  gradcheck("squeeze", [](const std::vector<Tensor>& t) { return t[0].slice(0, 0, 1).squeeze(0); }, {x});
  {
    // Through f32 and back (finite differences cannot see through f32 rounding): the gradient is the upstream
    // gradient converted back, 2 * float(w) exactly.
    const Tensor leaf = x.clone().requires_grad_();
    const Tensor w = f64({2, 3, 4}, 33);
    ops::sum(ops::mul(ops::scale(leaf.to(DType::F32), 2).to(DType::F64), w)).backward();
    const std::vector<double> g = leaf.grad().to_vector<double>(), wv = w.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], 2.0 * static_cast<double>(static_cast<float>(wv[i])));
  }
  // A GPT-style head split: (B, T, 3C) -> q, k, v as (B, H, T, D), through attention and back to (B, T, C).
  gradcheck("qkv split + attention",
            [](const std::vector<Tensor>& t) {
              const Tensor qkv = t[0].view({1, 5, 3, 2, 4});  // B=1, T=5, 3, H=2, D=4
              auto head = [&](int64_t i) { return qkv.select(2, i).transpose(1, 2); };
              const Tensor y = ops::causal_attention(head(0), head(1), head(2)).out;
              return y.transpose(1, 2).reshape({1, 5, 8});
            },
            {f64({1, 5, 24}, 32)}, 1e-6);
}

TEST(OpGradients, SoftmaxCrossEntropyWithIgnoredRows) {
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{3, -100, 0, 6}, {4});
  for (auto reduction : {ops::LossReduction::Mean, ops::LossReduction::Sum, ops::LossReduction::None}) {
    ops::CrossEntropyOptions opt;
    opt.reduction = reduction;
    gradcheck("cross-entropy",
              [targets, opt](const std::vector<Tensor>& t) { return ops::softmax_cross_entropy(t[0], targets, opt).loss; },
              {f64({4, 7}, 19)});
  }
}

// The fused classifier: when the logits are held only by the cross-entropy node, its gradient is written over them
// (no [rows, V] allocation in backward); a caller who kept the logits, and a retained graph, get a fresh buffer. The
// gradients are the same bits every way. Logits come from x * 2 so that they are not a leaf.
TEST(OpGradients, CrossEntropyGradientOverwritesLogitsNobodyElseHolds) {
  const int64_t rows = 64, vocab = 1000;
  const Tensor x0 = random_tensor({rows, vocab}, DType::F32, 41);
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>(i * 37 % vocab);
  const Tensor targets = Tensor::from_vector(t, {rows});
  const int64_t buffer = rows * vocab * 4;
  // Backward's allocator growth beyond what was in use when it started, and x's gradient.
  auto run = [&](bool keep_logits, bool retain) {
    Tensor x = x0.clone().requires_grad_(true);
    Tensor logits = ops::scale(x, 2.0);
    const Tensor loss = ops::softmax_cross_entropy(logits, targets).loss;
    if (!keep_logits) logits = Tensor{};
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    reset_peak_memory_stats(Device::cpu());
    autograd::backward({loss}, {}, retain);
    const int64_t growth = memory_stats(Device::cpu()).peak_bytes - before;
    Tensor again;
    if (retain) {  // the retained graph runs again: its logits were not overwritten
      const Tensor first = x.grad().clone();
      autograd::backward({loss}, {}, false);
      again = ops::add(x.grad(), ops::scale(first, -2.0));  // x.grad = 2 * first: zero
    }
    return std::tuple{growth, x.grad().clone(), again};
  };
  const auto [in_place, g_in_place, unused1] = run(false, false);
  const auto [kept, g_kept, unused2] = run(true, false);
  const auto [retained, g_retained, twice] = run(false, true);
  EXPECT_TRUE(testing::same_bits(g_in_place.to_vector<float>(), g_kept.to_vector<float>()));
  EXPECT_TRUE(testing::same_bits(g_retained.to_vector<float>(), ops::scale(g_kept, 2.0).to_vector<float>()));
  for (float v : twice.to_vector<float>()) ASSERT_EQ(v, 0.0f);
  // Kept logits or a retained graph: one more [rows, V] buffer at the peak than writing over the logits.
  EXPECT_GE(kept - in_place, buffer) << "in place " << in_place << " B, kept " << kept << " B";
  EXPECT_GE(retained - in_place, buffer) << "in place " << in_place << " B, retained " << retained << " B";
}

TEST(OpGradients, EmbeddingWithRepeatedIds) {
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{2, 0, 2, 4, 2, 1}, {2, 3});
  gradcheck("embedding", [ids](const std::vector<Tensor>& t) { return ops::embedding(ids, t[0]); }, {f64({5, 3}, 20)});
}

TEST(OpGradients, DropoutReplaysItsMask) {
  gradcheck("dropout",
            [](const std::vector<Tensor>& t) {
              Generator gen(77);  // the same mask on every evaluation
              return ops::dropout(t[0], 0.3f, gen);
            },
            {f64({5, 8}, 21)});
}

TEST(OpGradients, CausalAttention) {
  gradcheck("causal_attention",
            [](const std::vector<Tensor>& t) { return ops::causal_attention(t[0], t[1], t[2]).out; },
            {f64({1, 2, 5, 4}, 22), f64({1, 2, 5, 4}, 23), f64({1, 2, 5, 4}, 24)}, 1e-6);
}

TEST(OpGradients, InPlaceUpdatesOfTrackedTensorsAreRefused) {
  Tensor x = f64({3}, 25).requires_grad_();
  EXPECT_MPT_ERROR(ops::add_(x, Tensor::ones({3}, DType::F64)), "in-place updates are not recorded");
  {
    autograd::NoGradGuard no_grad;  // how optimizers update parameters
    ops::add_(x, Tensor::ones({3}, DType::F64));
  }
  const Tensor a = f64({2, 3}, 26).requires_grad_();
  EXPECT_MPT_ERROR(ops::matmul_out(a, f64({3, 2}, 27), Tensor::zeros({2, 2}, DType::F64)), "[matmul_out]");
}

TEST(OpGradients, OpsInsideAnOpDoNotRecord) {
  // causal_attention's GEMM path and matmul's conversions call other ops: only the outer node appears.
  const Tensor q = f64({1, 1, 3, 2}, 28).requires_grad_();
  const auto r = ops::causal_attention(q, q, q);
  ASSERT_NE(r.out.grad_fn(), nullptr);
  EXPECT_EQ(r.out.grad_fn()->name(), "CausalAttentionBackward");
  ASSERT_EQ(r.out.grad_fn()->next_edges().size(), 3u);
  for (const auto& e : r.out.grad_fn()->next_edges()) EXPECT_EQ(e.fn->name(), "AccumulateGrad");
  EXPECT_FALSE(r.lse.requires_grad());
}

}  // namespace
}  // namespace mpt
