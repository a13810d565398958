// tests/data/test_batching.cpp: dynamic padding (exact ids, targets, lengths and shapes; truncation; errors) and
// LengthBucketSampler (every sample once per epoch across ranks, batches cut from sorted windows, less padding than
// random batches on tinyshakespeare's lines, determinism, resuming, ranks splitting the global batch, errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "mpt/data/batching.h"
#include "test_util.h"

namespace mpt {
namespace {

using data::BucketSamplerOptions;
using data::LengthBucketSampler;
using data::PadOptions;
using Samples = std::vector<std::vector<int32_t>>;

TEST(PadBatch, PadsToTheLongestSample) {
  const Samples s{{5, 6, 7}, {1}, {2, 3, 4, 8, 9}};
  const data::PaddedBatch b = data::pad_batch(s, {.pad_id = 99});
  EXPECT_EQ(b.ids.shape(), (Shape{3, 5}));
  EXPECT_EQ(b.ids.dtype(), DType::I64);
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 99, 99,  //
                                                              1, 99, 99, 99, 99,  //
                                                              2, 3, 4, 8, 9}));
  EXPECT_FALSE(b.targets.defined());
  EXPECT_EQ(b.lengths.dtype(), DType::I32);
  EXPECT_EQ(b.lengths.to_vector<int32_t>(), (std::vector<int32_t>{3, 1, 5}));
  EXPECT_EQ(b.tokens, 9);
  EXPECT_DOUBLE_EQ(b.padding_fraction(), 1 - 9.0 / 15);
}

TEST(PadBatch, RoundsTheLengthUpToTheMultipleButNotPastMaxLength) {
  const Samples s{{5, 6, 7}, {1}, {2, 3, 4, 8, 9}};
  const data::PaddedBatch b = data::pad_batch(s, {.pad_to_multiple = 4});
  EXPECT_EQ(b.ids.shape(), (Shape{3, 8}));
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 0, 0, 0, 0, 0,  //
                                                              1, 0, 0, 0, 0, 0, 0, 0,  //
                                                              2, 3, 4, 8, 9, 0, 0, 0}));
  EXPECT_EQ(b.tokens, 9);
  EXPECT_DOUBLE_EQ(b.padding_fraction(), 1 - 9.0 / 24);
  EXPECT_EQ(data::pad_batch(s, {.pad_to_multiple = 5}).ids.shape(), (Shape{3, 5}));  // already a multiple
  // The model's context (max_length) wins over the rounding.
  EXPECT_EQ(data::pad_batch(s, {.pad_to_multiple = 4, .max_length = 6}).ids.shape(), (Shape{3, 6}));
}

TEST(PadBatch, TruncatesToMaxLength) {
  const Samples s{{5, 6, 7}, {1}, {2, 3, 4, 8, 9}};
  const data::PaddedBatch b = data::pad_batch(s, {.pad_id = 7, .max_length = 2, .truncate = true});
  EXPECT_EQ(b.ids.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 1, 7, 2, 3}));
  EXPECT_EQ(b.lengths.to_vector<int32_t>(), (std::vector<int32_t>{2, 1, 2}));
  EXPECT_EQ(b.tokens, 5);
  EXPECT_DOUBLE_EQ(b.padding_fraction(), 1 - 5.0 / 6);
  // Without truncation a sample at max_length is fine.
  EXPECT_EQ(data::pad_batch(s, {.max_length = 5}).ids.shape(), (Shape{3, 5}));
}

TEST(PadLmBatch, TargetsAreTheNextIdsAndIgnoredPastTheEnd) {
  const Samples s{{1, 2, 3, 4}, {7, 8}, {9, 10, 11}};
  const data::PaddedBatch b = data::pad_lm_batch(s, {.pad_id = 0});
  EXPECT_EQ(b.ids.shape(), (Shape{3, 3}));
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 7, 0, 0, 9, 10, 0}));
  ASSERT_TRUE(b.targets.defined());
  EXPECT_EQ(b.targets.shape(), (Shape{3, 3}));
  EXPECT_EQ(b.targets.dtype(), DType::I64);
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 8, -100, -100, 10, 11, -100}));
  EXPECT_EQ(b.lengths.to_vector<int32_t>(), (std::vector<int32_t>{3, 1, 2}));
  EXPECT_EQ(b.tokens, 6);
  EXPECT_DOUBLE_EQ(b.padding_fraction(), 1 - 6.0 / 9);

  const data::PaddedBatch r = data::pad_lm_batch(s, {.pad_id = 5, .pad_to_multiple = 2});
  EXPECT_EQ(r.ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 5, 7, 5, 5, 5, 9, 10, 5, 5}));
  EXPECT_EQ(r.targets.to_vector<int64_t>(),
            (std::vector<int64_t>{2, 3, 4, -100, 8, -100, -100, -100, 10, 11, -100, -100}));
  EXPECT_DOUBLE_EQ(r.padding_fraction(), 1 - 6.0 / 12);
}

