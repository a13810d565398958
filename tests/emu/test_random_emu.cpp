// tests/emu/test_random_emu.cpp: the CUDA fill kernels under the emulation harness equal the CPU fills bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/random.h"
#include "kernels/cuda/random.h"
#include "kernels/math/numerics.h"
#include "kernels/math/philox.h"

// Launches are synchronous under the emulation harness, so results are read right after the call.
namespace {

namespace cpu = mpt::kernels::cpu;
namespace gpu = mpt::kernels::cuda;

struct Case {
  int64_t n;
  uint64_t seed;
  uint64_t offset;
};

// Odd sizes (tails of 1, 2 and 3 elements), more than one block, nonzero and 32-bit-carrying offsets.
constexpr Case kCases[] = {
    {1, 3, 0}, {1000, 1, 0}, {1001, 0x123456789abcdefull, 17}, {3333, 42, 0xfffffffeull}, {5003, 7, 1000003},
};

template <class T>
uint64_t bits_of(T x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof x);
  return b;
}

template <class T>
void expect_same_bits(const std::vector<T>& want, const std::vector<T>& got, const char* what, const Case& c) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(bits_of(want[i]), bits_of(got[i])) << what << " n=" << c.n << " offset=" << c.offset << " i=" << i;
}

template <class T>
void check_fills() {
  for (const Case& c : kCases) {
    std::vector<T> want(c.n), got(c.n);
    cpu::fill_uniform(want.data(), c.n, c.seed, c.offset, -1.5f, 2.5f);
    ASSERT_EQ(gpu::fill_uniform(got.data(), c.n, c.seed, c.offset, -1.5f, 2.5f, nullptr), cudaSuccess);
    expect_same_bits(want, got, "uniform", c);

    cpu::fill_normal(want.data(), c.n, c.seed, c.offset, 0.25f, 3.0f);
    ASSERT_EQ(gpu::fill_normal(got.data(), c.n, c.seed, c.offset, 0.25f, 3.0f, nullptr), cudaSuccess);
    expect_same_bits(want, got, "normal", c);
  }
}

TEST(RandomEmu, FloatFillsMatchCpuBitForBit) { check_fills<float>(); }
TEST(RandomEmu, DoubleFillsMatchCpuBitForBit) { check_fills<double>(); }
TEST(RandomEmu, F16FillsMatchCpuBitForBit) { check_fills<mpt::f16>(); }
TEST(RandomEmu, BF16FillsMatchCpuBitForBit) { check_fills<mpt::bf16>(); }

TEST(RandomEmu, KernelWritesExactlyNElements) {
  // Guard values past the end stay untouched for every tail length.
  for (int64_t n : {5, 6, 7, 8}) {
    std::vector<float> buf(n + 8, -7.0f);
    ASSERT_EQ(gpu::fill_normal(buf.data(), n, 1, 2, 0.0f, 1.0f, nullptr), cudaSuccess);
    for (int64_t i = n; i < n + 8; ++i) EXPECT_EQ(buf[i], -7.0f) << "n=" << n << " i=" << i;
    EXPECT_NE(buf[n - 1], -7.0f);
  }
  EXPECT_EQ(gpu::fill_uniform(static_cast<float*>(nullptr), 0, 1, 2, 0.0f, 1.0f, nullptr), cudaSuccess);
}

TEST(RandomEmu, OffsetAdvanceChainsDraws) {
  // Two consecutive draws (the second at offset + philox_offset_increment(n1)) equal one CPU draw when
  // n1 is a multiple of 4.
  const int64_t n1 = 1200, n2 = 777;
  std::vector<float> a(n1), b(n2), whole(n1 + n2);
  ASSERT_EQ(gpu::fill_uniform(a.data(), n1, 9, 100, 0.0f, 1.0f, nullptr), cudaSuccess);
  const uint64_t next = 100 + mpt::kernels::math::philox_offset_increment(n1);
  ASSERT_EQ(gpu::fill_uniform(b.data(), n2, 9, next, 0.0f, 1.0f, nullptr), cudaSuccess);
  cpu::fill_uniform(whole.data(), n1 + n2, 9, 100, 0.0f, 1.0f);
  for (int64_t i = 0; i < n1; ++i) ASSERT_EQ(a[i], whole[i]) << i;
  for (int64_t i = 0; i < n2; ++i) ASSERT_EQ(b[i], whole[n1 + i]) << i;
}

}  // namespace
