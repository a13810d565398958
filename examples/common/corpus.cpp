// examples/common/corpus.cpp: a run's text or token files, tokenized and split; validation loss, sampling, and the
// data position of a checkpoint.
#include "corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "../embedded_text.h"
#include "../train_gpt_session.h"
#include "mpt/core/error.h"
#include "mpt/ops/softmax.h"

namespace mpt_examples {
namespace {

// The training text: the file at o.data, or the built-in tinyshakespeare when it is empty. A file must be a readable,
// non-empty regular file long enough for a training and a validation window of --seq + 1 characters.
std::string read_text(const Options& o) {
  const std::string& path = o.data;
  std::string text;
  if (path.empty()) {
    text = std::string(tinyshakespeare());
  } else {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    MPT_CHECK(fs::exists(st), "[{}] cannot open the training text '{}': no such file (--data and MPT_DATA name a text "
              "file; without them the built-in tinyshakespeare is used)", o.program, path);
    MPT_CHECK(!fs::is_directory(st), "[{}] the training text '{}' is a directory; --data expects a text file",
              o.program, path);
    std::ifstream in(path, std::ios::binary);
    MPT_CHECK(in, "[{}] cannot open the training text '{}': {}", o.program, path, std::strerror(errno));
    std::ostringstream s;
    s << in.rdbuf();
    MPT_CHECK(!in.bad(), "[{}] cannot read the training text '{}': {}", o.program, path, std::strerror(errno));
    text = s.str();
    MPT_CHECK(!text.empty(), "[{}] the training text '{}' is empty; --data expects a text file (every byte is a "
              "token)", o.program, path);
  }
  // The last tenth is the validation split; each split needs one window of seq + 1 characters plus a start offset.
  const auto need = static_cast<size_t>(10 * (o.seq + 2));
  MPT_CHECK(text.size() >= need, "[{}] the training text '{}' has {} characters; with --seq {} it needs at least {} "
            "(a tenth is held out for validation and each split needs a window of seq + 2)", o.program,
            path.empty() ? "tinyshakespeare (built in)" : path, text.size(), o.seq, need);
  return text;
}

uint64_t file_fingerprint(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return text_fingerprint(s.str());
}

}  // namespace

Corpus load_corpus(const Options& o) {
  Corpus c;
  if (!o.tokens.empty()) {
    const std::filesystem::path dir(o.tokens);
    for (const char* name : {"train.tok", "val.tok", "tokenizer.json"})
      MPT_CHECK(std::filesystem::is_regular_file(dir / name), "[{}] --tokens {}: no {} there (make the directory "
                "with: mpt-tokenize --input TEXT --out {})", o.program, o.tokens, name, o.tokens);
    c.tokenizer = mpt::data::load_tokenizer(dir / "tokenizer.json");
    c.train = std::make_shared<const mpt::data::TokenFile>(dir / "train.tok");
    c.val = std::make_shared<const mpt::data::TokenFile>(dir / "val.tok");
    for (const auto& t : {c.train, c.val})
      MPT_CHECK(t->vocab_size() == c.tokenizer->vocab_size(), "[{}] --tokens {}: a token file has vocabulary {} but "
                "tokenizer.json {}: the files come from different mpt-tokenize runs", o.program, o.tokens,
                t->vocab_size(), c.tokenizer->vocab_size());
    c.description = fmt::format("{} (token files", o.tokens);
    c.identity = {{"tokens_train", c.train->size()}, {"tokens_val", c.val->size()},
                  {"tokenizer_fnv1a", file_fingerprint(dir / "tokenizer.json")}};
    return c;
  }
  const std::string text = read_text(o);
  const size_t cut = text.size() * 9 / 10;
  if (o.tokenizer == "bpe") {
    c.tokenizer = std::make_unique<mpt::data::BpeTokenizer>(
        mpt::data::BpeTokenizer::train(std::string_view(text).substr(0, cut), {.vocab_size = o.vocab_size}));
  } else {
    MPT_CHECK(o.tokenizer == "char", "[{}] unknown --tokenizer '{}': expected char or bpe", o.program, o.tokenizer);
    c.tokenizer = std::make_unique<mpt::data::CharTokenizer>(mpt::data::CharTokenizer::from_text(text));
  }
  const std::vector<int32_t> ids = c.tokenizer->encode(text);
  const auto split = static_cast<std::ptrdiff_t>(ids.size() * 9 / 10);
  const int64_t v = c.tokenizer->vocab_size();
  c.train = std::make_shared<const mpt::data::TokenVector>(std::vector<int32_t>(ids.begin(), ids.begin() + split), v);
  c.val = std::make_shared<const mpt::data::TokenVector>(std::vector<int32_t>(ids.begin() + split, ids.end()), v);
  c.description = fmt::format("{} ({} characters", o.data.empty() ?
                              "tinyshakespeare (built in; --data or MPT_DATA choose another text)" : o.data,
                              text.size());
  c.identity = {{"text_bytes", text.size()}, {"text_fnv1a", text_fingerprint(text)}, {"tokenizer", o.tokenizer},
                {"vocab", v}};
  return c;
}

double validation_loss(const mpt::nn::LanguageModel& model, const Corpus& corpus, const Options& o,
                       mpt::Device device) {
  mpt::data::DataLoader loader(corpus.val, {.batch = o.batch, .seq = o.seq, .seed = o.seed + 1, .prefetch = 1,
                                            .device = device});
  double total = 0;
  for (int64_t i = 0; i < o.eval_batches; ++i) {
    const mpt::data::Batch b = loader.next();
    total += model.loss(b.x, b.y).item<double>();
  }
  return total / static_cast<double>(o.eval_batches);
}

// Each token runs the model on that token alone against the keys and values of the ones before
// (LanguageModel::forward_cached); a full context starts again from its last half as a prompt.
std::string sample(const mpt::nn::LanguageModel& model, const mpt::data::Tokenizer& tokenizer, int64_t n,
                   mpt::Device device, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto* chars = dynamic_cast<const mpt::data::CharTokenizer*>(&tokenizer);
  const int64_t newline = chars != nullptr ? std::max(chars->id_of('\n'), 0) : tokenizer.encode("\n").at(0);
  const int64_t T = model.context_length();
  std::vector<int64_t> context{newline};
  mpt::nn::KvCache cache;
  mpt::Tensor logits = model.forward_cached(mpt::Tensor::from_vector(context, {1, 1}, device), cache);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> p = mpt::ops::softmax(logits.to(mpt::DType::F32)).to_vector<float>();
    std::discrete_distribution<int64_t> pick(p.begin(), p.end());
    context.push_back(pick(rng));
    if (cache.length < T) {
      logits = model.forward_cached(mpt::Tensor::from_vector(std::vector<int64_t>{context.back()}, {1, 1}, device),
                                    cache);
    } else {
      cache.clear();
      const int64_t keep = std::max<int64_t>(T / 2, 1);
      const std::vector<int64_t> w(context.end() - keep, context.end());
      logits = model.forward_cached(mpt::Tensor::from_vector(w, {1, keep}, device), cache);
    }
  }
  return tokenizer.decode(std::vector<int32_t>(context.begin() + 1, context.end()));
}

