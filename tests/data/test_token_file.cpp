// tests/data/test_token_file.cpp: the token file's bytes against the layout written out by hand, reading back both
// widths through the map, and every way a file can be wrong (nothing written on a bad id; an old file kept).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "mpt/data/token_file.h"
#include "test_util.h"

namespace mpt {
namespace {

using data::TokenFile;
using testing::TempDir;

std::string le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

TEST(TokenFile, BytesFollowTheLayout) {
  TempDir dir;
  data::write_token_file(dir / "a.tok", std::vector<int32_t>{1, 299, 0, 258}, 300);
  const std::string want = "MPTTOKEN" + le(1, 4) + le(300, 4) + le(2, 4) + le(0, 4) + le(4, 8) + le(1, 2) +
                           le(299, 2) + le(0, 2) + le(258, 2);
  EXPECT_EQ(testing::read_bytes(dir / "a.tok"), want);
  data::write_token_file(dir / "b.tok", std::vector<int32_t>{70000, 5}, 70001);
  EXPECT_EQ(testing::read_bytes(dir / "b.tok"),
            "MPTTOKEN" + le(1, 4) + le(70001, 4) + le(4, 4) + le(0, 4) + le(2, 8) + le(70000, 4) + le(5, 4));
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"a.tok", "b.tok"}));
}

TEST(TokenFile, ReadsBackBothWidths) {
  TempDir dir;
  for (int64_t vocab : {256, 65536, 65537, 1 << 20}) {
    std::vector<int32_t> ids(1000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(vocab));
    ids[3] = static_cast<int32_t>(vocab - 1);
    data::write_token_file(dir / "t.tok", ids, vocab);
    TokenFile f(dir / "t.tok");
    EXPECT_EQ(f.size(), 1000);
    EXPECT_EQ(f.vocab_size(), vocab);
    EXPECT_EQ(f.bytes_per_id(), vocab <= 65536 ? 2 : 4);
    std::vector<int64_t> got(1000);
    f.read(0, 1000, got.data());
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(got[i], ids[i]) << vocab << " at " << i;
    EXPECT_EQ(f.at(3), vocab - 1);
    f.read(990, 10, got.data());
    EXPECT_EQ(got[9], ids[999]);
    TokenFile moved = std::move(f);
    EXPECT_EQ(moved.at(999), ids[999]);
  }
}

TEST(TokenFile, BadIdWritesNothingAndKeepsAnOldFile) {
  TempDir dir;
  EXPECT_MPT_ERROR(data::write_token_file(dir / "x.tok", std::vector<int32_t>{1, 2, 9}, 9),
                   "id 9 at position 2 is outside [0, 9); nothing was written");
  EXPECT_TRUE(dir.listing().empty());
  data::write_token_file(dir / "x.tok", std::vector<int32_t>{1, 2}, 9);
  const std::string before = testing::read_bytes(dir / "x.tok");
  EXPECT_MPT_ERROR(data::write_token_file(dir / "x.tok", std::vector<int32_t>{-1}, 9), "id -1 at position 0");
  EXPECT_EQ(testing::read_bytes(dir / "x.tok"), before);
  EXPECT_MPT_ERROR(data::write_token_file(dir / "y.tok", std::vector<int32_t>{}, 0), "vocab_size 0 must be in");
}

TEST(TokenFile, BrokenFilesAreClearErrors) {
  TempDir dir;
  EXPECT_MPT_ERROR(TokenFile(dir / "none.tok"), "cannot open '");
  EXPECT_MPT_ERROR(TokenFile(dir.path()), "is not a regular file");
  testing::write_bytes(dir / "short.tok", "MPTTOKEN");
  EXPECT_MPT_ERROR(TokenFile(dir / "short.tok"), "has 8 bytes, fewer than the 32-byte header");
  data::write_token_file(dir / "ok.tok", std::vector<int32_t>{1, 2, 3}, 5);
  const std::string good = testing::read_bytes(dir / "ok.tok");
  std::string b = good;
  b[0] = 'X';
  testing::write_bytes(dir / "magic.tok", b);
  EXPECT_MPT_ERROR(TokenFile(dir / "magic.tok"), "does not start with \"MPTTOKEN\"");
  b = good;
  b[8] = 2;
  testing::write_bytes(dir / "version.tok", b);
  EXPECT_MPT_ERROR(TokenFile(dir / "version.tok"), "has version 2; this build reads version 1");
  b = good;
  b[16] = 3;
  testing::write_bytes(dir / "width.tok", b);
  EXPECT_MPT_ERROR(TokenFile(dir / "width.tok"), "3 bytes per id; expected 2 or 4");
  testing::write_bytes(dir / "cut.tok", good.substr(0, good.size() - 1));
  EXPECT_MPT_ERROR(TokenFile(dir / "cut.tok"), "has 37 bytes but its header promises 3 ids of 2 bytes (38 bytes");
  b = good;
  b[34] = 7;  // the second id becomes 7, outside a vocabulary of 5
  testing::write_bytes(dir / "corrupt.tok", b);
  const TokenFile f(dir / "corrupt.tok");
  EXPECT_EQ(f.at(0), 1);
  int64_t out[3];
  EXPECT_MPT_ERROR(f.read(0, 3, out), "id 7 at position 1 is outside the vocabulary [0, 5): the file is corrupt");
  EXPECT_MPT_ERROR(f.read(2, 2, out), "ids [2, 4) are outside the file's 3");
}

}  // namespace
}  // namespace mpt
