// tests/deploy/test_export_q4k.cpp: gguf-q4_k exports: Q4_K Linear weights (Q8_0 per tensor where the width is not a multiple of 256), read back equal to apply_export_quantization's weights, their plan, file type and refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "mpt/deploy/export.h"
#include "mpt/deploy/quantize.h"
#include "mpt/io/gguf.h"
#include "mpt/mpt.h"
#include "export_test_util.h"
#include "test_util.h"

namespace mpt {
namespace {

namespace fs = std::filesystem;
using namespace export_test;  // NOLINT(build/namespaces)
using deploy::ExportOptions;
using deploy::Format;

const char* kFallback = "Q8_0 (Q4_K fallback: width 384 is not a multiple of 256)";

std::string plan_type(const std::vector<deploy::TensorPlan>& plan, const std::string& name) {
  for (const deploy::TensorPlan& t : plan)
    if (t.name == name) return t.type;
  return "(missing)";
}

nn::LlamaConfig llama256() {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 300, c.block_size = 16, c.n_embd = 256, c.n_head = 4, c.n_kv_head = 2, c.intermediate_size = 512;
  return c;
}

nn::GPTConfig gpt_config(int64_t embd) {
  nn::GPTConfig c;
  c.vocab_size = 20, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = embd, c.seed = 3;
  return c;
}

data::CharTokenizer tokenizer20() { return data::CharTokenizer("abcdefghij klmnopqr\n"); }

TEST(ExportGgufQ4K, FormatNameAndNoQatScheme) {
  EXPECT_EQ(deploy::parse_format("gguf-q4_k"), Format::GgufQ4_K);
  EXPECT_EQ(deploy::format_name(Format::GgufQ4_K), "gguf-q4_k");
  EXPECT_TRUE(deploy::is_gguf(Format::GgufQ4_K));
  EXPECT_FALSE(deploy::scheme({.format = Format::GgufQ4_K}).has_value());
  EXPECT_MPT_ERROR(deploy::parse_format("gguf-q4_k_m"), "gguf-q4_0, gguf-q4_k, ct-int8");
}

// Width 256: every Linear weight but the head is Q4_K (file type MOSTLY_Q4_K_S), q/k in llama.cpp's rotary row order,
// and the file's values are the weights apply_export_quantization gives the model, bit for bit.
TEST(ExportGgufQ4K, LlamaWeightsAreQ4KAndReadBackAsTheAppliedWeights) {
  nn::Llama model(llama256());
  const ExportOptions o{.format = Format::GgufQ4_K, .tokenizer = &bpe300()};
  const std::vector<deploy::TensorPlan> plan = deploy::plan_export(model, o);
  const fs::path path = temp("mpt_export_q4k_llama.gguf");
  deploy::export_model(model, o, path);
  const io::GgufFile g = io::read_gguf(path);
  fs::remove(path);
  EXPECT_EQ(std::get<uint32_t>(*g.find("general.file_type")), 14u);
  EXPECT_EQ(std::get<uint32_t>(*g.find("general.quantization_version")), 2u);
  const std::vector<std::string> linears = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                            "ffn_gate", "ffn_up", "ffn_down"};
  for (int l = 0; l < 2; ++l)
    for (const std::string& n : linears) {
      const std::string name = "blk." + std::to_string(l) + "." + n + ".weight";
      EXPECT_EQ(g.find_tensor(name)->type, io::GgufType::Q4_K) << name;
      EXPECT_EQ(plan_type(plan, name), "Q4_K") << name;
    }
  for (const std::string name :
       {"token_embd.weight", "output.weight", "output_norm.weight", "blk.0.attn_norm.weight"}) {
    EXPECT_EQ(g.find_tensor(name)->type, io::GgufType::F32) << name;
    EXPECT_EQ(plan_type(plan, name), "F32") << name;
  }
  const std::string h = "model.layers.1.";
  const std::vector<float> down = floats(param(model, h + "mlp.down_proj.weight"));
  const std::vector<float> q_before = floats(param(model, h + "self_attn.q_proj.weight"));

