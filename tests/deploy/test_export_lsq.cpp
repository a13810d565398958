// tests/deploy/test_export_lsq.cpp: exports of models that learned their weight scales (LSQ): the files' codes on the learned grid (GGUF's rotary rows with their scales), equal to quantized inference's and apply_export_quantization's weights; checkpoints with learned scales load; a scheme mismatch is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "mpt/deploy/export.h"
#include "mpt/deploy/quantize.h"
#include "mpt/io/gguf.h"
#include "mpt/mpt.h"
#include "mpt/nn/quantize.h"
#include "op_test.h"
#include "export_test_util.h"
#include "test_util.h"

namespace mpt {
namespace {

namespace fs = std::filesystem;
using namespace export_test;  // NOLINT(build/namespaces)
using amp::QatPolicy;
using amp::QatScheme;
using deploy::ExportOptions;
using deploy::Format;

nn::LlamaConfig llama64() {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 300, c.block_size = 16, c.n_embd = 64, c.n_head = 4, c.n_kv_head = 2, c.intermediate_size = 128;
  return c;
}

// Learned scales moved off the absmax ones (as training would), different per row.
void learn_and_move(nn::Module& model, const QatScheme& scheme) {
  nn::learn_quantization_scales(model, QatPolicy::linears_but_head(scheme));
  autograd::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    if (p.name.find("weight_log_scale") == std::string::npos) continue;
    Tensor s = p.tensor;  // the log of the scale
    const int64_t rows = s.shape()[0];
    std::vector<float> f(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) f[static_cast<size_t>(r)] = std::log(0.6f + 0.01f * static_cast<float>(r % 30));
    s.copy_(s + Tensor::from_vector(f, {rows, 1}));
  }
}

// A Llama with learned INT4 g32 scales, exported to gguf-q4_0: every quantized weight in the file (rotary rows
// included) dequantizes to apply_export_quantization's weight, which is quantized inference's (codes on the learned
// FP16-rounded scales), and differs from the absmax export's.
TEST(ExportLsq, GgufCodesAreOnTheLearnedScales) {
  const QatScheme scheme = QatScheme::named("int4");
  nn::Llama model(llama64());
  learn_and_move(model, scheme);
  const ExportOptions o{.format = Format::GgufQ4_0, .tokenizer = &bpe300()};
  const fs::path path = temp("mpt_lsq_q4_0") += ".gguf";
  deploy::export_model(model, o, path);
  nn::Llama absmax(llama64());  // the same weights without learned scales
  {
    autograd::NoGradGuard no_grad;
    const auto src = model.named_parameters();
    for (const auto& p : absmax.named_parameters())
      for (const auto& q : src)
        if (q.name == p.name) Tensor(p.tensor).copy_(q.tensor);
  }
  const fs::path abs_path = temp("mpt_lsq_abs") += ".gguf";
  deploy::export_model(absmax, o, abs_path);
  const io::GgufFile f = io::read_gguf(path), fa = io::read_gguf(abs_path);
  fs::remove(path), fs::remove(abs_path);

  nn::Llama applied(llama64());
  {
    autograd::NoGradGuard no_grad;
    nn::learn_quantization_scales(applied, QatPolicy::linears_but_head(scheme));
    const auto src = model.named_parameters();
    for (const auto& p : applied.named_parameters())
      for (const auto& q : src)
        if (q.name == p.name) Tensor(p.tensor).copy_(q.tensor);
  }
  deploy::apply_export_quantization(applied, o);
  // v_proj and the MLP keep our row order (no rotary reordering): compare them directly.
  for (const auto& [gguf, ours] : {std::pair{"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
                                   std::pair{"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"}}) {
    const io::GgufTensorInfo* t = f.find_tensor(gguf);
    const io::GgufTensorInfo* ta = fa.find_tensor(gguf);
    ASSERT_NE(t, nullptr);
    ASSERT_NE(ta, nullptr);
    const std::vector<float> got = io::dequantize_gguf(t->type, t->bytes, t->numel());
    Tensor want;
    for (const auto& p : applied.named_parameters())
      if (p.name == ours) want = p.tensor;
    EXPECT_EQ(got, want.contiguous().to_vector<float>()) << gguf;
    EXPECT_NE(got, io::dequantize_gguf(ta->type, ta->bytes, ta->numel())) << gguf << ": the learned scales were ignored";
  }
  // q_proj: llama.cpp's rotary order moves whole rows with their scales, so the file's rows are a permutation of
  // apply_export_quantization's.
  const io::GgufTensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  std::vector<float> got = io::dequantize_gguf(q->type, q->bytes, q->numel()), want;
  for (const auto& p : applied.named_parameters())
    if (p.name == "model.layers.0.self_attn.q_proj.weight") want = p.tensor.contiguous().to_vector<float>();
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);

  // Quantized inference in mptrain reads the same codes: its logits equal the applied model's up to float sums.
  nn::quantize_for_inference(model, QatPolicy::linears_but_head(scheme));
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 7, 3}, {1, 6});
  autograd::NoGradGuard no_grad;
  EXPECT_LT(testing::max_abs_error(model.forward(ids), applied.forward(ids)), 1e-4);
}