TEST(PadLmBatch, TruncationKeepsMaxLengthPlusOneIds) {
  const Samples s{{1, 2, 3, 4}, {7, 8}};
  const data::PaddedBatch b = data::pad_lm_batch(s, {.max_length = 2, .truncate = true});
  EXPECT_EQ(b.ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 7, 0}));
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 8, -100}));
  EXPECT_EQ(b.lengths.to_vector<int32_t>(), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(b.tokens, 3);
  // max_length bounds the positions (n - 1), not the ids: 4 ids fill 3 positions.
  EXPECT_EQ(data::pad_lm_batch(s, {.max_length = 3}).ids.shape(), (Shape{2, 3}));
}

TEST(PadBatch, Errors) {
  EXPECT_MPT_ERROR(data::pad_batch(Samples{}), "[pad_batch] the batch has no samples");
  EXPECT_MPT_ERROR(data::pad_lm_batch(Samples{}), "[pad_lm_batch] the batch has no samples");
  EXPECT_MPT_ERROR(data::pad_batch(Samples{{1}, {2, 3}, {}}), "[pad_batch] sample 2 is empty");
  EXPECT_MPT_ERROR(data::pad_lm_batch(Samples{{1, 2}, {3}}),
                   "[pad_lm_batch] sample 1 has 1 id; language modelling needs at least 2");
  EXPECT_MPT_ERROR(data::pad_batch(Samples{{1}}, {.pad_to_multiple = 0}), "[pad_batch] pad_to_multiple 0 must be at "
                   "least 1");
  EXPECT_MPT_ERROR(data::pad_batch(Samples{{1}, {1, 2, 3, 4}}, {.max_length = 3}),
                   "[pad_batch] sample 1 has length 4, more than max_length 3 (set truncate to cut it)");
  EXPECT_MPT_ERROR(data::pad_lm_batch(Samples{{1, 2, 3, 4, 5}}, {.max_length = 3}),
                   "[pad_lm_batch] sample 0 has length 4, more than max_length 3");
  EXPECT_MPT_ERROR(data::pad_batch(Samples{{1}}, {.max_length = -1}), "[pad_batch] max_length -1 must not be negative");
  EXPECT_MPT_ERROR(data::pad_batch(Samples{{1, 2}, {3, -4}}),
                   "[pad_batch] sample 1 has id -4 at position 1; ids must not be negative");
  EXPECT_MPT_ERROR(data::pad_lm_batch(Samples{{1, 2, -3}}), "[pad_lm_batch] sample 0 has id -3 at position 2");
  // Past the truncation the ids are not read.
  EXPECT_EQ(data::pad_batch(Samples{{1, 2, -3}}, {.max_length = 2, .truncate = true}).tokens, 2);
}

// Collects every rank's batch of one step into the global batch.
std::vector<int64_t> global_batch(std::vector<LengthBucketSampler>& ranks) {
  std::vector<int64_t> all;
  for (LengthBucketSampler& s : ranks)
    for (int64_t i : s.next()) all.push_back(i);
  return all;
}

std::vector<LengthBucketSampler> make_ranks(const BucketSamplerOptions& base) {
  std::vector<LengthBucketSampler> ranks;
  for (int r = 0; r < base.world; ++r) {
    BucketSamplerOptions o = base;
    o.rank = r;
    ranks.emplace_back(o);
  }
  return ranks;
}

// Distinct lengths 1 .. n in a scrambled order (step coprime to n).
std::vector<int64_t> distinct_lengths(int64_t n, int64_t step) {
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lengths[static_cast<size_t>(i)] = i * step % n + 1;
  return lengths;
}

