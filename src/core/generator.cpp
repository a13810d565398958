// src/core/generator.cpp: Philox stream bookkeeping (the counters a draw consumes).
#include "mpt/core/generator.h"

#include "kernels/math/philox.h"
#include "mpt/core/error.h"

namespace mpt {

uint64_t Generator::reserve(int64_t n) {
  MPT_CHECK(n >= 0, "[generator] cannot reserve {} numbers", n);
  const uint64_t start = offset_;
  offset_ += kernels::math::philox_offset_increment(n);
  return start;
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

}  // namespace mpt
