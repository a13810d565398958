// tests/core/test_block_cache.cpp: detail::BlockCache, the splitting and merging cache in front of the CUDA pool.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "../../src/core/block_cache.h"
#include "mpt/core/error.h"

namespace mpt::detail {
namespace {

constexpr size_t MiB = size_t{1} << 20;

// Segments from malloc, within a byte budget (the device's memory), every acquire and release recorded.
struct FakeSystem {
  size_t budget = SIZE_MAX, held = 0;
  std::map<void*, size_t> segments;
  std::vector<size_t> acquired, released;
  BlockCache cache{[this](size_t n) -> void* {
                     if (held + n > budget) return nullptr;
                     void* p = std::malloc(n);
                     held += n;
                     segments.emplace(p, n);
                     acquired.push_back(n);
                     return p;
                   },
                   [this](void* p, size_t n) {
                     EXPECT_EQ(segments.at(p), n) << "a segment goes back whole, with the size it came with";
                     segments.erase(p);
                     held -= n;
                     released.push_back(n);
                     std::free(p);
                   }};
};

TEST(BlockCache, RoundsRequestsAndSizesSegmentsAsPyTorchsAllocator) {
  EXPECT_EQ(BlockCache::round(0), 512u);
  EXPECT_EQ(BlockCache::round(1), 512u);
  EXPECT_EQ(BlockCache::round(512), 512u);
  EXPECT_EQ(BlockCache::round(513), 1024u);
  EXPECT_EQ(BlockCache::segment_size(1), 2 * MiB);
  EXPECT_EQ(BlockCache::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(BlockCache::segment_size(MiB + 1), 20 * MiB);
  EXPECT_EQ(BlockCache::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(BlockCache::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(BlockCache::segment_size(11 * MiB + 1), 12 * MiB);
}

TEST(BlockCache, SmallBlocksShareASegmentAndMergeBackWhenFreed) {
  FakeSystem sys;
  BlockCache& c = sys.cache;
  char* a = static_cast<char*>(c.allocate(1000));
  char* b = static_cast<char*>(c.allocate(3000));
  char* d = static_cast<char*>(c.allocate(512));
  ASSERT_EQ(sys.acquired, std::vector<size_t>{2 * MiB});
  EXPECT_EQ(b, a + 1024) << "split off the same segment, lowest address first";
  EXPECT_EQ(d, b + 3072);
  EXPECT_EQ(c.block_size(a), 1024u);
  EXPECT_EQ(c.reserved(), 2 * MiB);
  EXPECT_EQ(c.idle(), 2 * MiB - 1024 - 3072 - 512);
  c.free(b);
  EXPECT_EQ(c.allocate(2000), b) << "the freed block is the best fit";
  c.free(b);
  c.free(a);  // a and b merge
  EXPECT_EQ(c.allocate(4000), a) << "a + b merged: 4096 bytes at a";
  c.free(a);
  EXPECT_EQ(c.release_idle(), 0u) << "d still holds the segment";
  c.free(d);
  EXPECT_EQ(c.idle(), 2 * MiB);
  EXPECT_EQ(c.release_idle(), 2 * MiB);
  EXPECT_EQ(sys.released, std::vector<size_t>{2 * MiB});
  EXPECT_EQ(c.reserved(), 0u);
  EXPECT_EQ(c.segments(), 0u);
}

// What the cache is for: memory freed as one size serves requests of another (a step's activations freed in
// backward become its gradients), where a cache keyed by exact sizes would ask the system for more.
TEST(BlockCache, MemoryFreedAsOneSizeServesAnother) {
  FakeSystem sys;
  BlockCache& c = sys.cache;
  std::vector<void*> fives;
  for (int i = 0; i < 4; ++i) fives.push_back(c.allocate(5 * MiB));
  ASSERT_EQ(sys.acquired, std::vector<size_t>{20 * MiB});
  for (void* p : fives) c.free(p);
  EXPECT_EQ(c.idle(), 20 * MiB);
  std::vector<void*> sixes;
  for (int i = 0; i < 3; ++i) sixes.push_back(c.allocate(6 * MiB));
  EXPECT_EQ(sys.acquired.size(), 1u) << "three 6 MiB blocks from the freed 5 MiB ones";
  EXPECT_EQ(c.idle(), 2 * MiB);
  // The 2 MiB rest is more than 1 MiB: a block of its own, which a 1.5 MiB request takes whole.
  void* tail = c.allocate(MiB + MiB / 2);
  EXPECT_EQ(sys.acquired.size(), 1u);
  EXPECT_EQ(c.block_size(tail), 2 * MiB) << "the 0.5 MiB rest stays with it: too small to split off";
  // A large request that no free block holds gets a segment of its own, rounded to 2 MiB.
  void* big = c.allocate(33 * MiB + 7);
  EXPECT_EQ(sys.acquired.back(), 34 * MiB);
  EXPECT_EQ(c.block_size(big), 34 * MiB) << "the 1 MiB rest is too small to split off a large segment";
  c.free(big);
  for (void* p : sixes) c.free(p);
  c.free(tail);
  EXPECT_EQ(c.release_idle(), 54 * MiB);
  EXPECT_TRUE(sys.segments.empty());
}

TEST(BlockCache, BestFitTakesTheSmallestFreeBlockThatHoldsTheRequest) {
  FakeSystem sys;
  BlockCache& c = sys.cache;
  void* a = c.allocate(8 * MiB);
  void* guard1 = c.allocate(2 * MiB);
  void* b = c.allocate(3 * MiB);
  void* guard2 = c.allocate(2 * MiB);
  ASSERT_EQ(sys.acquired.size(), 1u);
  c.free(a);
  c.free(b);  // free: 8 MiB at a, 3 MiB at b, and the segment's 5 MiB tail
  EXPECT_EQ(c.allocate(2 * MiB + MiB / 2), b);
  EXPECT_EQ(c.allocate(6 * MiB), a) << "the 5 MiB tail is too small, the 8 MiB block fits";
  EXPECT_EQ(sys.acquired.size(), 1u);
  (void)guard1;
  (void)guard2;
}

TEST(BlockCache, SmallAndLargeRequestsNeverShareASegment) {
  FakeSystem sys;
  BlockCache& c = sys.cache;
  void* large = c.allocate(4 * MiB);
  c.free(large);  // a free 20 MiB segment
  void* small = c.allocate(4096);
  EXPECT_EQ(sys.acquired, (std::vector<size_t>{20 * MiB, 2 * MiB})) << "small requests take small segments only";
  c.free(small);
}

// When the system refuses a segment, idle segments go back first; then a segment of just the request is tried.
TEST(BlockCache, AnOutOfMemorySegmentReleasesIdleOnesAndFallsBackToTheRequestItself) {
  FakeSystem sys;
  BlockCache& c = sys.cache;
  sys.budget = 24 * MiB;
  void* s = c.allocate(1000);  // a 2 MiB segment, then freed: idle
  c.free(s);
  void* a = c.allocate(12 * MiB);  // its own 12 MiB segment: 14 MiB held
  void* b = c.allocate(3 * MiB);   // wants 20 MiB: refused; the idle 2 MiB goes back and then 20 MiB is still too
                                   // much, so a 3 MiB segment of its own
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(sys.acquired, (std::vector<size_t>{2 * MiB, 12 * MiB, 3 * MiB}));
  EXPECT_EQ(sys.released, std::vector<size_t>{2 * MiB});
  EXPECT_EQ(c.allocate(10 * MiB), nullptr) << "9 MiB left: nothing fits";
  EXPECT_EQ(c.reserved(), 15 * MiB) << "a refusal leaves the cache as it was";
  c.free(a);
  c.free(b);
}

TEST(BlockCache, RefusesPointersItDidNotHandOut) {
  FakeSystem sys;
  BlockCache& c = sys.cache;
  void* p = c.allocate(100);
  int local = 0;
  EXPECT_THROW(c.free(&local), Error);
  EXPECT_THROW((void)c.block_size(&local), Error);
  c.free(p);
  EXPECT_THROW(c.free(p), Error) << "a second free";
  EXPECT_FALSE(c.owns(p));
}

// Random allocations and frees: live blocks never overlap (every 512th byte of each, the cache's granularity, holds
// its own tag and is checked when freed), idle + live bytes always equal the reserve, and everything goes back.
TEST(BlockCache, RandomTrafficKeepsBlocksDisjointAndTheBytesAccountedFor) {
  FakeSystem sys;
  BlockCache& c = sys.cache;
  std::mt19937_64 rng(7);
  struct Live {
    char* p;
    size_t n;
    char tag;
  };
  std::vector<Live> live;
  size_t live_bytes = 0;
  auto check_and_free = [&](size_t i) {
    const Live l = live[i];
    for (size_t k = 0; k < l.n; k += BlockCache::kRound) ASSERT_EQ(l.p[k], l.tag) << "block overwritten";
    ASSERT_EQ(l.p[l.n - 1], l.tag);
    live_bytes -= c.block_size(l.p);
    c.free(l.p);
    live[i] = live.back();
    live.pop_back();
  };
  for (int step = 0; step < 6000; ++step) {
    if (live.empty() || (live.size() < 48 && rng() % 2 == 0)) {
      const int kind = static_cast<int>(rng() % 10);  // small, shared-large and own-segment requests
      const size_t n = kind < 6   ? 1 + rng() % (64 * 1024)
                       : kind < 9 ? MiB + rng() % (9 * MiB)
                                  : 10 * MiB + rng() % (20 * MiB);
      char* p = static_cast<char*>(c.allocate(n));
      ASSERT_NE(p, nullptr);
      ASSERT_GE(c.block_size(p), n);
      const char tag = static_cast<char>(1 + step % 251);
      for (size_t k = 0; k < n; k += BlockCache::kRound) p[k] = tag;
      p[n - 1] = tag;
      live.push_back({p, n, tag});
      live_bytes += c.block_size(p);
    } else {
      check_and_free(rng() % live.size());
    }
    ASSERT_EQ(c.idle() + live_bytes, c.reserved()) << "step " << step;
    if (step % 1000 == 999) c.release_idle();
  }
  size_t held = 0;
  for (const auto& [p, n] : sys.segments) held += n;
  EXPECT_EQ(held, c.reserved());
  while (!live.empty()) check_and_free(live.size() - 1);
  EXPECT_EQ(c.idle(), c.reserved()) << "every block merged back";
  EXPECT_EQ(c.release_idle(), held);
  EXPECT_TRUE(sys.segments.empty());
}

}  // namespace
}  // namespace mpt::detail