TEST(LengthBucketSampler, AnEpochVisitsEverySampleOnceAcrossRanks) {
  std::vector<int64_t> lengths(1003);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = 1 + static_cast<int64_t>(i * 37 % 50);
  const BucketSamplerOptions base{.lengths = lengths, .batch = 3, .bucket_batches = 5, .world = 4, .seed = 11};
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<LengthBucketSampler> ranks = make_ranks(base);
    for (LengthBucketSampler& s : ranks) s.set_position({epoch, 0});
    const int64_t batches = ranks[0].batches_per_epoch();
    EXPECT_EQ(batches, 1003 / 12);
    std::set<int64_t> seen;
    for (int64_t b = 0; b < batches; ++b) {
      for (LengthBucketSampler& s : ranks) {
        const std::vector<int64_t> mine = s.next();
        EXPECT_EQ(mine.size(), 3u);
        for (int64_t i : mine) {
          EXPECT_GE(i, 0);
          EXPECT_LT(i, 1003);
          EXPECT_TRUE(seen.insert(i).second) << "epoch " << epoch << ": sample " << i << " handed out twice";
        }
        EXPECT_EQ(s.position(), (data::SamplerPosition{epoch, (b + 1) * 12}));
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), batches * 12);  // all but the dropped remainder (1003 % 12 = 7)
    ranks[0].next();
    EXPECT_EQ(ranks[0].position(), (data::SamplerPosition{epoch + 1, 12}));
  }
}

// drop_last drops the drawn order's tail before the windows are sorted: another sample each epoch, not the longest.
TEST(LengthBucketSampler, DropsRandomSamplesNotTheLongest) {
  const std::vector<int64_t> lengths = distinct_lengths(101, 3);  // global batch 10: one sample dropped per epoch
  LengthBucketSampler s({.lengths = lengths, .batch = 10, .bucket_batches = 100, .seed = 21});
  std::set<int64_t> dropped;
  for (int epoch = 0; epoch < 20; ++epoch) {
    std::set<int64_t> left;
    for (int64_t i = 0; i < 101; ++i) left.insert(i);
    for (int64_t b = 0; b < s.batches_per_epoch(); ++b)
      for (int64_t i : s.next()) left.erase(i);
    ASSERT_EQ(left.size(), 1u);
    dropped.insert(lengths[static_cast<size_t>(*left.begin())]);
  }
  EXPECT_GT(dropped.size(), 10u);
}

// With one window for the whole epoch, the global batches are the consecutive blocks of all samples sorted by length,
// visited in a shuffled order.
TEST(LengthBucketSampler, OneWindowCutsTheSortedEpochIntoBatches) {
  const std::vector<int64_t> lengths = distinct_lengths(48, 7);
  for (int64_t bucket_batches : {int64_t{8}, int64_t{1000}}) {
    std::vector<LengthBucketSampler> ranks =
        make_ranks({.lengths = lengths, .batch = 3, .bucket_batches = bucket_batches, .world = 2, .seed = 5});
    std::set<std::vector<int64_t>> blocks;
    std::vector<int64_t> shortest;
    for (int b = 0; b < 8; ++b) {
      std::vector<int64_t> got;
      for (int64_t i : global_batch(ranks)) got.push_back(lengths[static_cast<size_t>(i)]);
      EXPECT_EQ(got.front() % 6, 1) << "a block of 6 starts at 1, 7, 13, ...";
      for (int k = 1; k < 6; ++k) EXPECT_EQ(got[k], got[0] + k) << "batch " << b << ": sorted consecutive lengths";
      blocks.insert(got);
      shortest.push_back(got.front());
    }
    EXPECT_EQ(blocks.size(), 8u);
    EXPECT_FALSE(std::is_sorted(shortest.begin(), shortest.end())) << "the batches' order is shuffled";
  }
}

// The most global batches whose length range [shortest, longest] contains one length. Batches cut from one sorted
// window have disjoint ranges, so with W windows an epoch's depth is at most W.
int64_t range_depth(const std::vector<std::vector<int64_t>>& batches, int64_t longest) {
  int64_t depth = 0;
  for (int64_t x = 1; x <= longest; ++x) {
    int64_t d = 0;
    for (const std::vector<int64_t>& b : batches) d += b.front() <= x && x <= b.back();
    depth = std::max(depth, d);
  }
  return depth;
}

TEST(LengthBucketSampler, GlobalBatchesAreSlicesOfSortedWindows) {
  const int64_t windows = 6;
  const std::vector<int64_t> lengths = distinct_lengths(4 * 5 * windows, 7);  // 120 samples, global batch 4
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int64_t bucket_batches : {int64_t{5}, int64_t{1}}) {
      LengthBucketSampler s({.lengths = lengths, .batch = 4, .bucket_batches = bucket_batches, .seed = 3});
      s.set_position({epoch, 0});
      std::vector<std::vector<int64_t>> batches;
      for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
        std::vector<int64_t> got;
        for (int64_t i : s.next()) got.push_back(lengths[static_cast<size_t>(i)]);
        EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << "a global batch is a slice of a sorted window";
        batches.push_back(got);
      }
      const int64_t depth = range_depth(batches, 120);
      if (bucket_batches == 5) {
        EXPECT_LE(depth, windows) << "epoch " << epoch << ": batches mix samples of different windows";
        EXPECT_GT(depth, 1) << "epoch " << epoch << ": sorted as one window, not " << windows;
      } else {
        EXPECT_GT(depth, windows) << "the check tells 30 windows of one batch from 6 of five";
      }
    }
  }
}