nlohmann::json data_state(const mpt::data::DataLoader& loader, const Corpus& corpus) {
  return {{"loader", nlohmann::json::parse(loader.state_json())}, {"corpus", corpus.identity}};
}

void restore_data_state(const std::string& data_json, const std::string& where, const Corpus& corpus,
                        const Options& o, mpt::data::DataLoader& loader) {
  try {
    const nlohmann::json d = nlohmann::json::parse(data_json);
    MPT_CHECK(d.contains("loader") && d.contains("corpus"), "[{}] {}: the checkpoint was saved by an older {}, whose "
              "random windows this version no longer draws: start a new run (or resume with the version that saved "
              "it)", o.program, where, o.program);
    const nlohmann::json& saved = d.at("corpus");
    const nlohmann::json& now = corpus.identity;
    if (saved.contains("text_fnv1a") && now.contains("text_fnv1a") && saved.at("text_fnv1a") != now.at("text_fnv1a"))
      MPT_THROW("[{}] {}: the checkpoint was trained on another text ({} bytes); this run reads {} bytes (give the "
                "same --data)", o.program, where, saved.value("text_bytes", 0), now.at("text_bytes").get<size_t>());
    MPT_CHECK(saved == now, "[{}] {}: the checkpoint was trained on other data ({}); this run reads {} (give the same "
              "--data, --tokens, --tokenizer and --vocab-size)", o.program, where, saved.dump(), now.dump());
    loader.load_state_json(d.at("loader").dump());
  } catch (const nlohmann::json::exception& e) {
    MPT_THROW("[{}] {}: the checkpoint's data state: {}", o.program, where, e.what());
  }
}

}  // namespace mpt_examples
