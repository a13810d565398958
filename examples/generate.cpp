// examples/generate.cpp: text from a train_gpt checkpoint, in full precision, with its Linear layers quantized for inference (INT8 / INT4 / FP8) or with an export's weights, with tokens/s.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mpt/amp/qat.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/data/tokenizer.h"
#include "mpt/deploy/export.h"
#include "mpt/deploy/quantize.h"
#include "mpt/io/safetensors.h"
#include "mpt/nn/quantize.h"
#include "mpt/ops/softmax.h"
#include "mpt/train/checkpoint.h"

namespace {

struct Options {
  std::string checkpoint, quantize = "none", prompt = "\n", tokenizer, prompt_ids, logits_out, as_export;
  int64_t group = 32, tokens = 200;
  bool greedy = false;
  uint64_t seed = 1337;
};

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> v;
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t end = std::min(s.find(',', begin), s.size());
    const std::string item = s.substr(begin, end - begin);
    size_t used = 0;
    try {
      v.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    MPT_CHECK(used == item.size() && !item.empty() && v.back() >= 0,
              "[generate] --prompt-ids '{}': '{}' is not a token id (expected comma-separated non-negative integers)",
              s, item);
    begin = end + 1;
  }
  return v;
}

void run(const Options& o) {
  MPT_CHECK(o.as_export.empty() || o.quantize == "none", "[generate] --as-export {} and --quantize {}: give one "
            "(--as-export runs FP32 GEMMs on the export's weights; --quantize runs quantized GEMMs)", o.as_export,
            o.quantize);
  const mpt::deploy::ExportOptions as_export{
      .format = o.as_export.empty() ? mpt::deploy::Format::GgufF32 : mpt::deploy::parse_format(o.as_export),
      .group_size = o.group};
  const std::filesystem::path dir = mpt::train::resolve_checkpoint(o.checkpoint);
  const std::unique_ptr<mpt::nn::LanguageModel> model = mpt::deploy::load_checkpoint_model(dir);
  const std::filesystem::path tok_path =
      o.tokenizer.empty() ? dir.parent_path() / "tokenizer.json" : std::filesystem::path(o.tokenizer);
  const std::unique_ptr<mpt::data::Tokenizer> tokenizer = mpt::data::load_tokenizer(tok_path);
  MPT_CHECK(tokenizer->vocab_size() == model->vocab_size(), "[generate] the tokenizer '{}' has {} ids but the model "
            "{}: they come from different runs", tok_path.string(), tokenizer->vocab_size(), model->vocab_size());
  if (!o.as_export.empty()) {
    const auto replaced = mpt::deploy::apply_export_quantization(*model, as_export);
    fmt::print("weights as {} holds them: {} Linear weights replaced (FP32 GEMMs)\n", o.as_export, replaced.size());
  }
  if (o.quantize != "none") {
    const auto scheme = mpt::amp::QatScheme::named(o.quantize, o.group);
    const auto packed = mpt::nn::quantize_for_inference(*model, mpt::amp::QatPolicy::linears_but_head(scheme));
    fmt::print("quantized for inference: {} Linear layers, weights {}{}\n", packed.size(), scheme.weight->str(),
               scheme.input ? ", inputs " + scheme.input->str() : std::string());
  }
  model->eval();
  mpt::autograd::NoGradGuard no_grad;
  std::vector<int64_t> context;
  if (!o.prompt_ids.empty()) {
    context = parse_ids(o.prompt_ids);
  } else {
    for (int32_t id : tokenizer->encode(o.prompt)) context.push_back(id);
  }
  MPT_CHECK(!context.empty() && static_cast<int64_t>(context.size()) < model->context_length(),
            "[generate] the prompt has {} tokens; the model's context is {}", context.size(), model->context_length());
  const size_t prompt_len = context.size();
  std::mt19937_64 rng(o.seed);
  mpt::nn::KvCache cache;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = model->vocab_size();  // the logits may carry padding columns beyond it
  const mpt::Tensor ids = mpt::Tensor::from_vector(context, {1, static_cast<int64_t>(context.size())});
  // forward_cached gives the last position's logits [1, V]; --logits-out wants every prompt position's.
  mpt::Tensor logits = model->forward_cached(ids, cache).select(0, 0).slice(-1, 0, V).contiguous();
  const mpt::Tensor prompt_logits =
      o.logits_out.empty() ? mpt::Tensor() : model->forward(ids).select(0, 0).slice(-1, 0, V).contiguous();
  const auto t1 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.tokens && cache.length < model->context_length(); ++i) {
    const std::vector<float> l = logits.to(mpt::DType::F32).to_vector<float>();
    int64_t next = 0;
    if (o.greedy) {
      next = std::max_element(l.begin(), l.end()) - l.begin();
    } else {
      const std::vector<float> p = mpt::ops::softmax(logits.to(mpt::DType::F32)).to_vector<float>();
      next = std::discrete_distribution<int64_t>(p.begin(), p.end())(rng);
    }
    context.push_back(next);
    if (i + 1 < o.tokens && cache.length < model->context_length()) {
      logits = model->forward_cached(mpt::Tensor::from_vector(std::vector<int64_t>{next}, {1, 1}), cache)
                   .select(0, 0).slice(-1, 0, V).contiguous();
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  const std::vector<int32_t> out(context.begin() + static_cast<int64_t>(prompt_len), context.end());
  fmt::print("{}{}\n", o.prompt_ids.empty() ? o.prompt : "", tokenizer->decode(out));
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  fmt::print("prompt {} tokens in {:.3f} s; {} tokens in {:.3f} s: {:.1f} tokens/s ({}, {})\n", prompt_len,
             std::chrono::duration<double>(t1 - t0).count(), out.size(), gen_s,
             static_cast<double>(out.size()) / gen_s,
             o.quantize != "none" ? o.quantize : (o.as_export.empty() ? "fp32" : "fp32, " + o.as_export + " weights"),
             o.greedy ? "greedy" : "sampled");
  if (!o.logits_out.empty()) {  // for comparisons with other runtimes (tools/llama_cpp_check.py)
    std::vector<int64_t> gen(out.begin(), out.end());
    mpt::io::save_safetensors(o.logits_out,
                              {{"ids", mpt::Tensor::from_vector(std::vector<int64_t>(context.begin(), context.begin() + static_cast<int64_t>(prompt_len)), {static_cast<int64_t>(prompt_len)})},
                               {"logits", prompt_logits.to(mpt::DType::F32)},
                               {"generated", mpt::Tensor::from_vector(gen, {static_cast<int64_t>(gen.size())})}},
                              {{"quantize", o.quantize}, {"as_export", o.as_export.empty() ? "none" : o.as_export}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"generate: text from a train_gpt checkpoint, optionally with quantized Linear layers"};
  Options o;
  app.add_option("checkpoint", o.checkpoint, "a train_gpt --save-dir, or one of its step-* checkpoints")->required();
  app.add_option("--quantize", o.quantize, "none, int8 (W8A8), int4 (W4A16, --group), fp8")
      ->check(CLI::IsMember({"none", "int8", "int4", "fp8"}));
  app.add_option("--group", o.group, "INT4 group size (--quantize int4, --as-export gguf-q4_0 / ct-int4)")
      ->check(CLI::PositiveNumber);
  app.add_option("--as-export", o.as_export, "run in FP32 with the weights an export format holds, as its consumer "
                 "dequantizes them (gguf-q4_k, gguf-q4_0, gguf-q8_0, ...; mpt::deploy::apply_export_quantization)");
  app.add_option("--prompt", o.prompt, "the text to continue (default: a newline)");
  app.add_option("--prompt-ids", o.prompt_ids, "the prompt as token ids, comma-separated (instead of --prompt)");
  app.add_option("--tokens", o.tokens, "tokens to generate")->check(CLI::PositiveNumber);
  app.add_flag("--greedy", o.greedy, "the most likely token each step (else sampled at temperature 1)");
  app.add_option("--seed", o.seed, "sampling seed");
  app.add_option("--tokenizer", o.tokenizer, "the tokenizer JSON (default: tokenizer.json beside the checkpoints)");
  app.add_option("--logits-out", o.logits_out, "write the prompt's ids and logits and the generated ids here "
                 "(safetensors)");
  CLI11_PARSE(app, argc, argv);
  try {
    run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
