// tests/deploy/test_export.cpp: GGUF and compressed-tensors exports of GPT-2 and Llama: every tensor read back equals mptrain's quantized weights bit for bit (Llama's rotary rows reordered as llama.cpp wants), the INT4 packing, the metadata, and every refusal before anything is written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpt/deploy/export.h"
#include "mpt/io/gguf.h"
#include "mpt/io/safetensors.h"
#include "mpt/mpt.h"
#include "export_test_util.h"
#include "test_util.h"

namespace mpt {
namespace {

namespace fs = std::filesystem;
using namespace export_test;  // NOLINT(build/namespaces)
using deploy::ExportOptions;
using deploy::Format;

nn::GPT tiny_gpt(int64_t embd = 64) {
  nn::GPTConfig c;
  c.vocab_size = 20, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = embd, c.seed = 3;
  return nn::GPT(c);
}

data::CharTokenizer tokenizer20() { return data::CharTokenizer("abcdefghij klmnopqr\n"); }

const std::string& text() {
  static const std::string t = [] {
    std::string s;
    for (int i = 0; i < 400; ++i) s += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 17) + "\n";
    return s;
  }();
  return t;
}

nn::LlamaConfig llama_config(int64_t vocab) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = vocab, c.block_size = 16, c.n_embd = 64, c.n_head = 4, c.n_kv_head = 2, c.intermediate_size = 128;
  return c;
}

// What mptrain computes with for a weight under `spec`: the fake-quantized values.
std::vector<float> quantized(const Tensor& w, const ops::QuantSpec& spec) { return floats(ops::fake_quantize(w, spec)); }

