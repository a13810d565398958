// mpt/data/tokenizer.h: text <-> token ids: the Tokenizer interface and the character-level tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mpt::data {

// Encodes text to ids in [0, vocab_size()) and back. Implementations are immutable after construction, so one
// tokenizer serves several threads.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids outside [0, vocab_size()) are an error naming the id and its position.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;  // "char"
  // Writes what load_tokenizer needs to make the same tokenizer (through a temporary file and a rename).
  virtual void save(const std::filesystem::path& path) const = 0;
};

// One id per byte: the bytes of an alphabet, in its order (train_gpt's character model: the distinct bytes of the
// training text, ascending). Encoding a byte outside the alphabet is an error naming it and its offset.
class CharTokenizer final : public Tokenizer {
 public:
  explicit CharTokenizer(std::string alphabet);  // distinct bytes, at least one
  static CharTokenizer from_text(std::string_view text);  // the distinct bytes of a non-empty text, ascending

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(alphabet_.size()); }
  std::string kind() const override { return "char"; }
  void save(const std::filesystem::path& path) const override;  // JSON: {"kind": "char", "alphabet": [bytes]}
  const std::string& alphabet() const { return alphabet_; }
  int32_t id_of(unsigned char c) const { return index_[c]; }  // -1 outside the alphabet

 private:
  std::string alphabet_;
  int32_t index_[256];
};

// A tokenizer saved by Tokenizer::save. Errors name the file and what is wrong with it.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

}  // namespace mpt::data
