// kernels/math/philox.h: the Philox4x32-10 counter-based generator (Salmon et al., SC'11), same code on CPU and GPU.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"

namespace mpt::kernels::math {

// Four 32-bit words: a Philox counter on input, four random words on output.
struct Philox4x32 {
  uint32_t v[4];
};

namespace philox_detail {

inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

MPT_HD MPT_INLINE uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

MPT_HD MPT_INLINE Philox4x32 round(Philox4x32 c, uint32_t k0, uint32_t k1) {
  const uint32_t hi0 = mulhi(kMul0, c.v[0]), lo0 = kMul0 * c.v[0];
  const uint32_t hi1 = mulhi(kMul1, c.v[2]), lo1 = kMul1 * c.v[2];
  return {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

}  // namespace philox_detail

// The Philox4x32 block function with 10 rounds, as in Random123's philox4x32_R(10, ctr, key):
// the key is bumped by the Weyl constants between rounds.
MPT_HD MPT_INLINE Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key0 += philox_detail::kWeyl0;
      key1 += philox_detail::kWeyl1;
    }
    counter = philox_detail::round(counter, key0, key1);
  }
  return counter;
}

// The project's mapping of (seed, counter) onto Philox: key = (seed low word, seed high word),
// counter = (counter low word, counter high word, 0, 0). Each call yields four random words.
MPT_HD MPT_INLINE Philox4x32 philox(uint64_t seed, uint64_t counter) {
  const Philox4x32 c{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}};
  return philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Word j (0..3) of w, selected without indexing the array with a runtime value, so that a kernel
// using it keeps w in registers (a dynamic index would put w in local memory).
MPT_HD MPT_INLINE uint32_t philox_word(const Philox4x32& w, int j) {
  return j == 0 ? w.v[0] : j == 1 ? w.v[1] : j == 2 ? w.v[2] : w.v[3];
}

// Offset semantics (the RNG state is the two integers (seed, offset)):
// element i of a draw that starts at `offset` is word (i % 4) of philox(seed, offset + i / 4).
// A draw of n elements therefore consumes ceil(n / 4) counters, and the next draw starts at
// offset + philox_offset_increment(n). Consequently a draw of n elements at offset o equals
// elements [4 * (o - o0), 4 * (o - o0) + n) of one larger draw started at o0 <= o.
MPT_HD MPT_INLINE constexpr uint64_t philox_offset_increment(int64_t n) {
  return n <= 0 ? 0u : (static_cast<uint64_t>(n) + 3u) / 4u;
}

}  // namespace mpt::kernels::math
