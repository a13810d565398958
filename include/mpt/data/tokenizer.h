// mpt/data/tokenizer.h: text <-> token ids: the Tokenizer interface; characters, SentencePiece BPE, GPT-2 BPE.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mpt::data {

// A tokenizer's vocabulary as GGUF's tokenizer.ggml.* keys describe it (what exporters write beside the weights).
struct Vocabulary {
  // ({} on each member: designated initializers may name only some of them.)
  std::string model{};                // "gpt2" (GPT-2 byte symbols, merges) or "llama" (SentencePiece pieces, scores)
  std::vector<std::string> tokens{};  // id -> the token's text as that model writes it
  std::vector<float> scores{};        // "llama": each piece's score; empty otherwise
  std::vector<int32_t> types{};       // per token, GGUF's: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
  std::vector<std::string> merges{};  // "gpt2": "left right" by rank (none for the character tokenizer)
  int32_t unk = -1, bos = -1, eos = -1;  // -1: none
};

// Encodes text to ids in [0, vocab_size()) and back. Implementations are immutable after construction, so one
// tokenizer serves several threads.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids outside [0, vocab_size()) are an error naming the id and its position.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;  // "char", "bpe", "gpt2"
  // Writes what load_tokenizer needs to make the same tokenizer (through a temporary file and a rename).
  virtual void save(const std::filesystem::path& path) const = 0;
  virtual Vocabulary vocabulary() const = 0;
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
  Vocabulary vocabulary() const override;  // "gpt2": each byte's GPT-2 symbol, no merges
  const std::string& alphabet() const { return alphabet_; }
  int32_t id_of(unsigned char c) const { return index_[c]; }  // -1 outside the alphabet

 private:
  std::string alphabet_;
  int32_t index_[256];
};

struct BpeTrainOptions {
  int64_t vocab_size = 4096;      // pieces, the 256 byte pieces and "\n" included
  int threads = 2;                // SentencePiece's training threads
  int64_t max_sentences = 1 << 21;  // lines used for training (SentencePiece samples that many beyond it)
};

// Byte-pair encoding trained by SentencePiece (libsentencepiece) on a UTF-8 text's lines: BPE merges over its
// characters with no normalisation, whitespace kept as it is, "\n" one piece, and every character that no piece
// covers encoded as its UTF-8 bytes' pieces (byte fallback), so every UTF-8 text encodes and decode(encode(t)) == t
// exactly. Bytes that are not UTF-8 are an error naming their offset (SentencePiece would replace them with U+FFFD;
// the character tokenizer takes any bytes). Ids:
// 0 is <unk> (never produced: byte fallback covers everything), 1 is "\n", 2..257 the bytes <0x00>..<0xFF>, then the
// merges. Training is deterministic for a given text and options.
class BpeTokenizer final : public Tokenizer {
 public:
  static BpeTokenizer train(std::string_view text, const BpeTrainOptions& options = {});
  // A SentencePiece model (the bytes of a .model file, or model_proto()); errors say why it cannot be used.
  static BpeTokenizer from_model(std::string serialized_model);
  ~BpeTokenizer() override;
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  std::string kind() const override { return "bpe"; }
  void save(const std::filesystem::path& path) const override;  // JSON with the model, base64
  Vocabulary vocabulary() const override;  // "llama": the pieces, their scores and types
  const std::string& model_proto() const;
  std::string piece(int32_t id) const;  // the piece as SentencePiece shows it: a space is "\u2581", a byte "<0x41>"

 private:
  struct Impl;
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GPT-2's byte-level BPE read from its vocab.json and merges.txt (as OpenAI and Hugging Face ship them): the text's
// bytes as GPT-2's 256 byte symbols, split by GPT-2's pre-tokenizer regex ('s, 't, ... | ?\p{L}+ | ?\p{N}+ | ...,
// run by PCRE2 with Unicode properties), each piece merged by merge rank. Encodes UTF-8 text (other bytes are an
// error naming their offset); decode(encode(t)) == t.
class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // Errors name the file, and the line or entry that is wrong.
  static Gpt2BpeTokenizer from_files(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);
  // The same from memory: the symbol strings by id, and the merges "left right" by rank. `where` names them in errors.
  static Gpt2BpeTokenizer from_vocab(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                                     const std::string& where = "vocabulary");
  ~Gpt2BpeTokenizer() override;
  Gpt2BpeTokenizer(Gpt2BpeTokenizer&&) noexcept;
  Gpt2BpeTokenizer& operator=(Gpt2BpeTokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  std::string kind() const override { return "gpt2"; }
  void save(const std::filesystem::path& path) const override;  // JSON: the vocabulary and the merges
  Vocabulary vocabulary() const override;  // "gpt2": the symbols and merges; <|endoftext|> (if any) bos, eos

 private:
  struct Impl;
  explicit Gpt2BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A tokenizer saved by Tokenizer::save. Errors name the file and what is wrong with it.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

}  // namespace mpt::data