// The non-empty lines of tinyshakespeare, as byte ids.
const Samples& shakespeare_lines() {
  static const Samples lines = [] {
    std::ifstream in(MPT_TINYSHAKESPEARE, std::ios::binary);
    Samples out;
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) out.emplace_back(line.begin(), line.end());
    return out;
  }();
  return lines;
}

double mean_padding_fraction(const BucketSamplerOptions& o) {
  const Samples& lines = shakespeare_lines();
  LengthBucketSampler s(o);
  double sum = 0;
  for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
    Samples batch;
    for (int64_t i : s.next()) batch.push_back(lines[static_cast<size_t>(i)]);
    sum += data::pad_batch(batch).padding_fraction();
  }
  return sum / static_cast<double>(s.batches_per_epoch());
}

TEST(LengthBucketSampler, PadsTinyShakespearesLinesFarLessThanRandomBatches) {
  const Samples& lines = shakespeare_lines();
  ASSERT_GT(lines.size(), 30000u);
  std::vector<int64_t> lengths;
  for (const std::vector<int32_t>& l : lines) lengths.push_back(static_cast<int64_t>(l.size()));
  const double random = mean_padding_fraction({.lengths = lengths, .batch = 16, .bucket_batches = 1, .seed = 1});
  const double bucketed = mean_padding_fraction({.lengths = lengths, .batch = 16, .bucket_batches = 64, .seed = 1});
  std::printf("padding fraction over %zu lines, batches of 16: random %.4f, bucketed (64 batches a window) %.4f\n",
              lines.size(), random, bucketed);
  EXPECT_GT(random, 0.2);
  EXPECT_LE(3 * bucketed, random);
}

TEST(LengthBucketSampler, TheSeedDecidesTheOrder) {
  const std::vector<int64_t> lengths = distinct_lengths(500, 13);
  LengthBucketSampler a({.lengths = lengths, .batch = 4, .bucket_batches = 3, .seed = 1});
  LengthBucketSampler b({.lengths = lengths, .batch = 4, .bucket_batches = 3, .seed = 1});
  LengthBucketSampler c({.lengths = lengths, .batch = 4, .bucket_batches = 3, .seed = 2});
  int differs = 0;
  for (int i = 0; i < 300; ++i) {  // past the first epoch's 125 batches
    const std::vector<int64_t> x = a.next();
    EXPECT_EQ(x, b.next()) << i;
    differs += x != c.next();
  }
  EXPECT_GT(differs, 250);
}

TEST(LengthBucketSampler, ResumesFromItsSavedStateMidEpochAndAcrossEpochs) {
  std::vector<int64_t> lengths(777);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = 1 + static_cast<int64_t>(i * i % 97);
  const BucketSamplerOptions o{.lengths = lengths, .batch = 5, .bucket_batches = 4, .rank = 1, .world = 2, .seed = 99};
  const int64_t per_epoch = LengthBucketSampler(o).batches_per_epoch();
  for (int64_t stop : {int64_t{3}, per_epoch, per_epoch + 2, 3 * per_epoch - 1}) {
    LengthBucketSampler run(o);
    for (int64_t i = 0; i < stop; ++i) run.next();
    const std::string saved = run.state_json();
    LengthBucketSampler resumed(o);
    resumed.load_state_json(saved);
    EXPECT_EQ(resumed.position(), run.position());
    LengthBucketSampler placed(o);
    placed.set_position(run.position());
    for (int i = 0; i < per_epoch + 3; ++i) {
      const std::vector<int64_t> expected = run.next();
      ASSERT_EQ(resumed.next(), expected) << "stop " << stop << " batch " << i;
      ASSERT_EQ(placed.next(), expected) << "stop " << stop << " batch " << i;
    }
  }
}

