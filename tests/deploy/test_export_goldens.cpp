// tests/deploy/test_export_goldens.cpp: what real runtimes made of mptrain's exports (tests/goldens/quantized, tools/make_quant_goldens.sh): llama.cpp's logits and greedy tokens, transformers + compressed-tensors' logits, the gguf package's dequantized weights, each against the same export made here (same sha256) and mptrain's own quantized model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mpt/deploy/export.h"
#include "mpt/io/gguf.h"
#include "mpt/io/safetensors.h"
#include "mpt/mpt.h"
#include "mpt/train/init_from.h"
#include "export_test_util.h"
#include "sha256.h"

namespace mpt {
namespace {

namespace fs = std::filesystem;
using namespace export_test;  // NOLINT(build/namespaces)
const fs::path kDir = fs::path(MPT_GOLDENS_DIR) / "quantized";
// general.name: mpt-export names a GGUF file after its checkpoint directory.
const char* kName = "step-00000400";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<nn::Llama> golden_llama() {
  auto m = std::make_unique<nn::Llama>(nn::parse_hf_llama_config(read_file(kDir / "llama/config.json")));
  train::init_from(*m, kDir / "llama");
  return m;
}

// max |a - b| over max |b|.
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double{a[i]} - b[i])), s = std::max(s, std::fabs(double{b[i]}));
  return d / s;
}

// Greedy decoding with the KV cache; each step's top-2 margin alongside.
std::pair<std::vector<int64_t>, std::vector<float>> greedy(const nn::LanguageModel& m, const std::vector<int64_t>& prompt,
                                                           int64_t n) {
  autograd::NoGradGuard ng;
  nn::KvCache cache;
  const int64_t V = m.vocab_size();
  Tensor logits = m.forward_cached(Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())}), cache);
  std::vector<int64_t> out;
  std::vector<float> margin;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> l = floats(logits.select(0, 0).slice(-1, 0, V));
    const int64_t next = std::max_element(l.begin(), l.end()) - l.begin();
    const float top = l[static_cast<size_t>(next)];
    l[static_cast<size_t>(next)] = -1e30f;
    margin.push_back(top - *std::max_element(l.begin(), l.end()));
    out.push_back(next);
    logits = m.forward_cached(Tensor::from_vector(std::vector<int64_t>{next}, {1, 1}), cache);
  }
  return {out, margin};
}

// llama.cpp (llama-cpp-python 0.3.36, F32 KV cache) on the GGUF exports. mptrain's counterpart of each file: FP32;
// W8A8 for q8_0 (llama.cpp quantizes activations to q8_0 blocks in its dot products); W4A16 INT4-g32 for q4_0. The GPT's
// f32 file differs by llama.cpp's GELU (an FP16 lookup table on the CPU).
TEST(ExportGoldens, LlamaCppComputesWhatMptrainComputes) {
  const io::SafetensorsFile g(kDir / "llama_cpp.safetensors");
  const auto golden = io::load_safetensors(kDir / "llama_cpp.safetensors");
  struct Case {
    const char* model;
    const char* format;
    const char* scheme;
    double logit_tol;  // relative to max |logit|
  };
  for (const Case& c : {Case{"llama", "f32", "", 1e-5}, Case{"llama", "q8_0", "int8", 2e-2},
                        Case{"llama", "q4_0", "int4", 2e-2}, Case{"gpt", "f32", "", 5e-4},
                        Case{"gpt", "q8_0", "int8", 2e-2}}) {
    const std::string key = std::string(c.model) + "." + c.format;
    SCOPED_TRACE(key);
    const bool is_llama = std::string(c.model) == "llama";
    std::unique_ptr<nn::LanguageModel> model;
    if (is_llama) model = golden_llama();
    else model = nn::load_hf_gpt2(kDir / "gpt");
    const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(kDir / c.model / "tokenizer.json");
    const fs::path path = temp("mpt_golden_" + key + ".gguf");
    deploy::export_model(*model, {.format = deploy::parse_format(std::string("gguf-") + c.format), .tokenizer = tok.get(),
                                  .name = kName}, path);
    EXPECT_EQ(testing::sha256_hex(read_file(path)), g.metadata().at(key + ".gguf_sha256"))
        << "the export differs from the file llama.cpp ran";
    fs::remove(path);
    if (*c.scheme != '\0') {
      nn::quantize_for_inference(*model, amp::QatPolicy::linears_but_head(amp::QatScheme::named(c.scheme)));
    }
    const std::vector<int64_t> ids = golden.at(std::string(c.model) + ".ids").to_vector<int64_t>();
    autograd::NoGradGuard ng;
    const Tensor ours = model->forward(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}))
                            .select(0, 0).slice(-1, 0, model->vocab_size());
    const std::vector<float> theirs = floats(golden.at(key + ".logits"));
    const double r = rel(floats(ours), theirs);
    EXPECT_LT(r, c.logit_tol);
    // Greedy tokens: equal until a step whose top-2 margin lies within the logit tolerance (a near tie either runtime
    // may break), and for at least 24 of the 32 tokens.
    const auto [tokens, margin] = greedy(*model, ids, 32);
    const std::vector<int64_t> want = golden.at(key + ".generated").to_vector<int64_t>();
    const double max_logit = *std::max_element(theirs.begin(), theirs.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
    size_t same = 0;
    while (same < want.size() && tokens[same] == want[same]) ++same;
    EXPECT_GE(same, 24u) << "logits relative difference " << r;
    if (same < want.size()) {
      EXPECT_LT(margin[same], 2 * c.logit_tol * std::fabs(max_logit)) << "the runtimes part at token " << same
                                                                        << " without a near tie";
    }
    if (*c.scheme == '\0') {
      EXPECT_EQ(same, want.size());  // full precision: every token
    }
  }
}

