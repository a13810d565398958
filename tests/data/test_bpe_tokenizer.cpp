// tests/data/test_bpe_tokenizer.cpp: BpeTokenizer (SentencePiece BPE) on tinyshakespeare: the id layout written out
// by hand, exact round trips of any UTF-8 text (and refusal of other bytes), merges that compress held-out text, deterministic training, saving and
// loading, and errors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "mpt/data/tokenizer.h"
#include "test_util.h"

namespace mpt {
namespace {

using data::BpeTokenizer;

const std::string& shakespeare() {
  static const std::string text = [] {
    std::ifstream in(MPT_TINYSHAKESPEARE, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  return text;
}

// Trained once on the first 300 kB; the rest is held out.
const BpeTokenizer& trained() {
  static const BpeTokenizer t = BpeTokenizer::train(std::string_view(shakespeare()).substr(0, 300000), {.vocab_size = 1024});
  return t;
}

TEST(BpeTokenizer, IdsAreUnkNewlineTheBytesThenMerges) {
  const BpeTokenizer& t = trained();
  ASSERT_EQ(shakespeare().size(), 1115394u);
  EXPECT_EQ(t.vocab_size(), 1024);
  EXPECT_EQ(t.piece(0), "<unk>");
  EXPECT_EQ(t.piece(1), "\n");
  EXPECT_EQ(t.piece(2), "<0x00>");
  EXPECT_EQ(t.piece(257), "<0xFF>");
  EXPECT_EQ(t.encode("\n\n"), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(t.encode(std::string("\x01", 1)), std::vector<int32_t>{3});  // a byte Shakespeare never used
  EXPECT_EQ(t.decode(std::vector<int32_t>{3, 1}), std::string("\x01\n", 2));
  // Every merge is a string of the training text (no normalisation; SentencePiece shows a space as U+2581).
  for (int32_t id = 258; id < t.vocab_size(); ++id) {
    std::string p = t.piece(id);
    for (size_t at; (at = p.find("\xe2\x96\x81")) != std::string::npos;) p.replace(at, 3, " ");
    EXPECT_NE(shakespeare().find(p), std::string::npos) << "piece " << id << " '" << p << "'";
  }
}

TEST(BpeTokenizer, AnyUtf8TextRoundTripsExactly) {
  const BpeTokenizer& t = trained();
  const std::string held_out = shakespeare().substr(300000);
  EXPECT_EQ(t.decode(t.encode(held_out)), held_out);
  std::string text;
  for (int i = 0; i < 128; ++i) text.push_back(static_cast<char>(i));  // NUL and control characters included
  text += "  two spaces,\ttab,\r\ncrlf, \xce\xb1\xce\xb2 greek, \xe4\xb8\xad, \xf0\x9f\x98\x80, trailing space ";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_EQ(t.encode("\xce\xb1"), (std::vector<int32_t>{2 + 0xce, 2 + 0xb1}));  // unseen: its UTF-8 bytes' pieces
  EXPECT_TRUE(t.encode("").empty());
  // Bytes that are not UTF-8: refused, with the offset (SentencePiece would turn them into U+FFFD).
  EXPECT_MPT_ERROR(t.encode("ab\xff"), "not UTF-8 at byte offset 2 (byte 0xFF)");
  EXPECT_MPT_ERROR(t.encode("\xc3"), "offset 0");                  // a sequence cut short
  EXPECT_MPT_ERROR(t.encode("x\xc0\x80"), "offset 1");            // an overlong NUL
  EXPECT_MPT_ERROR(t.encode("\xed\xa0\x80"), "offset 0");        // a surrogate
  EXPECT_MPT_ERROR(t.encode("\xf4\x90\x80\x80"), "offset 0");   // beyond U+10FFFF
}

TEST(BpeTokenizer, MergesCompressHeldOutText) {
  const BpeTokenizer& t = trained();
  const std::string held_out = shakespeare().substr(300000, 200000);
  const double bytes_per_token = static_cast<double>(held_out.size()) / static_cast<double>(t.encode(held_out).size());
  EXPECT_GT(bytes_per_token, 2.0);  // characters would give 1.0
  // Frequent words (with the space before them) are single pieces.
  EXPECT_EQ(t.encode(" the").size(), 1u);
  EXPECT_EQ(t.encode(" and").size(), 1u);
}

TEST(BpeTokenizer, TrainingIsDeterministicAndSavedModelsLoad) {
  const std::string_view text = std::string_view(shakespeare()).substr(0, 300000);
  EXPECT_EQ(BpeTokenizer::train(text, {.vocab_size = 1024}).model_proto(), trained().model_proto());
  testing::TempDir dir;
  trained().save(dir / "bpe.json");
  const auto loaded = data::load_tokenizer(dir / "bpe.json");
  EXPECT_EQ(loaded->kind(), "bpe");
  EXPECT_EQ(loaded->vocab_size(), 1024);
  const std::string sample = shakespeare().substr(500000, 5000);
  EXPECT_EQ(loaded->encode(sample), trained().encode(sample));
  const BpeTokenizer again = BpeTokenizer::from_model(trained().model_proto());
  EXPECT_EQ(again.encode(sample), trained().encode(sample));
}

TEST(BpeTokenizer, Errors) {
  EXPECT_MPT_ERROR(BpeTokenizer::train("abc", {.vocab_size = 100}), "vocab_size 100 must be in [260, 2^20]");
  EXPECT_MPT_ERROR(BpeTokenizer::train("\n\n", {.vocab_size = 300}), "no line with any character");
  EXPECT_MPT_ERROR(BpeTokenizer::train("ok\n\x80", {.vocab_size = 300}), "not UTF-8 at byte offset 3");
  EXPECT_MPT_ERROR(BpeTokenizer::from_model("not a model"), "not a SentencePiece model (11 bytes)");
  EXPECT_MPT_ERROR(trained().decode(std::vector<int32_t>{5, 1024}), "id 1024 at position 1 is outside [0, 1024)");
  testing::TempDir dir;
  testing::write_bytes(dir / "b.json",
                       R"({"format": "mptrain-tokenizer", "version": 1, "kind": "bpe", "model_base64": "!!!!"})");
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "b.json"), "model_base64 is not base64");
  testing::write_bytes(dir / "c.json",
                       R"({"format": "mptrain-tokenizer", "version": 1, "kind": "bpe", "model_base64": "AAAA"})");
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "c.json"), "c.json': [BpeTokenizer] not a SentencePiece model");
}

}  // namespace
}  // namespace mpt
