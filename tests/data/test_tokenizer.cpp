// tests/data/test_tokenizer.cpp: CharTokenizer's ids against the alphabet written out by hand, its round trips,
// saving and loading, and every error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io_test_util.h"
#include "mpt/data/tokenizer.h"
#include "test_util.h"

namespace mpt {
namespace {

using data::CharTokenizer;
using testing::TempDir;

TEST(CharTokenizer, AlphabetIsTheTextsDistinctBytesAscending) {
  const CharTokenizer t = CharTokenizer::from_text("hello, world\n");
  EXPECT_EQ(t.alphabet(), std::string("\n ,dehlorw"));
  EXPECT_EQ(t.vocab_size(), 10);
  EXPECT_EQ(t.encode("hello"), (std::vector<int32_t>{5, 4, 6, 6, 7}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{9, 7, 8, 6, 3}), "world");
  EXPECT_EQ(t.id_of('\n'), 0);
  EXPECT_EQ(t.id_of('z'), -1);
  const std::string all("\xff\x00\x80z", 4);
  const CharTokenizer b = CharTokenizer::from_text(all);
  EXPECT_EQ(b.decode(b.encode(all)), all);  // every byte value round-trips, NUL and high bytes included
  EXPECT_EQ(b.encode(std::string("\x00", 1)), std::vector<int32_t>{0});
}

TEST(CharTokenizer, Errors) {
  const CharTokenizer t("abc");
  EXPECT_MPT_ERROR(t.encode("abd"), "byte 100 at offset 2 is not in the alphabet (3 bytes)");
  EXPECT_MPT_ERROR(t.decode(std::vector<int32_t>{0, 3}), "id 3 at position 1 is outside [0, 3)");
  EXPECT_MPT_ERROR(t.decode(std::vector<int32_t>{-1}), "id -1 at position 0");
  EXPECT_MPT_ERROR(CharTokenizer("aba"), "byte 97 appears twice in the alphabet (at 0 and 2)");
  EXPECT_MPT_ERROR(CharTokenizer(""), "the alphabet is empty");
  EXPECT_MPT_ERROR(CharTokenizer::from_text(""), "empty text");
}

TEST(CharTokenizer, SavedAndLoadedGivesTheSameIds) {
  TempDir dir;
  const std::string text = std::string("To be, or not to be\n\x01\xfe", 22);
  const CharTokenizer t = CharTokenizer::from_text(text);
  t.save(dir / "tok.json");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"tok.json"});  // no temporary left behind
  const auto loaded = data::load_tokenizer(dir / "tok.json");
  EXPECT_EQ(loaded->kind(), "char");
  EXPECT_EQ(loaded->vocab_size(), t.vocab_size());
  EXPECT_EQ(loaded->encode(text), t.encode(text));
  EXPECT_EQ(loaded->decode(t.encode(text)), text);
}

TEST(CharTokenizer, LoadErrorsNameTheFile) {
  TempDir dir;
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "missing.json"), "cannot open '");
  testing::write_bytes(dir / "a.json", "{not json");
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "a.json"), "a.json' is not a valid tokenizer file");
  testing::write_bytes(dir / "b.json", R"({"kind": "char"})");
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "b.json"), "is not a tokenizer written by mptrain");
  testing::write_bytes(dir / "c.json", R"({"format": "mptrain-tokenizer", "version": 1, "kind": "wordpiece"})");
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "c.json"), "unknown kind 'wordpiece'");
  testing::write_bytes(dir / "d.json", R"({"format": "mptrain-tokenizer", "version": 2, "kind": "char"})");
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "d.json"), "has version 2; this build reads version 1");
  testing::write_bytes(dir / "e.json",
                       R"({"format": "mptrain-tokenizer", "version": 1, "kind": "char", "alphabet": [97, 300]})");
  EXPECT_MPT_ERROR(data::load_tokenizer(dir / "e.json"), "alphabet entry 300 is not a byte");
}

}  // namespace
}  // namespace mpt
