// tests/nn/test_module_grad.cpp: gradcheck of every module (float64 central differences vs autograd, parameters and inputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "op_test.h"

namespace mpt {
namespace {

constexpr nn::Placement kF64{DType::F64, Device::cpu()};

// Checks d loss / d theta for loss = sum(w * f(x)) (w random, fixed) and every parameter theta of `m` (up to
// `samples` elements per tensor, spread over it) and the input x when it is floating, against central differences
// in float64. Each tensor's error is relative to its largest sampled numeric derivative.
void module_gradcheck(const std::string& what, nn::Module& m, const std::function<Tensor(const Tensor&)>& f,
                      const Tensor& x, double tol = 1e-6, int samples = 64) {
  Tensor w;
  {
    autograd::NoGradGuard no_grad;
    w = testing::random_tensor(f(x).shape(), DType::F64, 777);
  }
  const bool x_float = is_floating(x.dtype());
  Tensor x_leaf = x_float ? x.clone().requires_grad_() : x;
  auto loss_value = [&] {  // at the current (perturbed) values of the parameters and x_leaf
    autograd::NoGradGuard no_grad;
    return ops::sum(ops::mul(f(x_leaf), w)).item<double>();
  };
  m.zero_grad();
  ops::sum(ops::mul(f(x_leaf), w)).backward();

  std::vector<std::pair<std::string, Tensor>> checked;
  for (const auto& p : m.named_parameters()) checked.emplace_back(p.name, p.tensor);
  if (x_float) checked.emplace_back("input", x_leaf);
  const double h = 1e-5;  // roundoff ~1e-16 |loss| / h and truncation ~h^2 both stay below 1e-8
  for (const auto& [name, t] : checked) {
    ASSERT_TRUE(t.grad().defined()) << what << ": " << name << " got no gradient";
    ASSERT_TRUE(t.is_contiguous());
    const std::vector<double> analytic = t.grad().to_vector<double>();
    double* data = t.detach().data<double>();
    const int64_t n = t.numel(), count = std::min<int64_t>(n, samples);
    double scale = 1e-9, worst = 0;
    std::vector<std::pair<double, double>> pairs;
    for (int64_t s = 0; s < count; ++s) {
      const int64_t i = (s * n) / count + (n > count ? (s * 7) % (n / count) : 0);
      const double saved = data[i];
      data[i] = saved + h;
      const double up = loss_value();
      data[i] = saved - h;
      const double down = loss_value();
      data[i] = saved;
      const double numeric = (up - down) / (2 * h);
      pairs.emplace_back(analytic[static_cast<size_t>(i)], numeric);
      scale = std::max(scale, std::abs(numeric));
    }
    for (const auto& [a, num] : pairs) worst = std::max(worst, std::abs(a - num) / scale);
    EXPECT_LE(worst, tol) << what << ": " << name << " (largest sampled derivative " << scale << ")";
    EXPECT_GT(scale, 1e-7) << what << ": " << name << ": all sampled derivatives vanish, the check is vacuous";
  }
}

nn::GPTConfig tiny_f64(double dropout = 0) {
  nn::GPTConfig c;
  c.vocab_size = 13;
  c.block_size = 6;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.dropout = dropout;
  c.where = kF64;
  return c;
}

Tensor x3(int64_t B, int64_t T, int64_t C, uint64_t seed) { return testing::random_tensor({B, T, C}, DType::F64, seed); }

TEST(ModuleGradients, Linear) {
  nn::Linear lin(5, 3, true, kF64);
  module_gradcheck("Linear", lin, [&](const Tensor& x) { return lin(x); }, x3(2, 4, 5, 1));
  nn::Linear no_bias(5, 3, false, kF64);
  module_gradcheck("Linear without bias", no_bias, [&](const Tensor& x) { return no_bias(x); }, x3(1, 3, 5, 2));
}

TEST(ModuleGradients, LayerNorm) {
  nn::LayerNorm ln(7, 1e-5, true, kF64);
  {  // move away from the 1 / 0 initialisation so weight and bias paths are not degenerate
    autograd::NoGradGuard no_grad;
    ln.weight().detach().copy_(testing::random_tensor({7}, DType::F64, 3));
    ln.bias().detach().copy_(testing::random_tensor({7}, DType::F64, 4));
  }
  module_gradcheck("LayerNorm", ln, [&](const Tensor& x) { return ln(x); }, x3(2, 3, 7, 5));
}

TEST(ModuleGradients, Embedding) {
  nn::Embedding emb(9, 4, kF64);
  const Tensor ids = Tensor::from_vector<int64_t>({0, 3, 3, 8, 1, 0}, {2, 3});
  module_gradcheck("Embedding", emb, [&](const Tensor& i) { return emb(i); }, ids, 1e-6, 36);
}

TEST(ModuleGradients, DropoutWithAFixedStream) {
  Generator gen(11);
  nn::Dropout drop(0.3, &gen);
  nn::Linear lin(6, 6, true, kF64);  // gives the check a parameter behind the dropout
  module_gradcheck("Dropout", lin, [&](const Tensor& x) {
    gen.set_state(11, 0);  // the same mask on every evaluation
    return drop(lin(x));
  }, x3(2, 5, 6, 6));
}

TEST(ModuleGradients, CausalSelfAttention) {
  Generator gen(1);
  nn::CausalSelfAttention attn(tiny_f64(), gen);
  module_gradcheck("CausalSelfAttention", attn, [&](const Tensor& x) { return attn(x); }, x3(2, 5, 8, 7));
}

TEST(ModuleGradients, MLP) {
  Generator gen(2);
  nn::MLP mlp(tiny_f64(), gen);
  module_gradcheck("MLP", mlp, [&](const Tensor& x) { return mlp(x); }, x3(2, 3, 8, 8));
}

TEST(ModuleGradients, Block) {
  Generator gen(3);
  nn::Block block(tiny_f64(), gen);
  module_gradcheck("Block", block, [&](const Tensor& x) { return block(x); }, x3(2, 5, 8, 9));
}

TEST(ModuleGradients, GptLossWithDropout) {
  nn::GPT model(tiny_f64(0.1));
  const Tensor ids = Tensor::from_vector<int64_t>({1, 5, 12, 0, 7, 7, 3, 2, 9, 11, 4, 6}, {2, 6});
  const Tensor targets = Tensor::from_vector<int64_t>({5, 12, 0, 7, 7, 3, 2, 9, 11, 4, 6, -100}, {2, 6});
  module_gradcheck("GPT", model, [&](const Tensor& i) {
    default_generator().set_state(5, 0);
    return model.loss(i, targets);
  }, ids, 1e-6, 32);
}

}  // namespace
}  // namespace mpt
