// mpt/core/generator.h: the Philox random stream state (seed, offset) that tensors draw from.
#pragma once

#include <cstdint>

namespace mpt {

// A counter-based stream: a draw of n numbers uses counters [offset, offset + increment(n)) under
// `seed`, so CPU and CUDA produce the same numbers and the state is just two integers (checkpointable).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserves the counters a draw of n numbers needs and returns the offset it starts at.
  uint64_t reserve(int64_t n);

 private:
  uint64_t seed_;
  uint64_t offset_;
};

// The process-wide default generator (not thread-safe: give each thread its own Generator).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mpt
