// src/data/tokenizer.cpp: the character tokenizer, and saving and loading tokenizers as small JSON files.
#include "mpt/data/tokenizer.h"

#include <array>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/base64.h"
#include "data/gpt2_bpe.h"
#include "data/utf8.h"
#include "io/durable_file.h"
#include "mpt/core/error.h"

namespace mpt::data {

CharTokenizer::CharTokenizer(std::string alphabet) : alphabet_(std::move(alphabet)) {
  MPT_CHECK(!alphabet_.empty(), "[CharTokenizer] the alphabet is empty: it needs at least one byte");
  for (int32_t& i : index_) i = -1;
  for (size_t i = 0; i < alphabet_.size(); ++i) {
    const auto c = static_cast<unsigned char>(alphabet_[i]);
    MPT_CHECK(index_[c] < 0, "[CharTokenizer] byte {} appears twice in the alphabet (at {} and {})", int{c}, index_[c],
              i);
    index_[c] = static_cast<int32_t>(i);
  }
}

CharTokenizer CharTokenizer::from_text(std::string_view text) {
  MPT_CHECK(!text.empty(), "[CharTokenizer] cannot build an alphabet from an empty text");
  bool seen[256] = {};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::string alphabet;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) alphabet.push_back(static_cast<char>(c));
  return CharTokenizer(std::move(alphabet));
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    ids[i] = index_[c];
    MPT_CHECK(ids[i] >= 0, "[CharTokenizer] byte {} at offset {} is not in the alphabet ({} bytes)", int{c}, i,
              alphabet_.size());
  }
  return ids;
}

std::string CharTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    MPT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "[CharTokenizer] id {} at position {} is outside [0, {})", ids[i],
              i, vocab_size());
    out[i] = alphabet_[static_cast<size_t>(ids[i])];
  }
  return out;
}

Vocabulary CharTokenizer::vocabulary() const {
  const std::array<uint32_t, 256> cp = detail::gpt2_byte_symbols();
  Vocabulary v{.model = "gpt2"};
  for (unsigned char c : alphabet_) {
    v.tokens.push_back(detail::utf8_of(cp[c]));
    v.types.push_back(1);
  }
  return v;
}

void CharTokenizer::save(const std::filesystem::path& path) const {
  nlohmann::json bytes = nlohmann::json::array();
  for (char c : alphabet_) bytes.push_back(static_cast<unsigned char>(c));
  const nlohmann::json j{{"format", "mptrain-tokenizer"}, {"version", 1}, {"kind", "char"}, {"alphabet", bytes}};
  io::detail::write_file_durably(path, j.dump() + "\n", "tokenizer");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[tokenizer] cannot open '{}'", path.string());
  std::stringstream s;
  s << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(s.str());
    MPT_CHECK(j.value("format", "") == "mptrain-tokenizer",
              "[tokenizer] '{}' is not a tokenizer written by mptrain (no \"format\": \"mptrain-tokenizer\")",
              path.string());
    MPT_CHECK(j.at("version").get<int>() == 1, "[tokenizer] '{}' has version {}; this build reads version 1",
              path.string(), j.at("version").get<int>());
    const std::string kind = j.at("kind").get<std::string>();
    if (kind == "char") {
      std::string alphabet;
      for (const auto& b : j.at("alphabet")) {
        const int v = b.get<int>();
        MPT_CHECK(v >= 0 && v < 256, "[tokenizer] '{}': alphabet entry {} is not a byte", path.string(), v);
        alphabet.push_back(static_cast<char>(v));
      }
      return std::make_unique<CharTokenizer>(std::move(alphabet));
    }
    if (kind == "bpe") {
      const std::optional<std::string> model = detail::base64_decode(j.at("model_base64").get<std::string>());
      MPT_CHECK(model.has_value(), "[tokenizer] '{}': model_base64 is not base64", path.string());
      try {
        return std::make_unique<BpeTokenizer>(BpeTokenizer::from_model(*model));
      } catch (const Error& e) {
        MPT_THROW("[tokenizer] '{}': {}", path.string(), e.what());
      }
    }
    if (kind == "gpt2") return detail::gpt2_from_json(j, path.string());
    MPT_THROW("[tokenizer] '{}': unknown kind '{}' (this build knows \"char\", \"bpe\" and \"gpt2\")", path.string(),
              kind);
  } catch (const nlohmann::json::exception& e) {
    MPT_THROW("[tokenizer] '{}' is not a valid tokenizer file: {}", path.string(), e.what());
  }
}

}  // namespace mpt::data
