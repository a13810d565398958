// tests/io/test_hf_gpt2.cpp: nn::GPT <-> Hugging Face GPT-2 against transformers goldens (tools/make_hf_goldens.py).
#include <gtest/gtest.h>

#include <cmath>

#include "hf_test_model.h"
#include "io_test_util.h"
#include "mpt/mpt.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kGoldens = fs::path(MPT_GOLDENS_DIR) / "hf_gpt2";

// max |ours - reference| over the logits of `ids`, and max |reference|.
std::pair<double, double> logits_error(const nn::GPT& model, const Tensor& ids, const Tensor& reference) {
  autograd::NoGradGuard no_grad;
  const std::vector<float> ours = model.forward(ids).to_vector<float>();
  const std::vector<double> ref = reference.to_vector<double>();
  EXPECT_EQ(ours.size(), ref.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < std::min(ours.size(), ref.size()); ++i) {
    err = std::max(err, std::abs(static_cast<double>(ours[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return {err, scale};
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

void expect_same_parameters(const nn::GPT& a, const nn::GPT& b) {
  const mpt::StateDict da = a.state_dict(), db = b.state_dict();
  ASSERT_EQ(da.size(), db.size());
  for (const auto& [k, t] : da) EXPECT_EQ(bytes_of(t), bytes_of(db.at(k))) << k;
}

}  // namespace

// transformers' GPT2LMHeadModel (random weights, every bias and LayerNorm perturbed) loaded into nn::GPT: the logits
// match transformers' float64 logits within float32 rounding (transformers' own float32 run is 9.6e-8 away).
TEST(HfGpt2, LoadsTransformersWeightsAndMatchesItsLogits) {
  const auto model = nn::load_hf_gpt2(kGoldens);
  EXPECT_EQ(model->config().vocab_size, 67);
  EXPECT_EQ(model->config().block_size, 24);
  EXPECT_EQ(model->config().n_layer, 2);
  const io::SafetensorsFile golden(kGoldens / "hf_logits.safetensors");
  const auto [err, scale] = logits_error(*model, golden.tensor("ids"), golden.tensor("logits_f64"));
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(err, 1e-6) << "max |logits - transformers float64| (max |logit| " << scale << ")";
}

// Our export, byte for byte the file transformers loaded (tests/goldens/hf_gpt2/ours), gives transformers' logits.
TEST(HfGpt2, ExportIsWhatTransformersLoadedAndItsLogitsMatch) {
  const auto model = make_hf_test_model();
  TempDir dir;
  nn::save_hf_gpt2(dir.path(), *model);
  EXPECT_EQ(read_bytes(dir / "model.safetensors"), read_bytes(kGoldens / "ours" / "model.safetensors"))
      << "the export changed: regenerate the goldens (docs/checkpoints.md)";
  EXPECT_EQ(read_bytes(dir / "config.json"), read_bytes(kGoldens / "ours" / "config.json"));
  const io::SafetensorsFile golden(kGoldens / "ours_logits.safetensors");
  const auto [err, scale] = logits_error(*model, golden.tensor("ids"), golden.tensor("logits_f64"));
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(err, 1e-6);
  // And back: the export loads into an identical model.
  expect_same_parameters(*model, *nn::load_hf_gpt2(dir.path()));
}

TEST(HfGpt2, LayoutTransposesConv1DWeightsAndLeavesTheTiedHeadOut) {
  const auto model = make_hf_test_model();
  const mpt::StateDict hf = nn::hf_gpt2_state_dict(*model);
  EXPECT_EQ(hf.size(), 28u);
  EXPECT_EQ(hf.count("lm_head.weight"), 0u);
  EXPECT_EQ(bytes_of(hf.at("transformer.h.1.attn.c_attn.weight")),
            bytes_of(model->block(1).attn().c_attn().weight().t().contiguous()));
  EXPECT_EQ(bytes_of(hf.at("transformer.h.0.ln_2.bias")), bytes_of(model->state_dict().at("h.0.ln_2.bias")));
}

TEST(HfGpt2, AcceptsTheHubsVariantsOfTheNames) {
  const auto source = make_hf_test_model();
  mpt::StateDict hub;  // GPT2Model's names (no prefix), mask buffers, an explicit tied head
  for (const auto& [k, t] : nn::hf_gpt2_state_dict(*source)) hub.emplace(k.substr(12), t);
  hub.emplace("h.0.attn.bias", Tensor::ones({1, 1, 24, 24}));
  hub.emplace("h.0.attn.masked_bias", Tensor::full({}, -1e4));
  hub.emplace("lm_head.weight", source->wte().weight().clone());
  auto target = make_hf_test_model();
  target->wte().weight().detach().zero_();
  nn::load_hf_gpt2_state_dict(*target, hub);
  expect_same_parameters(*source, *target);
}

TEST(HfGpt2, MismatchesAreNamed) {
  const auto model = make_hf_test_model();
  const mpt::StateDict good = nn::hf_gpt2_state_dict(*model);
  auto expect_error = [&](const std::string& expected, auto&& edit) {
    mpt::StateDict d = good;
    edit(d);
    auto target = make_hf_test_model();
    const std::string msg = error_message([&] { nn::load_hf_gpt2_state_dict(*target, d, "x.safetensors"); });
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  };
  expect_error("x.safetensors: missing tensor \"transformer.h.1.mlp.c_fc.bias\" (expected shape [128])",
               [](auto& d) { d.erase("transformer.h.1.mlp.c_fc.bias"); });
  expect_error("tensor \"transformer.h.0.attn.c_attn.weight\" has shape [96, 32], expected [32, 96]",
               [](auto& d) { d["transformer.h.0.attn.c_attn.weight"] = Tensor::zeros({96, 32}); });
  expect_error("unexpected tensor \"transformer.h.2.ln_1.weight\": a GPT-2 with 2 layers has no such weight",
               [](auto& d) { d["transformer.h.2.ln_1.weight"] = Tensor::zeros({32}); });
  expect_error("\"lm_head.weight\" differs from \"transformer.wte.weight\"",
               [](auto& d) { d["lm_head.weight"] = Tensor::zeros({67, 32}); });
}

TEST(HfGpt2, ConfigsComputingAnotherFunctionAreRefused) {
  const std::string base = read_bytes(kGoldens / "config.json");
  const nn::GPTConfig c = nn::parse_hf_gpt2_config(base);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_head, 4);
  auto expect_error = [&](const std::string& from, const std::string& to, const std::string& expected) {
    std::string text = base;
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
    const std::string msg = error_message([&] { nn::parse_hf_gpt2_config(text); });
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  };
  expect_error("\"gelu_new\"", "\"relu\"", "key \"activation_function\" is \"relu\"");
  expect_error("\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-06", "key \"layer_norm_epsilon\"");
  expect_error("\"n_inner\": null", "\"n_inner\": 64", "key \"n_inner\" is 64, but nn::GPT supports only 128");
  expect_error("\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true",
               "key \"scale_attn_by_inverse_layer_idx\"");
  expect_error("\"n_head\": 4", "\"n_head\": 5", "n_embd 32 is not a multiple of n_head 5");
  expect_error("\"n_embd\": 32", "\"n_embd\": -32", "key \"n_embd\": expected a positive integer");
  expect_error("{", "[", "not valid JSON");
}

TEST(HfGpt2, AGptWithoutBiasesExportsZeroBiases) {
  nn::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.bias = false;
  nn::GPT model(c);
  const mpt::StateDict hf = nn::hf_gpt2_state_dict(model);
  EXPECT_EQ(hf.size(), 16u);  // every GPT-2 tensor
  EXPECT_EQ(hf.at("transformer.h.0.mlp.c_fc.bias").to_vector<float>(), std::vector<float>(32, 0.0f));
  nn::GPT back(c);
  nn::load_hf_gpt2_state_dict(back, hf);
  expect_same_parameters(model, back);
  mpt::StateDict nonzero = hf;
  nonzero["transformer.ln_f.bias"] = Tensor::ones({8});
  EXPECT_NE(error_message([&] { nn::load_hf_gpt2_state_dict(back, nonzero); })
                .find("\"transformer.ln_f.bias\" is not zero, but this GPT has no biases"),
            std::string::npos);
}