TEST(ExportGguf, Gpt2TensorsReadBackAsTheQuantizedModel) {
  const nn::GPT model = tiny_gpt();
  const data::CharTokenizer tok = tokenizer20();
  for (Format f : {Format::GgufF32, Format::GgufQ8_0, Format::GgufQ4_0}) {
    const fs::path path = temp("mpt_export_gpt.gguf");
    const ExportOptions o{.format = f, .group_size = 32, .tokenizer = &tok};
    const int64_t bytes = deploy::export_model(model, o, path);
    EXPECT_EQ(bytes, static_cast<int64_t>(fs::file_size(path)));
    const io::GgufFile g = io::read_gguf(path);
    EXPECT_EQ(std::get<std::string>(*g.find("general.architecture")), "gpt2");
    EXPECT_EQ(std::get<uint32_t>(*g.find("gpt2.block_count")), 2u);
    EXPECT_EQ(std::get<uint32_t>(*g.find("general.file_type")), f == Format::GgufQ8_0 ? 7u : (f == Format::GgufQ4_0 ? 2u : 0u));
    const auto& tokens = std::get<std::vector<std::string>>(std::get<io::GgufArray>(*g.find("tokenizer.ggml.tokens")));
    ASSERT_EQ(tokens.size(), 20u);
    EXPECT_EQ(tokens[0], "a");
    EXPECT_EQ(tokens[10], "\xC4\xA0");  // ' ' as GPT-2's byte symbol U+0120
    EXPECT_EQ(tokens[19], "\xC4\x8A");  // '\n': U+010A
    EXPECT_EQ(g.tensors.size(), 2u + 2u * 12u + 2u);
    const std::optional<amp::QatScheme> s = deploy::scheme(o);
    for (int l = 0; l < 2; ++l) {
      const std::string h = "h." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
      for (const auto& [gguf, ours] : std::vector<std::pair<std::string, std::string>>{
               {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"}, {"ffn_up", "mlp.c_fc"}, {"ffn_down", "mlp.c_proj"}}) {
        const Tensor w = param(model, h + ours + ".weight");
        const std::vector<float> want = s ? quantized(w, *s->weight) : floats(w);
        EXPECT_EQ(gguf_values(g, b + gguf + ".weight"), want) << io::gguf_type_name(g.find_tensor(b + gguf + ".weight")->type) << " " << ours;
        EXPECT_EQ(gguf_values(g, b + gguf + ".bias"), floats(param(model, h + ours + ".bias")));
      }
      EXPECT_EQ(gguf_values(g, b + "attn_norm.weight"), floats(param(model, h + "ln_1.weight")));
    }
    EXPECT_EQ(gguf_values(g, "token_embd.weight"), floats(param(model, "wte.weight")));
    EXPECT_EQ(gguf_values(g, "position_embd.weight"), floats(param(model, "wpe.weight")));
    EXPECT_EQ(g.find_tensor("output.weight"), nullptr);  // tied: llama.cpp reuses token_embd
    fs::remove(path);
  }
}

TEST(ExportGguf, LlamaRotaryRowsAreReorderedAndTheSentencePieceVocabularyTravels) {
  const data::BpeTokenizer tok = data::BpeTokenizer::train(text(), {.vocab_size = 300, .threads = 1});
  const nn::Llama model(llama_config(tok.vocab_size()));
  const fs::path path = temp("mpt_export_llama.gguf");
  const ExportOptions o{.format = Format::GgufQ4_0, .group_size = 32, .tokenizer = &tok};
  deploy::export_model(model, o, path);
  const io::GgufFile g = io::read_gguf(path);
  EXPECT_EQ(std::get<std::string>(*g.find("general.architecture")), "llama");
  EXPECT_EQ(std::get<uint32_t>(*g.find("llama.attention.head_count_kv")), 2u);
  EXPECT_EQ(std::get<uint32_t>(*g.find("llama.rope.dimension_count")), 16u);
  EXPECT_EQ(std::get<std::string>(*g.find("tokenizer.ggml.model")), "llama");
  const auto& scores = std::get<std::vector<float>>(std::get<io::GgufArray>(*g.find("tokenizer.ggml.scores")));
  const auto& types = std::get<std::vector<int32_t>>(std::get<io::GgufArray>(*g.find("tokenizer.ggml.token_type")));
  ASSERT_EQ(scores.size(), 300u);
  EXPECT_EQ(types[0], 2);    // <unk>
  EXPECT_EQ(types[1], 4);    // "\n", user-defined
  EXPECT_EQ(types[2], 6);    // <0x00>
  EXPECT_EQ(types[299], 1);  // a merge
  const ops::QuantSpec spec = *deploy::scheme(o)->weight;
  const std::string h = "model.layers.1.self_attn.";
  EXPECT_EQ(gguf_values(g, "blk.1.attn_q.weight"),
            interleave_rows(quantized(param(model, h + "q_proj.weight"), spec), 4, 64, 64));
  EXPECT_EQ(gguf_values(g, "blk.1.attn_k.weight"),
            interleave_rows(quantized(param(model, h + "k_proj.weight"), spec), 2, 32, 64));
  EXPECT_EQ(gguf_values(g, "blk.1.attn_v.weight"), quantized(param(model, h + "v_proj.weight"), spec));
  EXPECT_EQ(gguf_values(g, "blk.1.ffn_down.weight"), quantized(param(model, "model.layers.1.mlp.down_proj.weight"), spec));
  EXPECT_EQ(g.find_tensor("output.weight")->type, io::GgufType::F32);  // the LM head stays full precision
  EXPECT_EQ(gguf_values(g, "output.weight"), floats(param(model, "lm_head.weight")));
  fs::remove(path);
}

// compressed-tensors' pack_to_int32: code + 8 of column k in bits 4 (k % 8) of word k / 8.
TEST(ExportCompressedTensors, LlamaInt4IsPackedAndEveryFormatNamesItsScheme) {
  const nn::Llama model(llama_config(40));
  for (Format f : {Format::CtInt8, Format::CtInt4, Format::CtFp8}) {
    const fs::path dir = temp("mpt_export_ct");
    const ExportOptions o{.format = f, .group_size = 32};
    deploy::export_model(model, o, dir);
    const auto t = io::load_safetensors(dir / "model.safetensors");
    std::ifstream in(dir / "config.json");
    const nlohmann::json config = nlohmann::json::parse(in);
    const auto& q = config.at("quantization_config");
    EXPECT_EQ(q.at("quant_method"), "compressed-tensors");
    EXPECT_EQ(q.at("quantization_status"), "compressed");
    EXPECT_EQ(q.at("ignore"), nlohmann::json::array({"lm_head"}));
    const auto& group = q.at("config_groups").at("group_0");
    const std::string name = "model.layers.0.mlp.down_proj.";
    const Tensor w = param(model, name + "weight");
    const ops::QuantSpec spec = *deploy::scheme(o)->weight;
    const auto qw = ops::quantize_groups(w, spec);
    if (f == Format::CtInt4) {
      EXPECT_EQ(q.at("format"), "pack-quantized");
      EXPECT_EQ(group.at("weights").at("group_size"), 32);
      EXPECT_TRUE(group.at("input_activations").is_null());
      const Tensor packed = t.at(name + "weight_packed");
      ASSERT_EQ(packed.shape(), (Shape{64, 16}));
      const std::vector<int32_t> words = packed.to_vector<int32_t>();
      const std::vector<int8_t> codes = qw.codes.to_vector<int8_t>();
      for (size_t k = 0; k < codes.size(); ++k) {
        const int nibble = static_cast<int>((static_cast<uint32_t>(words[k / 8]) >> (4 * (k % 8))) & 0xF);
        ASSERT_EQ(nibble - 8, codes[k]) << k;
      }
      EXPECT_EQ(t.at(name + "weight_shape").to_vector<int64_t>(), (std::vector<int64_t>{64, 128}));
      EXPECT_EQ(t.at(name + "weight_scale").shape(), (Shape{64, 4}));
    } else {
      EXPECT_EQ(q.at("format"), f == Format::CtInt8 ? "int-quantized" : "float-quantized");
      EXPECT_EQ(group.at("input_activations").at("strategy"), "token");
      EXPECT_EQ(group.at("input_activations").at("dynamic"), true);
      const Tensor stored = t.at(name + "weight");
      EXPECT_EQ(stored.dtype(), f == Format::CtInt8 ? DType::I8 : DType::F8E4M3);
      const Tensor scale = t.at(name + "weight_scale");
      ASSERT_EQ(scale.shape(), (Shape{64, 1}));
      // stored * scale is the quantized weight, exactly.
      EXPECT_EQ(floats(stored.to(DType::F32) * scale), quantized(w, spec));
    }
    EXPECT_EQ(floats(t.at("lm_head.weight")), floats(param(model, "lm_head.weight")));
    EXPECT_EQ(floats(t.at("model.norm.weight")), floats(param(model, "model.norm.weight")));
    fs::remove_all(dir);
  }
}

// Nothing is written when the format cannot hold the model; an older file stays intact.
TEST(ExportRefusals, EachIsAClearErrorBeforeAnythingIsWritten) {
  const data::CharTokenizer tok = tokenizer20();
  const fs::path path = temp("mpt_export_refused.gguf");
  { std::ofstream(path) << "old"; }
  const auto untouched = [&] {
    std::ifstream in(path);
    std::string s;
    in >> s;
    return s == "old";
  };
  const nn::GPT narrow = tiny_gpt(48);  // 48 is not a multiple of q4_0's 32-wide blocks
  EXPECT_MPT_ERROR(deploy::export_model(narrow, {.format = Format::GgufQ4_0, .tokenizer = &tok}, path),
                   "the width 48 (group 32) is not a multiple of 32");
  EXPECT_TRUE(untouched());
  const nn::GPT model = tiny_gpt();
  EXPECT_MPT_ERROR(deploy::export_model(model, {.format = Format::GgufQ8_0}, path), "carries its tokenizer");
  const data::CharTokenizer small("abc");
  EXPECT_MPT_ERROR(deploy::export_model(model, {.format = Format::GgufQ8_0, .tokenizer = &small}, path),
                   "the tokenizer has 3 tokens but the model's vocabulary is 20");
  EXPECT_MPT_ERROR(deploy::export_model(model, {.format = Format::GgufQ4_0, .group_size = 48, .tokenizer = &tok}, path),
                   "group 48");
  EXPECT_MPT_ERROR(deploy::export_model(model, {.format = Format::CtInt4}, temp("mpt_export_ct_refused")),
                   "transformers' GPT-2 is built of Conv1D layers");
  EXPECT_FALSE(fs::exists(temp("mpt_export_ct_refused")));
  const nn::Llama llama(llama_config(20));
  EXPECT_MPT_ERROR(deploy::export_model(llama, {.format = Format::GgufQ8_0, .tokenizer = &tok}, path),
                   "a llama model in GGUF needs a SentencePiece tokenizer");
  EXPECT_MPT_ERROR(deploy::export_model(llama, {.format = Format::CtInt4, .group_size = 96}, temp("mpt_export_ct2")),
                   "group size 96 does not divide the last dimension");
  EXPECT_TRUE(untouched());
  EXPECT_MPT_ERROR(deploy::parse_format("gguf-q2_k"), "unknown format 'gguf-q2_k'");
  nn::Linear lone(32, 32);
  EXPECT_MPT_ERROR(deploy::export_model(lone, {.format = Format::GgufF32, .tokenizer = &tok}, path),
                   "a Linear cannot be exported");
  fs::remove(path);
}

}  // namespace
}  // namespace mpt