  const std::vector<std::string> paths = deploy::apply_export_quantization(model, o);
  EXPECT_EQ(paths.size(), 14u);
  EXPECT_EQ(paths.front(), "model.layers.0.self_attn.q_proj.weight");
  // Q4_K of the row-major weight, dequantized: what the file holds.
  const std::vector<float> q4k = io::dequantize_gguf(io::GgufType::Q4_K, io::quantize_q4_k(down), 512 * 256);
  EXPECT_EQ(floats(param(model, h + "mlp.down_proj.weight")), q4k);
  EXPECT_NE(q4k, down);
  EXPECT_EQ(gguf_values(g, "blk.1.ffn_down.weight"), q4k);
  EXPECT_NE(floats(param(model, h + "self_attn.q_proj.weight")), q_before);
  EXPECT_EQ(gguf_values(g, "blk.1.attn_q.weight"),
            interleave_rows(floats(param(model, h + "self_attn.q_proj.weight")), 4, 256, 256));
  EXPECT_EQ(gguf_values(g, "blk.1.attn_k.weight"),
            interleave_rows(floats(param(model, h + "self_attn.k_proj.weight")), 2, 128, 256));
  for (const auto& [gguf, ours] : std::vector<std::pair<std::string, std::string>>{
           {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"}, {"ffn_gate", "mlp.gate_proj"},
           {"ffn_up", "mlp.up_proj"}}) {
    EXPECT_EQ(gguf_values(g, "blk.1." + gguf + ".weight"), floats(param(model, h + ours + ".weight"))) << ours;
  }
  EXPECT_EQ(gguf_values(g, "output.weight"), floats(param(model, "lm_head.weight")));  // the head is untouched
}

// Width 384: Q4_K where the width is a multiple of 256 (mlp.c_proj, 1536 wide), Q8_0 elsewhere, per tensor, with
// gguf-q8_0's very bytes; file type MOSTLY_Q4_K_M.
TEST(ExportGgufQ4K, Gpt384FallsBackToQ8_0PerTensor) {
  nn::GPT model(gpt_config(384));
  const data::CharTokenizer tok = tokenizer20();
  const ExportOptions o{.format = Format::GgufQ4_K, .tokenizer = &tok};
  const std::vector<deploy::TensorPlan> plan = deploy::plan_export(model, o);
  EXPECT_EQ(plan_type(plan, "blk.0.attn_qkv.weight"), kFallback);
  EXPECT_EQ(plan_type(plan, "blk.0.attn_output.weight"), kFallback);
  EXPECT_EQ(plan_type(plan, "blk.1.ffn_up.weight"), kFallback);
  EXPECT_EQ(plan_type(plan, "blk.1.ffn_down.weight"), "Q4_K");
  EXPECT_EQ(plan_type(plan, "blk.1.ffn_down.bias"), "F32");
  EXPECT_EQ(plan_type(plan, "token_embd.weight"), "F32");
  const fs::path path = temp("mpt_export_q4k_gpt.gguf"), q8_path = temp("mpt_export_q8_gpt.gguf");
  deploy::export_model(model, o, path);
  deploy::export_model(model, {.format = Format::GgufQ8_0, .tokenizer = &tok}, q8_path);
  const io::GgufFile g = io::read_gguf(path), q8 = io::read_gguf(q8_path);
  fs::remove(path);
  fs::remove(q8_path);
  EXPECT_EQ(std::get<uint32_t>(*g.find("general.file_type")), 15u);
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const std::string n : {"attn_qkv", "attn_output", "ffn_up"}) {
      EXPECT_EQ(g.find_tensor(b + n + ".weight")->type, io::GgufType::Q8_0) << n;
      EXPECT_EQ(g.find_tensor(b + n + ".weight")->bytes, q8.find_tensor(b + n + ".weight")->bytes) << n;
    }
    EXPECT_EQ(g.find_tensor(b + "ffn_down.weight")->type, io::GgufType::Q4_K);
  }
  const std::vector<std::string> paths = deploy::apply_export_quantization(model, o);
  EXPECT_EQ(paths.size(), 8u);
  for (int l = 0; l < 2; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    for (const auto& [gguf, ours] : std::vector<std::pair<std::string, std::string>>{{"attn_qkv", "attn.c_attn"},
                                                                                    {"attn_output", "attn.c_proj"},
                                                                                    {"ffn_up", "mlp.c_fc"},
                                                                                    {"ffn_down", "mlp.c_proj"}}) {
      EXPECT_EQ(gguf_values(g, b + gguf + ".weight"), floats(param(model, h + ours + ".weight"))) << ours;
      EXPECT_EQ(gguf_values(g, b + gguf + ".bias"), floats(param(model, h + ours + ".bias"))) << ours;
    }
  }
  EXPECT_EQ(gguf_values(g, "token_embd.weight"), floats(param(model, "wte.weight")));
}

// The other formats' weights are nn::quantize_weights' (the scheme's fake-quantized values); gguf-f32 changes none.
TEST(ExportGgufQ4K, ApplyingTheOtherFormatsIsTheirSchemesWeights) {
  nn::GPT a(gpt_config(64)), b(gpt_config(64));
  EXPECT_TRUE(deploy::apply_export_quantization(a, {.format = Format::GgufF32}).empty());
  EXPECT_EQ(floats(param(a, "h.0.mlp.c_fc.weight")), floats(param(b, "h.0.mlp.c_fc.weight")));
  for (const Format f : {Format::GgufQ8_0, Format::GgufQ4_0}) {
    nn::GPT x(gpt_config(64)), y(gpt_config(64));
    const ExportOptions o{.format = f, .group_size = 32};
    const std::vector<std::string> paths = deploy::apply_export_quantization(x, o);
    EXPECT_EQ(paths, nn::quantize_weights(y, amp::QatPolicy::linears_but_head(*deploy::scheme(o))));
    for (const auto& p : x.named_parameters()) EXPECT_EQ(floats(p.tensor), floats(param(y, p.name))) << p.name;
  }
}

TEST(ExportGgufQ4K, AWidthNeitherBlockFitsIsRefusedBeforeAnythingChanges) {
  nn::GPT narrow(gpt_config(48)), same(gpt_config(48));
  const data::CharTokenizer tok = tokenizer20();
  const fs::path path = temp("mpt_export_q4k_refused.gguf");
  const char* why = "cannot be written as gguf-q4_k: its width 48 is a multiple neither of Q4_K's 256-wide blocks nor "
                    "of the 32-wide blocks of its Q8_0 fallback";
  EXPECT_MPT_ERROR(deploy::export_model(narrow, {.format = Format::GgufQ4_K, .tokenizer = &tok}, path), why);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_MPT_ERROR(deploy::plan_export(narrow, {.format = Format::GgufQ4_K, .tokenizer = &tok}), why);
  EXPECT_MPT_ERROR(deploy::apply_export_quantization(narrow, {.format = Format::GgufQ4_K}), why);
  for (const auto& p : narrow.named_parameters()) EXPECT_EQ(floats(p.tensor), floats(param(same, p.name))) << p.name;
}

}  // namespace
}  // namespace mpt