// Two ranks of batch 3 together get the global batch of one process of batch 6, in rank order; and a state saved on
// two ranks resumes on one.
TEST(LengthBucketSampler, RanksSplitTheGlobalBatchOfOneProcess) {
  std::vector<int64_t> lengths(400);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = 1 + static_cast<int64_t>(i * 31 % 64);
  std::vector<LengthBucketSampler> two =
      make_ranks({.lengths = lengths, .batch = 3, .bucket_batches = 4, .world = 2, .seed = 8});
  LengthBucketSampler one({.lengths = lengths, .batch = 6, .bucket_batches = 4, .seed = 8});
  const int64_t per_epoch = one.batches_per_epoch();
  EXPECT_EQ(two[0].batches_per_epoch(), per_epoch);
  for (int64_t i = 0; i < per_epoch + 5; ++i) ASSERT_EQ(global_batch(two), one.next()) << i;
  LengthBucketSampler resumed({.lengths = lengths, .batch = 6, .bucket_batches = 4, .seed = 8});
  resumed.load_state_json(two[1].state_json());
  for (int i = 0; i < 10; ++i) ASSERT_EQ(resumed.next(), global_batch(two)) << i;
}

TEST(LengthBucketSampler, Errors) {
  EXPECT_MPT_ERROR(LengthBucketSampler({}), "[length_bucket_sampler] no samples");
  const std::vector<int64_t> lengths{3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  EXPECT_MPT_ERROR(LengthBucketSampler({.lengths = lengths, .batch = 0}), "batch 0 must be positive");
  EXPECT_MPT_ERROR(LengthBucketSampler({.lengths = lengths, .rank = 2, .world = 2}), "rank 2 within world size 2");
  EXPECT_MPT_ERROR(LengthBucketSampler({.lengths = lengths, .bucket_batches = 0}),
                   "bucket_batches 0 must be at least 1");
  EXPECT_MPT_ERROR(LengthBucketSampler({.lengths = lengths, .batch = 4, .world = 3}),
                   "10 samples are fewer than one batch of 12 (4 per rank x 3 ranks)");
  EXPECT_MPT_ERROR(LengthBucketSampler({.lengths = {3, 0, 2}}), "sample 1 has length 0; lengths must be at least 1");

  const BucketSamplerOptions o{.lengths = lengths, .batch = 2, .bucket_batches = 2, .seed = 3};
  LengthBucketSampler s(o);
  s.next();
  const std::string saved = s.state_json();
  BucketSamplerOptions other = o;
  other.lengths[4] = 6;
  EXPECT_MPT_ERROR(LengthBucketSampler(other).load_state_json(saved), "the saved state has lengths_hash ");
  EXPECT_MPT_ERROR(LengthBucketSampler(other).load_state_json(saved),
                   "the samples' lengths differ from the saved run's");
  other = o;
  other.lengths.push_back(7);
  EXPECT_MPT_ERROR(LengthBucketSampler(other).load_state_json(saved),
                   "the saved state has samples 10, this run 11: the data differs");
  other = o;
  other.seed = 4;
  EXPECT_MPT_ERROR(LengthBucketSampler(other).load_state_json(saved),
                   "the saved state has seed 3, this run 4: give the saved run's --seed");
  other = o;
  other.world = 2;
  EXPECT_MPT_ERROR(LengthBucketSampler(other).load_state_json(saved),
                   "the saved state has global_batch 2, this run 4: keep ranks x --batch");
  other = o;
  other.bucket_batches = 3;
  EXPECT_MPT_ERROR(LengthBucketSampler(other).load_state_json(saved),
                   "the saved state has bucket_batches 2, this run 3");
  // The same data, seed and global batch on two ranks resumes.
  other = o;
  other.batch = 1;
  other.world = 2;
  LengthBucketSampler two(other);
  two.load_state_json(saved);
  EXPECT_EQ(two.position(), (data::SamplerPosition{0, 2}));

  EXPECT_MPT_ERROR(s.load_state_json("{}"), "[length_bucket_sampler] the saved state is not valid");
  EXPECT_MPT_ERROR(s.load_state_json(R"({"sampler": "window", "version": 1})"),
                   "the saved state is of sampler 'window' version 1; expected 'length_bucket' version 1");
  EXPECT_MPT_ERROR(s.set_position({0, 3}), "index 3 of epoch 0 is not a batch boundary");
  EXPECT_MPT_ERROR(s.set_position({0, 12}), "index 12 of epoch 0 is not a batch boundary (multiples of 2 up to 10");
  EXPECT_MPT_ERROR(s.set_position({-1, 0}), "position (epoch -1, index 0) must not be negative");
}

}  // namespace
}  // namespace mpt
