// examples/mpt_tokenize.cpp: mpt-tokenize: a text to token files (train, validation) and their tokenizer.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "mpt/core/error.h"
#include "mpt/data/token_file.h"
#include "mpt/data/tokenizer.h"

#include "embedded_text.h"

namespace {

std::string read_file(const std::string& path) {
  MPT_CHECK(!std::filesystem::is_directory(path), "[mpt-tokenize] the input '{}' is a directory; --input expects a "
            "text file", path);
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[mpt-tokenize] cannot open the input '{}'", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mpt-tokenize: tokenizes a text into DIR/train.tok and DIR/val.tok (token files) and "
               "DIR/tokenizer.json"};
  std::string input, out, kind = "bpe", vocab_json, merges_txt;
  int64_t vocab_size = 4096;
  double val_fraction = 0.1;
  app.add_option("--input", input, "the text (default: the built-in tinyshakespeare)");
  app.add_option("--out", out, "output directory (created)")->required();
  app.add_option("--tokenizer", kind, "char (one id per byte), bpe (trained by SentencePiece on the text) or gpt2 "
                 "(GPT-2's byte-level BPE from --vocab and --merges)")->check(CLI::IsMember({"char", "bpe", "gpt2"}));
  app.add_option("--vocab", vocab_json, "GPT-2's vocab.json (--tokenizer gpt2)");
  app.add_option("--merges", merges_txt, "GPT-2's merges.txt (--tokenizer gpt2)");
  app.add_option("--vocab-size", vocab_size, "BPE vocabulary size")->check(CLI::Range(260, 1 << 20));
  app.add_option("--val-fraction", val_fraction, "the text's last fraction, kept for validation")
      ->check(CLI::Range(0.0, 0.5));
  CLI11_PARSE(app, argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string text = input.empty() ? std::string(mpt_examples::tinyshakespeare()) : read_file(input);
    MPT_CHECK(!text.empty(), "[mpt-tokenize] the input '{}' is empty", input);
    std::unique_ptr<mpt::data::Tokenizer> tok;
    if (kind == "char") {
      tok = std::make_unique<mpt::data::CharTokenizer>(mpt::data::CharTokenizer::from_text(text));
    } else if (kind == "gpt2") {
      MPT_CHECK(!vocab_json.empty() && !merges_txt.empty(), "[mpt-tokenize] --tokenizer gpt2 needs --vocab vocab.json "
                "and --merges merges.txt (GPT-2's files, e.g. from the Hugging Face hub's gpt2 repository)");
      tok = std::make_unique<mpt::data::Gpt2BpeTokenizer>(
          mpt::data::Gpt2BpeTokenizer::from_files(vocab_json, merges_txt));
    } else {
      // Trained on the training part only, so validation measures text the tokenizer has not seen either.
      const size_t cut = text.size() - static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
      tok = std::make_unique<mpt::data::BpeTokenizer>(
          mpt::data::BpeTokenizer::train(std::string_view(text).substr(0, cut), {.vocab_size = vocab_size}));
    }
    const std::vector<int32_t> ids = tok->encode(text);
    const auto split = static_cast<std::ptrdiff_t>(static_cast<double>(ids.size()) * (1.0 - val_fraction));
    std::filesystem::create_directories(out);
    const std::filesystem::path dir(out);
    mpt::data::write_token_file(dir / "train.tok", std::span<const int32_t>(ids.data(), static_cast<size_t>(split)),
                                tok->vocab_size());
    mpt::data::write_token_file(dir / "val.tok",
                                std::span<const int32_t>(ids.data() + split, ids.size() - static_cast<size_t>(split)),
                                tok->vocab_size());
    tok->save(dir / "tokenizer.json");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("{}: {} bytes -> {} tokens ({:.2f} bytes per token), {} tokenizer, vocab {}\n",
               input.empty() ? "tinyshakespeare (built in)" : input, text.size(), ids.size(),
               static_cast<double>(text.size()) / static_cast<double>(std::max<size_t>(ids.size(), 1)), kind,
               tok->vocab_size());
    fmt::print("wrote {} ({} tokens), {} ({} tokens), {} in {:.1f} s\n", (dir / "train.tok").string(), split,
               (dir / "val.tok").string(), ids.size() - static_cast<size_t>(split),
               (dir / "tokenizer.json").string(), s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpt-tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