// transformers 4.49 + compressed-tensors 0.12.2 on the Llama's compressed-tensors exports, against mptrain's quantized
// inference of the same scheme. INT4 and FP8 weights (and FP8's per-token inputs) are computed alike: float rounding
// apart; INT8 inputs differ by design (compressed-tensors divides the token's amax by 127.5 and clamps to [-128, 127],
// mptrain by 127 on [-127, 127], as vLLM's int8 kernel does), which moves the logits by the activation step.
TEST(ExportGoldens, TransformersComputesWhatMptrainComputes) {
  const io::SafetensorsFile g(kDir / "compressed_tensors.safetensors");
  const auto golden = io::load_safetensors(kDir / "compressed_tensors.safetensors");
  const std::vector<int64_t> ids = io::load_safetensors(kDir / "llama_cpp.safetensors").at("llama.ids").to_vector<int64_t>();
  for (const auto& [f, tol] : std::vector<std::pair<std::string, double>>{{"int4", 1e-5}, {"fp8", 1e-5}, {"int8", 2e-2}}) {
    SCOPED_TRACE(f);
    std::unique_ptr<nn::Llama> model = golden_llama();
    const fs::path dir = temp("mpt_golden_ct_" + f);
    deploy::export_model(*model, {.format = deploy::parse_format("ct-" + f)}, dir);
    EXPECT_EQ(testing::sha256_hex(read_file(dir / "model.safetensors")), g.metadata().at(f + ".model_sha256"));
    fs::remove_all(dir);
    nn::quantize_for_inference(*model, amp::QatPolicy::linears_but_head(amp::QatScheme::named(f)));
    autograd::NoGradGuard ng;
    const Tensor ours = model->forward(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}));
    EXPECT_LT(rel(floats(ours), floats(golden.at(f + ".logits"))), tol);
  }
}

// The gguf package (0.19.0) dequantizes our Q8_0 / Q4_0 tensors to exactly the values mptrain computes with.
TEST(ExportGoldens, TheGgufPackageReadsTheQuantizedWeightsExactly) {
  const io::SafetensorsFile g(kDir / "gguf_py.safetensors");
  const auto golden = io::load_safetensors(kDir / "gguf_py.safetensors");
  const std::unique_ptr<nn::GPT> gpt = nn::load_hf_gpt2(kDir / "gpt");
  const std::unique_ptr<data::Tokenizer> gpt_tok = data::load_tokenizer(kDir / "gpt/tokenizer.json");
  const std::unique_ptr<nn::Llama> llama = golden_llama();
  const std::unique_ptr<data::Tokenizer> llama_tok = data::load_tokenizer(kDir / "llama/tokenizer.json");
  size_t compared = 0;
  for (const auto& [model, f] : std::vector<std::pair<std::string, std::string>>{{"gpt", "q8_0"}, {"gpt", "q4_0"}, {"llama", "q4_0"}}) {
    const fs::path path = temp("mpt_golden_" + model + "." + f + ".gguf");
    const nn::Module& m = model == "gpt" ? static_cast<const nn::Module&>(*gpt) : *llama;
    deploy::export_model(m, {.format = deploy::parse_format("gguf-" + f), .tokenizer = model == "gpt" ? gpt_tok.get() : llama_tok.get(), .name = kName},
                         path);
    EXPECT_EQ(testing::sha256_hex(read_file(path)), g.metadata().at(model + "." + f + ".gguf_sha256"));
    const io::GgufFile file = io::read_gguf(path);
    const std::string prefix = model + "." + f + ".";
    for (const auto& [name, theirs] : golden) {
      if (!name.starts_with(prefix)) continue;
      const io::GgufTensorInfo* t = file.find_tensor(name.substr(prefix.size()));
      ASSERT_NE(t, nullptr) << name;
      EXPECT_NE(t->type, io::GgufType::F32) << name;
      EXPECT_EQ(io::dequantize_gguf(t->type, t->bytes, t->numel()), floats(theirs)) << name;
      ++compared;
    }
    fs::remove(path);
  }
  EXPECT_EQ(compared, 8u + 8u + 2u);
}

}  // namespace
}  // namespace mpt
