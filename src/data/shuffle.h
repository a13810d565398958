// src/data/shuffle.h: the samplers' portable random orders: SplitMix64 streams drawn from (seed, epoch), Fisher-Yates.
#pragma once

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace mpt::data::detail {

// SplitMix64 (Steele, Lea, Flood 2014): a portable 64-bit generator; std::shuffle's algorithm is unspecified.
struct SplitMix64 {
  uint64_t state;
  uint64_t operator()() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by rejection (no modulo bias).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do v = (*this)(); while (v >= limit);
    return v % n;
  }
};

// The starting state of stream `stream` of epoch `epoch`: independent draws of one epoch use different streams.
inline uint64_t epoch_seed(uint64_t seed, int64_t epoch, int stream = 0) {
  SplitMix64 g{seed ^ (0x5851f42d4c957f2dull * static_cast<uint64_t>(epoch + 1))};
  uint64_t s = g();
  for (int i = 0; i < stream; ++i) s = g();
  return s;
}

// 0 .. n-1 in a uniformly random order (Fisher-Yates, from the last element down).
inline std::vector<int64_t> random_permutation(int64_t n, SplitMix64& g) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[g.below(static_cast<uint64_t>(i + 1))]);
  return order;
}

}  // namespace mpt::data::detail
