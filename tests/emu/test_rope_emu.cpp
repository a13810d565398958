// tests/emu/test_rope_emu.cpp: the CUDA rotary-embedding kernel under the emulation harness against the CPU kernel.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/rope.h"
#include "mpt/mpt.h"
#include "op_test.h"

namespace {

// Same pair math (kernels/math/rope.h) in the same order: identical bits, forward and inverse, with an offset.
template <class T>
void check(int64_t B, int64_t T_, int64_t H, int64_t D, int64_t position0) {
  const mpt::ops::RopeTable table = mpt::ops::rope_table(T_ + position0, D, 10000.0);
  const auto x = mpt::testing::random_tensor({B, T_, H, D}, mpt::dtype_of<T>(), 1 + D).template to_vector<T>();
  const auto c = table.cos.to_vector<float>(), s = table.sin.to_vector<float>();
  for (bool inverse : {false, true}) {
    const mpt::kernels::math::RopeShape shape{B * T_ * H, T_, H, D, D / 2, position0, inverse};
    std::vector<T> want(x.size()), got(x.size());
    mpt::kernels::cpu::rope(x.data(), want.data(), c.data(), s.data(), shape);
    ASSERT_EQ(mpt::kernels::cuda::rope(x.data(), got.data(), c.data(), s.data(), shape, nullptr), cudaSuccess);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(T)), 0)
        << "D=" << D << " position0=" << position0 << " inverse=" << inverse;
  }
}

}  // namespace

TEST(RopeEmu, MatchesCpuBitForBit) {
  for (int64_t D : {2, 16, 64}) {
    check<float>(2, 5, 3, D, 0);
    check<mpt::bf16>(2, 5, 3, D, 4);
    check<mpt::f16>(1, 7, 2, D, 1);
  }
}

TEST(RopeEmu, RejectsInvalidArguments) {
  float v = 0;
  const mpt::kernels::math::RopeShape odd{1, 1, 1, 3, 1, 0, false};
  EXPECT_EQ(mpt::kernels::cuda::rope(&v, &v, &v, &v, odd, nullptr), cudaErrorInvalidValue);
  const mpt::kernels::math::RopeShape ok{1, 1, 1, 2, 1, 0, false};
  EXPECT_EQ(mpt::kernels::cuda::rope<float>(nullptr, &v, &v, &v, ok, nullptr), cudaErrorInvalidValue);
}
