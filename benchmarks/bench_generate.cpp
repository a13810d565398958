// benchmarks/bench_generate.cpp: generation speed, the whole context recomputed per token against GPT::forward_cached.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpt/amp/policy.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/core/device.h"
#include "mpt/core/version.h"
#include "mpt/nn/gpt.h"
#include "mpt/nn/quantize.h"

#include "bench_util.h"

namespace {

using Clock = std::chrono::steady_clock;

int64_t argmax(const mpt::Tensor& logits) {  // [1, V]
  const std::vector<float> v = logits.to(mpt::DType::F32).to_vector<float>();
  return static_cast<int64_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy decoding of n tokens after `prompt`, either way; returns the tokens and the seconds taken.
std::pair<std::vector<int64_t>, double> generate(const mpt::nn::GPT& model, std::vector<int64_t> context, int64_t n,
                                                 bool cached, mpt::Device device) {
  mpt::autograd::NoGradGuard no_grad;
  const int64_t T = model.config().block_size;
  const auto t0 = Clock::now();
  std::vector<int64_t> out;
  mpt::nn::KvCache cache;
  mpt::Tensor logits;
  const auto ids = [&](const std::vector<int64_t>& v) {
    return mpt::Tensor::from_vector(v, {1, static_cast<int64_t>(v.size())}, device);
  };
  if (cached) logits = model.forward_cached(ids(context), cache);
  for (int64_t i = 0; i < n; ++i) {
    if (!cached) {  // the last T tokens, all recomputed (nanoGPT's generate)
      const int64_t len = std::min<int64_t>(static_cast<int64_t>(context.size()), T);
      const std::vector<int64_t> w(context.end() - len, context.end());
      logits = model.forward(mpt::Tensor::from_vector(w, {1, len}, device)).select(1, len - 1);
    }
    const int64_t next = argmax(logits);
    out.push_back(next);
    context.push_back(next);
    if (cached) {
      if (cache.length == T) {  // full: the last T/2 tokens again as a prompt
        cache.clear();
        const std::vector<int64_t> w(context.end() - T / 2, context.end());
        logits = model.forward_cached(mpt::Tensor::from_vector(w, {1, T / 2}, device), cache);
      } else {
        logits = model.forward_cached(mpt::Tensor::from_vector(std::vector<int64_t>{next}, {1, 1}, device), cache);
      }
    }
  }
  return {out, std::chrono::duration<double>(Clock::now() - t0).count()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_generate: greedy generation with and without the KV cache (GPT::forward_cached), one run"};
  int64_t layers = 6, heads = 6, embd = 384, seq = 256, vocab = 65, tokens = 500;
  std::string precision = "fp32", device_name = "best", json_path;
  bool cached_only = false;
  std::string quantized;
  app.add_option("--layers", layers);
  app.add_option("--heads", heads);
  app.add_option("--embd", embd);
  app.add_option("--seq", seq, "context (block_size)");
  app.add_option("--vocab", vocab);
  app.add_option("--tokens", tokens, "tokens to generate after a one-token prompt");
  app.add_option("--precision", precision, "fp32 or bf16 (autocast)");
  app.add_option("--device", device_name, "cpu, cuda or best");
  app.add_option("--json", json_path, "also write the results as JSON here");
  app.add_flag("--cached-only", cached_only, "time the KV-cache path alone (for a profiler)");
  app.add_option("--quantized", quantized, "also generate (KV cache) with the Linear weights quantized for inference "
                 "(nn::quantize_for_inference, every Linear but the tied head): a comma list of int8, int4, "
                 "int4-g128, fp8; the same run and weights");
  CLI11_PARSE(app, argc, argv);
  const mpt::Device device = device_name == "best" ? mpt::Device::best() : mpt::Device::parse(device_name);
  mpt::nn::GPTConfig c;
  c.vocab_size = vocab, c.block_size = seq, c.n_layer = layers, c.n_head = heads, c.n_embd = embd;
  c.where.device = device;
  const mpt::nn::GPT model(c);  // random GPT-2 initialisation: the speed does not depend on the weights
  std::optional<mpt::amp::Autocast> autocast;
  if (precision != "fp32") autocast.emplace(mpt::amp::Policy::named(precision, layers, device));
  const auto [cached_tokens, cached_s] = generate(model, {0}, tokens, true, device);
  if (cached_only) {
    std::printf("KV cache: %lld tokens in %.3f s\n", static_cast<long long>(tokens), cached_s);
    return 0;
  }
  const auto [full_tokens, full_s] = generate(model, {0}, tokens, false, device);
  // Until the cache first refills (seq - 1 tokens) both see the same context: the same greedy tokens expected.
  const int64_t same_span = std::min<int64_t>(tokens, seq - 1);
  int64_t agree = 0;
  while (agree < same_span && full_tokens[static_cast<size_t>(agree)] == cached_tokens[static_cast<size_t>(agree)])
    ++agree;
  std::printf("GPT %lldx%lld, %lld heads, context %lld, vocab %lld, %s on %s (%d threads), mptrain %s\n",
              static_cast<long long>(layers), static_cast<long long>(embd), static_cast<long long>(heads),
              static_cast<long long>(seq), static_cast<long long>(vocab), precision.c_str(), device.str().c_str(),
              mpt::cpu_features().omp_threads, mpt::version());
  std::printf("%-28s %10s %12s\n", "method", "seconds", "tokens/s");
  std::printf("%-28s %10.2f %12.1f\n", "full recompute per token", full_s, static_cast<double>(tokens) / full_s);
  std::printf("%-28s %10.2f %12.1f\n", "KV cache (forward_cached)", cached_s, static_cast<double>(tokens) / cached_s);
  std::printf("speed-up %.1fx; greedy tokens identical for the first %lld of %lld (the span with equal contexts)\n",
              full_s / cached_s, static_cast<long long>(agree), static_cast<long long>(same_span));
  // A cached step reads every weight once for one token: a memory-bound floor, compared with memcpy's bandwidth on
  // the same threads in the same run.
  const double weight_bytes = static_cast<double>(model.num_parameters()) * (precision == "fp32" ? 4.0 : 2.0);
  nlohmann::json quantized_json = nlohmann::json::array();
  if (!quantized.empty()) {
    // The same weights, each scheme's Linear layers as codes + scales; greedy tokens compared with FP32's.
    std::printf("%-28s %10s %12s %10s %22s\n", "quantized (KV cache)", "seconds", "tokens/s", "vs fp32",
                "same greedy tokens");
    for (size_t begin = 0; begin <= quantized.size();) {
      const size_t end = std::min(quantized.find(',', begin), quantized.size());
      const std::string name = quantized.substr(begin, end - begin);
      begin = end + 1;
      const bool g128 = name == "int4-g128";
      mpt::nn::GPT q(c);
      mpt::nn::quantize_for_inference(
          q, mpt::amp::QatPolicy::linears_but_head(mpt::amp::QatScheme::named(g128 ? "int4" : name, g128 ? 128 : 32)));
      const auto [q_tokens, q_s] = generate(q, {0}, tokens, true, device);
      int64_t same = 0;
      while (same < tokens && q_tokens[static_cast<size_t>(same)] == cached_tokens[static_cast<size_t>(same)]) ++same;
      std::printf("%-28s %10.2f %12.1f %9.2fx %15lld of %lld\n", name.c_str(), q_s,
                  static_cast<double>(tokens) / q_s, cached_s / q_s, static_cast<long long>(same),
                  static_cast<long long>(tokens));
      quantized_json.push_back({{"scheme", name}, {"cached_s", q_s}, {"speedup_vs_fp32", cached_s / q_s},
                                {"same_greedy_tokens", same}});
    }
  }
  const double cached_gbps = weight_bytes * static_cast<double>(tokens) / cached_s / 1e9;
  const double copy_gbps = mpt::bench::memcpy_gbps(size_t{256} << 20, 5);
  std::printf("KV-cache step: %.1f MB of weights per token, read at %.1f GB/s; memcpy (read + write) %.1f GB/s\n",
              weight_bytes / 1e6, cached_gbps, copy_gbps);
  if (!json_path.empty()) {
    const nlohmann::json j{{"benchmark", "generate"}, {"layers", layers}, {"embd", embd}, {"heads", heads},
                           {"seq", seq}, {"vocab", vocab}, {"tokens", tokens}, {"precision", precision},
                           {"device", device.str()}, {"threads", mpt::cpu_features().omp_threads},
                           {"full_s", full_s}, {"cached_s", cached_s}, {"speedup", full_s / cached_s},
                           {"greedy_tokens_identical", agree}, {"identical_span", same_span},
                           {"weight_mb_per_token", weight_bytes / 1e6}, {"cached_weight_gbps", cached_gbps},
                           {"memcpy_gbps", copy_gbps}, {"quantized", quantized_json}};
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (f != nullptr) {
      std::fputs(j.dump(1).c_str(), f);
      std::fclose(f);
    }
  }
  return agree == same_span ? 0 : 1;
}
