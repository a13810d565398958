// examples/mpt_export.cpp: mpt-export: a train_gpt checkpoint in, a GGUF file or a compressed-tensors checkpoint out.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "mpt/data/tokenizer.h"
#include "mpt/deploy/export.h"
#include "mpt/train/checkpoint.h"

namespace {

struct Options {
  std::string checkpoint, format, out, tokenizer;
  int64_t group = 32;
  bool plan = false;
};

void run(const Options& o) {
  namespace deploy = mpt::deploy;
  const deploy::Format format = deploy::parse_format(o.format);
  const std::filesystem::path dir = mpt::train::resolve_checkpoint(o.checkpoint);
  const std::unique_ptr<mpt::nn::LanguageModel> model = deploy::load_checkpoint_model(dir);
  // train_gpt writes the tokenizer beside its checkpoints (the save directory).
  const std::filesystem::path tok_path =
      o.tokenizer.empty() ? dir.parent_path() / "tokenizer.json" : std::filesystem::path(o.tokenizer);
  std::unique_ptr<mpt::data::Tokenizer> tokenizer;
  if (deploy::is_gguf(format)) {
    MPT_CHECK(std::filesystem::is_regular_file(tok_path), "[mpt-export] {} needs the tokenizer, and there is none at "
              "'{}': give --tokenizer (train_gpt --save-dir writes tokenizer.json beside the checkpoints)", o.format,
              tok_path.string());
    tokenizer = mpt::data::load_tokenizer(tok_path);
  }
  const deploy::ExportOptions options{.format = format, .group_size = o.group, .tokenizer = tokenizer.get(),
                                      .name = dir.filename().string()};
  const auto scheme = deploy::scheme(options);
  const std::string weights = scheme ? fmt::format(" (weights {})", scheme->weight->str())
                              : format == deploy::Format::GgufQ4_K
                                  ? " (weights Q4_K, post-training; Q8_0 where the width is not a multiple of 256)"
                                  : "";
  fmt::print("checkpoint: {} ({}); format {}{}\n", dir.string(), model->describe(), o.format, weights);
  const std::vector<deploy::TensorPlan> plan = deploy::plan_export(*model, options);  // every check, nothing written
  if (o.plan) {
    for (const deploy::TensorPlan& t : plan) {
      std::string shape;
      for (int64_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      fmt::print("  {:<44} [{}] {}\n", t.name, shape, t.type);
    }
    return;
  }
  const int64_t bytes = deploy::export_model(*model, options, o.out);
  fmt::print("wrote {} ({:.2f} MB, {} tensors)\n", o.out, static_cast<double>(bytes) / 1e6, plan.size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mpt-export: writes a train_gpt checkpoint (GPT-2 or Llama) for inference runtimes"};
  Options o;
  app.add_option("checkpoint", o.checkpoint, "a train_gpt --save-dir, or one of its step-* checkpoints")->required();
  app.add_option("--format", o.format, "gguf-f32, gguf-q8_0, gguf-q4_0, gguf-q4_k (llama.cpp); ct-int8 (W8A8), ct-int4 "
                 "(W4A16), ct-fp8 (compressed-tensors: transformers, vLLM)")->required();
  app.add_option("--out", o.out, "the GGUF file, or the compressed-tensors directory, to write");
  app.add_option("--group", o.group, "INT4 group size (32 or 128)")->check(CLI::PositiveNumber);
  app.add_option("--tokenizer", o.tokenizer, "the tokenizer JSON (default: tokenizer.json beside the checkpoints)");
  app.add_flag("--plan", o.plan, "list the tensors and their types, check everything, write nothing");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!o.plan && o.out.empty()) throw std::runtime_error("--out is required (or --plan)");
    run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpt-export: %s\n", e.what());
    return 1;
  }
  return 0;
}
