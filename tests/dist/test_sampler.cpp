// tests/dist/test_sampler.cpp: DistributedSampler: equal shares, every index once per epoch (padding repeats the
// first of the order), the same permutation on every rank, a new one per epoch, drop_last, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "mpt/dist/sampler.h"
#include "test_util.h"

using mpt::dist::DistributedSampler;
using mpt::dist::SamplerOptions;

namespace {

std::vector<std::vector<int64_t>> all_ranks(int64_t n, int ranks, const SamplerOptions& o, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < ranks; ++r) {
    DistributedSampler s(n, r, ranks, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    EXPECT_EQ(static_cast<int64_t>(out.back().size()), s.size());
  }
  return out;
}

}  // namespace

TEST(DistributedSampler, RanksShareEveryIndexOncePaddingByWrappingAround) {
  for (bool shuffle : {false, true}) {
    const auto parts = all_ranks(10, 4, {.shuffle = shuffle, .seed = 3}, 0);  // 10 -> 12: two repeats
    std::map<int64_t, int> seen;
    for (const auto& p : parts) {
      EXPECT_EQ(p.size(), 3u);
      for (int64_t i : p) ++seen[i];
    }
    EXPECT_EQ(seen.size(), 10u);
    int repeats = 0;
    for (auto [i, c] : seen) repeats += c - 1;
    EXPECT_EQ(repeats, 2);
    if (!shuffle) {  // torch's layout: rank r takes r, r + 4, ...; the pad is 0, 1
      EXPECT_EQ(parts[0], (std::vector<int64_t>{0, 4, 8}));
      EXPECT_EQ(parts[1], (std::vector<int64_t>{1, 5, 9}));
      EXPECT_EQ(parts[2], (std::vector<int64_t>{2, 6, 0}));
      EXPECT_EQ(parts[3], (std::vector<int64_t>{3, 7, 1}));
    }
  }
}

TEST(DistributedSampler, ShuffleIsSharedAcrossRanksAndChangesWithTheEpochAndSeed) {
  const SamplerOptions o{.shuffle = true, .seed = 7};
  const auto e0 = all_ranks(1000, 2, o, 0), again = all_ranks(1000, 2, o, 0), e1 = all_ranks(1000, 2, o, 1);
  EXPECT_EQ(e0, again) << "deterministic in (seed, epoch)";
  EXPECT_NE(e0, e1) << "a new order each epoch";
  EXPECT_NE(e0, all_ranks(1000, 2, {.shuffle = true, .seed = 8}, 0));
  std::vector<int64_t> both = e0[0];
  both.insert(both.end(), e0[1].begin(), e0[1].end());
  std::sort(both.begin(), both.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(both[static_cast<size_t>(i)], i) << "a permutation, disjoint halves";
}

TEST(DistributedSampler, DropLastCutsTheTailAndBadArgumentsAreNamed) {
  const auto parts = all_ranks(10, 4, {.shuffle = false, .drop_last = true}, 0);
  for (const auto& p : parts) EXPECT_EQ(p.size(), 2u);
  EXPECT_EQ(parts[3], (std::vector<int64_t>{3, 7}));
  EXPECT_NE(mpt::testing::error_message([] { DistributedSampler(10, 4, 4); }).find("rank 4 of 4 ranks"),
            std::string::npos);
  EXPECT_NE(mpt::testing::error_message([] { DistributedSampler(3, 0, 4, {.drop_last = true}); })
                .find("leaves every rank empty"),
            std::string::npos);
  EXPECT_EQ(DistributedSampler(0, 0, 2).indices().size(), 0u);
}
