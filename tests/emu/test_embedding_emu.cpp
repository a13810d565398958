// tests/emu/test_embedding_emu.cpp: the CUDA embedding kernels under emulation against the CPU kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/cuda/embedding.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed).template to_vector<T>();
}

template <class I>
std::vector<I> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<I> ids(static_cast<size_t>(n));
  for (I& id : ids) id = static_cast<I>(rng() % static_cast<uint32_t>(vocab));
  return ids;
}

template <class T, class I>
void check_forward(int64_t channels, int64_t misalign) {
  const int64_t vocab = 11, n = 23;
  auto ids = random_ids<I>(n, vocab, 3);
  ids[5] = static_cast<I>(vocab);  // out of range: a NaN row on CUDA
  const auto table = random_values<T>(vocab * channels + misalign, 4);
  std::vector<T> got(static_cast<size_t>(n * channels + misalign));
  ASSERT_EQ(cuda::embedding_forward(ids.data(), table.data() + misalign, got.data() + misalign,
                                    cuda::EmbeddingShape{n, vocab, channels}, nullptr),
            cudaSuccess);
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t c = 0; c < channels; ++c) {
      const T g = got[static_cast<size_t>(misalign + p * channels + c)];
      if (p == 5) {
        EXPECT_TRUE(std::isnan(static_cast<float>(g))) << "position " << p;
      } else {
        EXPECT_EQ(std::memcmp(&g, &table[static_cast<size_t>(misalign + ids[p] * channels + c)], sizeof(T)), 0)
            << "position " << p << " channel " << c;
      }
    }
  }
}

template <class T>
void check_backward(int64_t n, int64_t vocab, int64_t channels) {
  const auto ids = random_ids<int64_t>(n, vocab, 5);
  cpu::EmbeddingBuckets b;
  ASSERT_EQ(cpu::embedding_buckets(ids.data(), n, vocab, b), -1);
  const auto dout = random_values<T>(n * channels, 6);
  const auto base = random_values<T>(vocab * channels, 7);
  auto want = base, got = base;
  cpu::embedding_backward(b, dout.data(), want.data(), channels);
  const cuda::DeviceBuckets view{b.tokens.data(), b.starts.data(), b.positions.data(),
                                 static_cast<int64_t>(b.tokens.size())};
  ASSERT_EQ(cuda::embedding_backward(view, dout.data(), got.data(), channels, nullptr), cudaSuccess);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(T)), 0)
      << "n=" << n << " vocab=" << vocab << " channels=" << channels;
}

}  // namespace

TEST(EmbeddingEmu, ForwardGathersRowsAndMarksBadIdsWithNaN) {
  for (int64_t misalign : {0, 1}) {
    for (int64_t channels : {8, 13, 130}) {
      check_forward<float, int32_t>(channels, misalign);
      check_forward<mpt::bf16, int64_t>(channels, misalign);
      check_forward<mpt::f16, int32_t>(channels, misalign);
    }
  }
}

TEST(EmbeddingEmu, BackwardMatchesCpuBitForBitWithRepeatedTokens) {
  check_backward<float>(300, 7, 19);     // ~43 repeats per token
  check_backward<float>(64, 40, 200);    // channels over one block
  check_backward<mpt::bf16>(500, 5, 33);
  check_backward<mpt::f16>(50, 100, 8);  // many tokens absent
}

TEST(EmbeddingEmu, RejectsInvalidArguments) {
  const int32_t ids[1] = {0};
  float table[4] = {}, out[4] = {};
  const cuda::EmbeddingShape negative{-1, 1, 4};
  EXPECT_EQ(cuda::embedding_forward(ids, table, out, negative, nullptr), cudaErrorInvalidValue);
  const cuda::EmbeddingShape one_row{1, 1, 4};
  const int32_t* no_ids = nullptr;
  EXPECT_EQ(cuda::embedding_forward(no_ids, table, out, one_row, nullptr), cudaErrorInvalidValue);
  const cuda::DeviceBuckets missing{nullptr, nullptr, nullptr, 1};
  EXPECT_EQ(cuda::embedding_backward<float>(missing, out, table, 4, nullptr), cudaErrorInvalidValue);
}
