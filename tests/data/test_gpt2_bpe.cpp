// tests/data/test_gpt2_bpe.cpp: Gpt2BpeTokenizer on a handmade vocab.json / merges.txt pair against Hugging Face
// tokenizers' encodings of the same files (tests/goldens/gpt2_bpe, tools/make_bpe_goldens.py), one case derived by
// hand, saving and loading, and errors naming the file and line.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io_test_util.h"
#include "mpt/data/tokenizer.h"
#include "test_util.h"

namespace mpt {
namespace {

using data::Gpt2BpeTokenizer;

const std::string kDir = MPT_GOLDENS_DIR "/gpt2_bpe";

const Gpt2BpeTokenizer& handmade() {
  static const Gpt2BpeTokenizer t = Gpt2BpeTokenizer::from_files(kDir + "/vocab.json", kDir + "/merges.txt");
  return t;
}

TEST(Gpt2Bpe, MatchesHuggingFaceTokenizersOnEveryCase) {
  std::ifstream in(kDir + "/encodings.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  ASSERT_GE(g.at("cases").size(), 10u);
  EXPECT_EQ(handmade().vocab_size(), 276);
  for (const auto& c : g.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(handmade().encode(text), want) << "'" << text << "'";
    EXPECT_EQ(handmade().decode(want), text) << "'" << text << "'";
  }
}

// By hand: ids 0..255 are the bytes, merge k (from 0) makes id 256 + k. "the" pre-tokenizes to one piece; of its
// pairs only "h e" (rank 1) is a merge, and "t he" is not one, so ["t", "he"] = [116, 257]. " the" is one piece
// "Ġthe": "Ġ t" (rank 0) then "h e" (rank 1) then "Ġt he" (rank 2) = [258]. "\n\n" is "ĊĊ" (rank 19) = [275].
TEST(Gpt2Bpe, MergesByRankAsDerivedByHand) {
  EXPECT_EQ(handmade().encode("the"), (std::vector<int32_t>{116, 257}));
  EXPECT_EQ(handmade().encode(" the"), std::vector<int32_t>{258});
  EXPECT_EQ(handmade().encode("\n\n"), std::vector<int32_t>{275});
  EXPECT_EQ(handmade().encode(" "), std::vector<int32_t>{32});
  EXPECT_EQ(handmade().decode(std::vector<int32_t>{258, 32, 10}), " the \n");
}

TEST(Gpt2Bpe, SavedAndLoaded) {
  testing::TempDir dir;
  handmade().save(dir / "gpt2.json");
  const auto t = data::load_tokenizer(dir / "gpt2.json");
  EXPECT_EQ(t->kind(), "gpt2");
  EXPECT_EQ(t->vocab_size(), 276);
  const std::string text = "the world and the rest, caf\xc3\xa9 1234\n\n";
  EXPECT_EQ(t->encode(text), handmade().encode(text));
}

TEST(Gpt2Bpe, Errors) {
  EXPECT_MPT_ERROR(handmade().encode("ok\xff"), "not UTF-8 at byte offset 2 (byte 0xFF)");
  EXPECT_MPT_ERROR(handmade().decode(std::vector<int32_t>{276}), "id 276 at position 0 is outside [0, 276)");
  testing::TempDir dir;
  const std::string vocab = testing::read_bytes(kDir + "/vocab.json");
  testing::write_bytes(dir / "m1.txt", "#version: 0.2\nh e\nthree parts here\n");
  EXPECT_MPT_ERROR(Gpt2BpeTokenizer::from_files(kDir + "/vocab.json", dir / "m1.txt"),
                   "m1.txt' line 3: expected two symbols separated by one space, got 'three parts here'");
  testing::write_bytes(dir / "m2.txt", "h e\nq z\n");
  EXPECT_MPT_ERROR(Gpt2BpeTokenizer::from_files(kDir + "/vocab.json", dir / "m2.txt"),
                   "merge 2 ('q z') makes 'qz', which is not in the vocabulary");
  testing::write_bytes(dir / "v.json", R"({"a": 0, "b": 1})");
  EXPECT_MPT_ERROR(Gpt2BpeTokenizer::from_files(dir / "v.json", kDir + "/merges.txt"),
                   "lacks the symbol of byte 0x00");
  testing::write_bytes(dir / "v2.json", R"({"a": 0, "b": 0})");
  EXPECT_MPT_ERROR(Gpt2BpeTokenizer::from_files(dir / "v2.json", kDir + "/merges.txt"), "ids must be 0..1 once each");
  testing::write_bytes(dir / "v3.json", "[1, 2]");
  EXPECT_MPT_ERROR(Gpt2BpeTokenizer::from_files(dir / "v3.json", kDir + "/merges.txt"), "is not a JSON object");
  EXPECT_MPT_ERROR(Gpt2BpeTokenizer::from_files(dir / "none.json", kDir + "/merges.txt"), "cannot open '");
}

}  // namespace
}  // namespace mpt