// A learned INT4 g32 model exported with another group is refused before anything is written; gguf-q4_k ignores the
// learned scales (its own quantization).
TEST(ExportLsq, AnotherSchemeIsRefusedAndQ4KQuantizesItsOwnWay) {
  nn::Llama model(llama64());
  learn_and_move(model, QatScheme::named("int4"));
  const fs::path path = temp("mpt_lsq_bad") += ".gguf";
  EXPECT_MPT_ERROR(deploy::export_model(model, {.format = Format::GgufQ4_0, .group_size = 64, .tokenizer = &bpe300()},
                                        path),
                   "learned its weight scales (LSQ) for int4-g32");
  EXPECT_MPT_ERROR(deploy::export_model(model, {.format = Format::GgufQ8_0, .tokenizer = &bpe300()}, path),
                   "the format writes int8-channel");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_NO_THROW(deploy::plan_export(model, {.format = Format::GgufQ4_K, .tokenizer = &bpe300()}));
}

// A checkpoint of an LSQ run ("+lsq" in its precision) loads through load_checkpoint_model with its scales.
TEST(ExportLsq, CheckpointsWithLearnedScalesLoad) {
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 1, c.n_head = 2, c.n_embd = 32, c.seed = 4;
  nn::GPT model(c);
  const QatScheme scheme = QatScheme::named("int4");
  learn_and_move(model, scheme);
  amp::Policy policy = amp::Policy::fp32();
  policy.qat = std::make_shared<const QatPolicy>(QatPolicy::linears_but_head(scheme));
  train::Trainer trainer(model, train::adamw({.lr = 1e-3}), {.policy = policy, .precision_name = "fp32+qat-int4-g32+lsq"});
  const fs::path dir = temp("mpt_lsq_ckpt");
  fs::remove_all(dir);
  const fs::path saved = trainer.save(dir);
  const auto loaded = deploy::load_checkpoint_model(saved);
  int scales = 0;
  const auto want = model.named_parameters();
  for (const auto& p : loaded->named_parameters()) {
    if (p.name.find("weight_log_scale") == std::string::npos) continue;
    ++scales;
    for (const auto& q : want) {
      if (q.name == p.name) {
        EXPECT_EQ(p.tensor.to_vector<float>(), q.tensor.to_vector<float>()) << p.name;
      }
    }
  }
  EXPECT_EQ(scales, 4);
  fs::remove_all(dir);
  EXPECT_EQ(QatScheme::from_precision("bf16+qat-int4-g128+lsq")->scheme.name, "int4-g128");
  EXPECT_TRUE(QatScheme::from_precision("bf16+qat-int4-g128+lsq")->learned_scales);
  EXPECT_FALSE(QatScheme::from_precision("fp32+qat-int8")->learned_scales);
  EXPECT_FALSE(QatScheme::from_precision("fp32").has_value());
  EXPECT_MPT_ERROR(QatScheme::from_precision("fp32+qat-int4-g32+foo"), "unknown suffix");
}

}  // namespace
}  // namespace mpt
