// src/data/bpe_tokenizer.cpp: BPE trained, encoded and decoded by SentencePiece, exact on any bytes.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "data/base64.h"
#include "data/utf8.h"
#include "io/durable_file.h"
#include "mpt/core/error.h"
#include "mpt/data/tokenizer.h"

#include <nlohmann/json.hpp>

namespace mpt::data {

struct BpeTokenizer::Impl {
  std::string model;
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

// The text's non-empty lines, one SentencePiece "sentence" each (the newlines themselves are the "\n" piece).
class Lines final : public sentencepiece::SentenceIterator {
 public:
  Lines(std::string_view text, int64_t max) : text_(text), max_(max) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (pos_ < text_.size() && count_ < max_) {
      const size_t end = std::min(text_.find('\n', pos_), text_.size());
      line_.assign(text_.substr(pos_, end - pos_));
      pos_ = end + 1;
      if (!line_.empty()) {
        ++count_;
        return;
      }
    }
    done_ = true;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int64_t count_ = 0, max_;
  std::string line_;
  bool done_ = false;
};

}  // namespace

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

BpeTokenizer BpeTokenizer::train(std::string_view text, const BpeTrainOptions& o) {
  MPT_CHECK(o.vocab_size >= 258 + 2 && o.vocab_size <= (int64_t{1} << 20),
            "[BpeTokenizer] vocab_size {} must be in [260, 2^20]: 256 byte pieces, <unk> and \"\\n\" come first",
            o.vocab_size);
  MPT_CHECK(text.find_first_not_of('\n') != std::string_view::npos,
            "[BpeTokenizer] the training text has no line with any character in it");
  const size_t bad = detail::first_invalid_utf8(text);
  MPT_CHECK(bad == text.size(), "[BpeTokenizer] the training text is not UTF-8 at byte offset {}: the BPE tokenizer "
            "is trained on UTF-8 text", bad);
  const std::unordered_map<std::string, std::string> args{
      {"model_type", "bpe"}, {"vocab_size", std::to_string(o.vocab_size)}, {"character_coverage", "1.0"},
      {"byte_fallback", "true"}, {"normalization_rule_name", "identity"}, {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"}, {"user_defined_symbols", "\n"}, {"split_digits", "true"},
      {"unk_id", "0"}, {"bos_id", "-1"}, {"eos_id", "-1"}, {"pad_id", "-1"}, {"max_sentence_length", "1048576"},
      {"num_threads", std::to_string(std::max(1, o.threads))}, {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "false"}, {"minloglevel", "2"}, {"hard_vocab_limit", "false"}};
  Lines lines(text, o.max_sentences);
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  MPT_CHECK(st.ok(), "[BpeTokenizer] SentencePiece could not train a {}-piece BPE model on this text: {}",
            o.vocab_size, st.ToString());
  return from_model(std::move(model));
}

BpeTokenizer BpeTokenizer::from_model(std::string serialized) {
  auto impl = std::make_unique<Impl>();
  impl->model = std::move(serialized);
  const auto st = impl->sp.LoadFromSerializedProto(impl->model);
  MPT_CHECK(st.ok(), "[BpeTokenizer] not a SentencePiece model ({} bytes): {}", impl->model.size(), st.ToString());
  MPT_CHECK(impl->sp.PieceToId("<0x0A>") > 0 || impl->sp.PieceToId("\n") > 0,
            "[BpeTokenizer] the SentencePiece model has no byte fallback: some texts would not encode exactly");
  return BpeTokenizer(std::move(impl));
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  const size_t bad = detail::first_invalid_utf8(text);
  MPT_CHECK(bad == text.size(), "[BpeTokenizer] the text is not UTF-8 at byte offset {} (byte 0x{:02X}): the BPE "
            "tokenizer encodes UTF-8 text; the character tokenizer takes any bytes", bad,
            static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
  std::vector<int> ids;
  const auto st = impl_->sp.Encode(text, &ids);
  MPT_CHECK(st.ok(), "[BpeTokenizer] SentencePiece could not encode {} bytes: {}", text.size(), st.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> v(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MPT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "[BpeTokenizer] id {} at position {} is outside [0, {})", ids[i],
              i, vocab_size());
    v[i] = ids[i];
  }
  std::string text;
  const auto st = impl_->sp.Decode(v, &text);
  MPT_CHECK(st.ok(), "[BpeTokenizer] SentencePiece could not decode {} ids: {}", ids.size(), st.ToString());
  return text;
}

int64_t BpeTokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }

const std::string& BpeTokenizer::model_proto() const { return impl_->model; }

std::string BpeTokenizer::piece(int32_t id) const {
  MPT_CHECK(id >= 0 && id < vocab_size(), "[BpeTokenizer] id {} is outside [0, {})", id, vocab_size());
  return impl_->sp.IdToPiece(id);
}

Vocabulary BpeTokenizer::vocabulary() const {
  const sentencepiece::SentencePieceProcessor& sp = impl_->sp;
  Vocabulary v{.model = "llama"};
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    v.tokens.push_back(sp.IdToPiece(id));
    v.scores.push_back(sp.GetScore(id));
    v.types.push_back(sp.IsUnknown(id) ? 2 : sp.IsControl(id) ? 3 : sp.IsByte(id) ? 6 : sp.IsUnused(id) ? 5 : 1);
  }
  v.unk = sp.unk_id(), v.bos = sp.bos_id(), v.eos = sp.eos_id();
  // User-defined pieces ("\n") are typed 4, as llama.cpp's converter types them.
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (v.types[static_cast<size_t>(id)] == 1 && sp.IdToPiece(id) == "\n") v.types[static_cast<size_t>(id)] = 4;
  }
  return v;
}

void BpeTokenizer::save(const std::filesystem::path& path) const {
  const nlohmann::json j{{"format", "mptrain-tokenizer"}, {"version", 1}, {"kind", "bpe"},
                         {"engine", "sentencepiece"}, {"vocab_size", vocab_size()},
                         {"model_base64", detail::base64_encode(impl_->model)}};
  io::detail::write_file_durably(path, j.dump() + "\n", "tokenizer");
}

}  // namespace mpt::data
