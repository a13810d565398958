// tests/data/test_sampler.cpp: WindowSampler's epochs (every window once, ranks disjoint, offsets within a window),
// its determinism, and resuming from a saved position, mid-epoch and across an epoch's end.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "mpt/data/sampler.h"
#include "test_util.h"

namespace mpt {
namespace {

using data::SamplerOptions;
using data::WindowSampler;

TEST(WindowSampler, AnEpochVisitsEveryWindowOnceAcrossRanks) {
  const SamplerOptions base{.tokens = 10007, .window = 65, .batch = 3, .rank = 0, .world = 4, .seed = 11};
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<WindowSampler> ranks;
    for (int r = 0; r < 4; ++r) {
      SamplerOptions o = base;
      o.rank = r;
      ranks.emplace_back(o);
      ranks.back().set_position({epoch, 0});
    }
    const int64_t batches = ranks[0].batches_per_epoch();
    std::set<int64_t> seen;
    int64_t offset = -1;
    for (int64_t b = 0; b < batches; ++b) {
      for (WindowSampler& s : ranks) {
        for (int64_t start : s.next()) {
          if (offset < 0) offset = start % base.window;
          EXPECT_EQ(start % base.window, offset) << "epoch " << epoch << ": windows share the epoch's offset";
          EXPECT_LE(start + base.window, base.tokens);
          EXPECT_TRUE(seen.insert(start).second) << "epoch " << epoch << ": window " << start << " handed out twice";
        }
        EXPECT_EQ(s.position(), (data::SamplerPosition{epoch, (b + 1) * 12}));
      }
    }
    EXPECT_GE(offset, 0);
    EXPECT_LT(offset, base.window);
    const int64_t windows = (base.tokens - offset) / base.window;
    EXPECT_EQ(batches, windows / 12);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), batches * 12);  // all but the dropped remainder (< 12)
    EXPECT_LT(windows - static_cast<int64_t>(seen.size()), 12);
    // The next batch starts the next epoch.
    ranks[0].next();
    EXPECT_EQ(ranks[0].position(), (data::SamplerPosition{epoch + 1, 12}));
  }
}

TEST(WindowSampler, TheSeedDecidesTheOrder) {
  const SamplerOptions o{.tokens = 5000, .window = 33, .batch = 4, .seed = 1};
  WindowSampler a(o), b(o);
  SamplerOptions o2 = o;
  o2.seed = 2;
  WindowSampler c(o2);
  bool differs = false;
  for (int i = 0; i < 50; ++i) {
    const auto x = a.next();
    EXPECT_EQ(x, b.next());
    differs = differs || x != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(WindowSampler, ResumesFromItsSavedStateMidEpochAndAcrossEpochs) {
  const SamplerOptions o{.tokens = 3000, .window = 17, .batch = 5, .rank = 1, .world = 2, .seed = 99};
  WindowSampler a(o);
  const int64_t per_epoch = a.batches_per_epoch();
  for (int64_t stop : {int64_t{3}, per_epoch, per_epoch + 2, 3 * per_epoch - 1}) {
    WindowSampler run(o);
    for (int64_t i = 0; i < stop; ++i) run.next();
    const std::string saved = run.state_json();
    WindowSampler resumed(o);
    resumed.load_state_json(saved);
    EXPECT_EQ(resumed.position(), run.position());
    for (int i = 0; i < per_epoch + 3; ++i) ASSERT_EQ(resumed.next(), run.next()) << "stop " << stop << " batch " << i;
  }
}

// A run saved on 4 ranks of batch 2 continues on 2 ranks of batch 4 or one process of batch 8 with the same windows.
TEST(WindowSampler, ResumesOnAnotherNumberOfRanksWithTheSameGlobalBatch) {
  const SamplerOptions four{.tokens = 4000, .window = 21, .batch = 2, .rank = 0, .world = 4, .seed = 7};
  std::vector<WindowSampler> ranks;
  for (int r = 0; r < 4; ++r) {
    SamplerOptions o = four;
    o.rank = r;
    ranks.emplace_back(o);
    for (int i = 0; i < 5; ++i) ranks.back().next();
  }
  const std::string saved = ranks[0].state_json();
  WindowSampler one({.tokens = 4000, .window = 21, .batch = 8, .seed = 7});
  one.load_state_json(saved);
  WindowSampler two0({.tokens = 4000, .window = 21, .batch = 4, .rank = 0, .world = 2, .seed = 7});
  two0.load_state_json(saved);
  for (int i = 0; i < 30; ++i) {
    std::vector<int64_t> global;
    for (WindowSampler& s : ranks)
      for (int64_t v : s.next()) global.push_back(v);
    EXPECT_EQ(one.next(), global) << i;
    const std::vector<int64_t> first_half(global.begin(), global.begin() + 4);
    EXPECT_EQ(two0.next(), first_half) << i;
  }
}

TEST(WindowSampler, Errors) {
  EXPECT_MPT_ERROR(WindowSampler({.tokens = 100, .window = 11, .batch = 5, .world = 2}),
                   "100 tokens hold 9 windows of 11 (seq + 1), fewer than one batch of 10 (5 per rank x 2 ranks)");
  EXPECT_MPT_ERROR(WindowSampler({.tokens = 100, .window = 1}), "window 1 must be at least 2");
  EXPECT_MPT_ERROR(WindowSampler({.tokens = 100, .window = 5, .rank = 2, .world = 2}), "rank 2 within world size 2");
  const SamplerOptions o{.tokens = 1000, .window = 10, .batch = 2, .seed = 3};
  WindowSampler s(o);
  const std::string saved = s.state_json();
  SamplerOptions other = o;
  other.window = 11;
  EXPECT_MPT_ERROR(WindowSampler(other).load_state_json(saved), "has window 10, this run 11: give the saved run's --seq");
  other = o;
  other.world = 2;
  EXPECT_MPT_ERROR(WindowSampler(other).load_state_json(saved), "has global_batch 2, this run 4: keep ranks x --batch");
  other = o;
  other.tokens = 999;
  EXPECT_MPT_ERROR(WindowSampler(other).load_state_json(saved), "the data differs from the saved run's");
  EXPECT_MPT_ERROR(s.load_state_json("{}"), "the saved state is not valid");
  EXPECT_MPT_ERROR(s.set_position({0, 3}), "index 3 of epoch 0 is not a batch boundary");
}

}  // namespace
}  // namespace mpt
