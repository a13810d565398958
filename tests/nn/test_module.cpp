// tests/nn/test_module.cpp: Module registration and traversal, state dicts, freezing, train/eval and conversions.
#include <gtest/gtest.h>

#include <cstring>

#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "test_util.h"

namespace mpt {
namespace {

nn::GPTConfig tiny_config() {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

std::vector<std::string> names_of(const std::vector<mpt::NamedParameter>& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(p.name);
  return out;
}

TEST(Module, GptParameterNamesShapesAndDecayFlags) {
  nn::GPT model(tiny_config());
  const auto params = model.named_parameters();
  const std::vector<std::string> expected_prefix = {
      "wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.attn.c_attn.weight",
      "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias", "h.0.ln_2.weight", "h.0.ln_2.bias",
      "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias", "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"};
  const std::vector<std::string> names = names_of(params);
  ASSERT_EQ(names.size(), 2 + 12 * 2 + 2u);
  for (size_t i = 0; i < expected_prefix.size(); ++i) EXPECT_EQ(names[i], expected_prefix[i]);
  EXPECT_EQ(names.back(), "ln_f.bias");
  // V*C + T*C + per block (2C + 3C*C + 3C + C*C + C + 2C + 4C*C + 4C + 4C*C + C) + 2C
  const int64_t C = 8, per_block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
  EXPECT_EQ(model.num_parameters(), 11 * C + 8 * C + 2 * per_block + 2 * C);
  for (const auto& p : params) {
    const bool linear_weight = p.name.ends_with("c_attn.weight") || p.name.ends_with("c_proj.weight") ||
                               p.name.ends_with("c_fc.weight");
    EXPECT_EQ(p.weight_decay, linear_weight) << p.name;
    EXPECT_TRUE(p.tensor.requires_grad() && p.tensor.is_leaf()) << p.name;
  }
  EXPECT_EQ(model.block(1).mlp().c_fc().weight().shape(), (Shape{32, 8}));
}

TEST(Module, Gpt2InitialisationStatistics) {
  nn::GPTConfig c = tiny_config();
  c.n_embd = 64;
  c.n_head = 4;
  c.vocab_size = 300;
  nn::GPT model(c);
  auto stats = [](const Tensor& t) {
    double s = 0, s2 = 0;
    const auto v = t.to_vector<double>();
    for (double x : v) s += x, s2 += x * x;
    const double n = static_cast<double>(v.size());
    return std::pair{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  const auto [m_wte, sd_wte] = stats(model.wte().weight());
  EXPECT_NEAR(m_wte, 0, 0.002);
  EXPECT_NEAR(sd_wte, 0.02, 0.001);
  const auto [m_proj, sd_proj] = stats(model.block(0).mlp().c_proj().weight());
  EXPECT_NEAR(sd_proj, 0.02 / std::sqrt(4.0), 0.0008);
  EXPECT_EQ(stats(model.block(0).attn().c_attn().bias()).second, 0.0);
  EXPECT_EQ(model.ln_f().weight().to_vector<float>(), std::vector<float>(64, 1.0f));
  // Same seed, same weights; another seed, other weights.
  nn::GPT again(c);
  EXPECT_EQ(again.wte().weight().to_vector<float>(), model.wte().weight().to_vector<float>());
  c.seed = 7;
  nn::GPT other(c);
  EXPECT_NE(other.wte().weight().to_vector<float>(), model.wte().weight().to_vector<float>());
}

TEST(Module, StateDictRoundTripIntoAnotherModel) {
  nn::GPT a(tiny_config());
  nn::GPTConfig c = tiny_config();
  c.seed = 99;
  nn::GPT b(c);
  const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  b.load_state_dict(a.state_dict());
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(b.forward(ids).to_vector<float>(), a.forward(ids).to_vector<float>());
  // The dict shares storage with the module: it is a view, not a copy.
  const mpt::StateDict sd = a.state_dict();
  EXPECT_TRUE(sd.at("wte.weight").shares_storage(a.wte().weight()));
  EXPECT_FALSE(sd.at("wte.weight").requires_grad());
  EXPECT_EQ(sd.size(), a.named_parameters().size());
}

TEST(Module, LoadStateDictErrorsChangeNothing) {
  nn::GPT model(tiny_config());
  const std::vector<float> before = model.wte().weight().to_vector<float>();
  mpt::StateDict sd = model.state_dict();
  for (auto& [k, v] : sd) v = Tensor::zeros(v.shape());
  sd.erase("ln_f.bias");
  sd["extra.weight"] = Tensor::zeros({2});
  EXPECT_MPT_ERROR(model.load_state_dict(sd), "missing keys [ln_f.bias], unexpected keys [extra.weight]");
  EXPECT_EQ(model.wte().weight().to_vector<float>(), before);
  mpt::StateDict wrong = model.state_dict();
  wrong["wpe.weight"] = Tensor::zeros({3, 8});
  wrong["wte.weight"] = Tensor::zeros({11, 8});
  EXPECT_MPT_ERROR(model.load_state_dict(wrong), "'wpe.weight': expected shape f32[8, 8]");
  EXPECT_EQ(model.wte().weight().to_vector<float>(), before);
  // Non-strict loading takes what matches and ignores the rest.
  mpt::StateDict partial{{"ln_f.bias", Tensor::full({8}, 0.5)}, {"unknown", Tensor::zeros({1})}};
  model.load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(model.ln_f().bias().to_vector<float>(), std::vector<float>(8, 0.5f));
}

TEST(Module, FrozenModulesGetNoGradientsAndRecordNothing) {
  nn::GPT model(tiny_config());
  model.wte().requires_grad_(false);
  model.block(0).requires_grad_(false);
  EXPECT_LT(model.num_parameters(true), model.num_parameters());
  const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  model.loss(ids, ids).backward();
  for (const auto& p : model.named_parameters()) {
    const bool frozen = p.name.starts_with("wte.") || p.name.starts_with("h.0.");
    EXPECT_EQ(p.tensor.grad().defined(), !frozen) << p.name;
  }
  // Unfreezing restores training; zero_grad clears.
  model.requires_grad_(true);
  model.zero_grad();
  for (const auto& p : model.named_parameters()) EXPECT_FALSE(p.tensor.grad().defined());
  model.loss(ids, ids).backward();
  EXPECT_TRUE(model.wte().weight().grad().defined());
  model.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(model.wte().weight().grad().to_vector<float>(), std::vector<float>(11 * 8, 0.0f));
}

TEST(Module, TrainAndEvalSwitchDropout) {
  nn::GPTConfig c = tiny_config();
  c.dropout = 0.5;
  nn::GPT model(c);
  const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  autograd::NoGradGuard no_grad;
  model.eval();
  for (auto& [name, m] : model.named_modules()) EXPECT_FALSE(m->is_training()) << name;
  const auto e1 = model.forward(ids).to_vector<float>(), e2 = model.forward(ids).to_vector<float>();
  EXPECT_EQ(e1, e2);
  model.train();
  const uint64_t offset = default_generator().offset();
  const auto t1 = model.forward(ids).to_vector<float>();
  EXPECT_GT(default_generator().offset(), offset);  // dropout drew from the default stream
  EXPECT_NE(t1, e1);
}

TEST(Module, ConvertsDtypeKeepingFlags) {
  nn::Linear lin(4, 3);
  lin.requires_grad_(false);
  lin.to(DType::BF16);
  EXPECT_EQ(lin.weight().dtype(), DType::BF16);
  EXPECT_FALSE(lin.weight().requires_grad());
  lin.requires_grad_(true);
  const Tensor x = Tensor::ones({2, 4}, DType::BF16);
  EXPECT_EQ(lin(x).dtype(), DType::BF16);
  EXPECT_MPT_ERROR(lin(Tensor::ones({2, 4})), "[Linear] input f32[2, 4] cpu does not match the parameters");
  EXPECT_MPT_ERROR(lin(Tensor::ones({2, 5}, DType::BF16)), "[Linear] expected an input [..., 4]");
  EXPECT_MPT_ERROR(lin.to(DType::I32), "floating dtypes only");
}

TEST(Module, RejectsBadConfigurationsAndInputs) {
  nn::GPTConfig c = tiny_config();
  c.n_head = 3;
  EXPECT_MPT_ERROR(nn::GPT{c}, "n_embd 8 is not a multiple of n_head 3");
  nn::GPT model(tiny_config());
  EXPECT_MPT_ERROR(model.forward(Tensor::zeros({1, 9}, DType::I64)), "sequence length 9 exceeds block_size 8");
  EXPECT_MPT_ERROR(model.forward(Tensor::zeros({1, 4})), "expected token ids [B, T] of i64 or i32");
  EXPECT_MPT_ERROR(nn::Dropout(1.5), "p must be in [0, 1]");
  EXPECT_MPT_ERROR(nn::Linear(0, 3), "sizes must be positive");
}

}  // namespace
}  // namespace mpt
