// tests/emu/test_embedding_emu.cpp: the CUDA embedding kernels (lookup, device buckets, ordered sums, error reports)
// under emulation against the CPU kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/cuda/embedding.h"
#include "kernels/math/numerics.h"
#include "kernels/math/opmath.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;
using mpt::kernels::DeviceErrorOp;
using mpt::kernels::DeviceErrorRecord;
using mpt::kernels::DeviceErrorSink;

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
  ids[5] = static_cast<I>(vocab);  // out of range: a NaN row on CUDA, reported
  ids[17] = static_cast<I>(-2);
  const auto table = random_values<T>(vocab * channels + misalign, 4);
  std::vector<T> got(static_cast<size_t>(n * channels + misalign));
  DeviceErrorRecord record{};
  const DeviceErrorSink sink{&record, DeviceErrorOp::Embedding, 1};
  ASSERT_EQ(cuda::embedding_forward(ids.data(), table.data() + misalign, got.data() + misalign,
                                    cuda::EmbeddingShape{n, vocab, channels}, sink, nullptr),
            cudaSuccess);
  EXPECT_EQ(record.op, static_cast<int32_t>(DeviceErrorOp::Embedding));
  EXPECT_EQ(record.position, 5);
  EXPECT_EQ(record.value, vocab);
  EXPECT_EQ(record.bound, vocab);
  EXPECT_EQ(record.lock, 0u);
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t c = 0; c < channels; ++c) {
      const T g = got[static_cast<size_t>(misalign + p * channels + c)];
      if (p == 5 || p == 17) {
        EXPECT_TRUE(std::isnan(static_cast<float>(g))) << "position " << p;
      } else {
        EXPECT_EQ(std::memcmp(&g, &table[static_cast<size_t>(misalign + ids[p] * channels + c)], sizeof(T)), 0)
            << "position " << p << " channel " << c;
      }
    }
  }
}

struct Buckets {
  std::vector<int64_t> starts;     // vocab + 1
  std::vector<int64_t> positions;  // starts[vocab] of them are meaningful
};

// The device builder with an explicit chunk length (0: embedding_bucket_plan's), scratch filled with garbage.
template <class I>
Buckets device_buckets(const std::vector<I>& ids, int64_t vocab, int64_t chunk, DeviceErrorSink errors = {}) {
  const auto n = static_cast<int64_t>(ids.size());
  cuda::BucketPlan plan = cuda::embedding_bucket_plan(n, vocab);
  if (chunk > 0) plan = {n, vocab, chunk, (n + chunk - 1) / chunk};
  std::vector<int32_t> histogram(static_cast<size_t>(plan.chunks * vocab), 0x5A5A5A5A);
  Buckets b{std::vector<int64_t>(static_cast<size_t>(vocab + 1), -7), std::vector<int64_t>(ids.size(), -7)};
  const cuda::BucketArgs<I> args{ids.data(), plan, histogram.data(), b.starts.data(), b.positions.data(), errors};
  EXPECT_EQ(cuda::embedding_buckets(args, nullptr), cudaSuccess);
  return b;
}

// The CPU's buckets (distinct tokens only) spread over every row: absent tokens get empty ranges.
Buckets cpu_buckets_by_row(const cpu::EmbeddingBuckets& c, int64_t vocab) {
  Buckets b{std::vector<int64_t>(static_cast<size_t>(vocab + 1)), c.positions};
  size_t k = 0;
  for (int64_t v = 0; v <= vocab; ++v) {
    while (k < c.tokens.size() && c.tokens[k] < v) ++k;
    b.starts[static_cast<size_t>(v)] = c.starts[k];
  }
  return b;
}

template <class I>
void check_buckets(const std::vector<I>& ids, int64_t vocab, int64_t chunk, const std::string& what) {
  SCOPED_TRACE(what + " n=" + std::to_string(ids.size()) + " vocab=" + std::to_string(vocab) +
               " chunk=" + std::to_string(chunk));
  cpu::EmbeddingBuckets c;
  ASSERT_EQ(cpu::embedding_buckets(ids.data(), static_cast<int64_t>(ids.size()), vocab, c), -1);
  const Buckets want = cpu_buckets_by_row(c, vocab);
  const Buckets got = device_buckets(ids, vocab, chunk);
  EXPECT_EQ(got.starts, want.starts);
  EXPECT_EQ(got.positions, want.positions);
}

template <class T>
void check_backward(int64_t n, int64_t vocab, int64_t channels, int64_t chunk = 0) {
  const auto ids = random_ids<int64_t>(n, vocab, 5);
  cpu::EmbeddingBuckets b;
  ASSERT_EQ(cpu::embedding_buckets(ids.data(), n, vocab, b), -1);
  const auto dout = random_values<T>(n * channels, 6);
  auto base = random_values<T>(vocab * channels, 7);
  for (size_t i = 0; i < base.size(); i += 3) base[i] = mpt::kernels::math::store<T>(-0.0f);  // kept by absent rows
  auto want = base, got = base;
  cpu::embedding_backward(b, dout.data(), want.data(), channels);
  const Buckets d = device_buckets(ids, vocab, chunk);
  const cuda::DeviceBuckets view{d.starts.data(), d.positions.data(), vocab};
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

TEST(EmbeddingEmu, DeviceBucketsEqualTheCpusStableCountingSort) {
  for (int64_t chunk : {0, 64, 100, 256, 300}) {
    check_buckets(random_ids<int32_t>(1000, 7, 11), 7, chunk, "random, repeated");
    check_buckets(random_ids<int64_t>(1000, 300, 12), 300, chunk, "random i64");
    check_buckets(std::vector<int32_t>(700, 3), 5, chunk, "all equal");
    check_buckets(std::vector<int64_t>(513, 0), 1, chunk, "vocab 1");
    check_buckets(random_ids<int32_t>(40, 5000, 13), 5000, chunk, "vocab larger than tokens");
    check_buckets(std::vector<int32_t>{}, 9, chunk, "empty");
    check_buckets(std::vector<int64_t>{}, 0, chunk, "empty, vocab 0");
  }
  std::vector<int32_t> descending(600);
  for (size_t i = 0; i < descending.size(); ++i) descending[i] = static_cast<int32_t>((599 - i) / 3);
  check_buckets(descending, 200, 128, "descending runs");
  check_buckets(random_ids<int64_t>(5000, 3, 14), 3, 0, "default plan, 3 chunks");
}

TEST(EmbeddingEmu, BucketPlanBoundsTheHistogram) {
  const cuda::BucketPlan small = cuda::embedding_bucket_plan(1000, 50257);
  EXPECT_EQ(small.chunks, 1);
  for (int64_t vocab : {int64_t{50257}, int64_t{131072}, int64_t{3}}) {
    const cuda::BucketPlan p = cuda::embedding_bucket_plan(int64_t{1} << 20, vocab);
    EXPECT_GE(p.chunk, 2048);
    EXPECT_EQ(p.chunks, ((int64_t{1} << 20) + p.chunk - 1) / p.chunk);
    EXPECT_LE(p.chunks * vocab, std::max<int64_t>(int64_t{1} << 24, vocab)) << vocab;
  }
  EXPECT_EQ(cuda::embedding_bucket_plan(0, 10).chunks, 0);
}

TEST(EmbeddingEmu, BackwardMatchesCpuBitForBitWithRepeatedTokens) {
  check_backward<float>(300, 7, 19);       // ~43 repeats per token
  check_backward<float>(300, 7, 19, 32);   // ten chunks
  check_backward<float>(64, 40, 200);      // channels over one block
  check_backward<mpt::bf16>(500, 5, 33, 100);
  check_backward<mpt::f16>(50, 100, 8);    // many tokens absent: their rows (and -0s) untouched
}

// The smallest bad position of the first reporting launch is kept, whatever the scheduling; later launches do not
// overwrite it until the host clears the record.
TEST(EmbeddingEmu, BadIdsAreReportedDeterministically) {
  auto ids = random_ids<int32_t>(900, 10, 15);
  ids[700] = 10;
  ids[333] = -1;
  ids[334] = 12;
  DeviceErrorRecord record{};
  const Buckets b = device_buckets(ids, 10, 64, DeviceErrorSink{&record, DeviceErrorOp::EmbeddingBackward, 7});
  EXPECT_EQ(record.op, static_cast<int32_t>(DeviceErrorOp::EmbeddingBackward));
  EXPECT_EQ(record.launch, 7u);
  EXPECT_EQ(record.position, 333);
  EXPECT_EQ(record.value, -1);
  EXPECT_EQ(record.bound, 10);
  EXPECT_EQ(record.lock, 0u);
  // The good positions are still bucketed (bad ones left out).
  EXPECT_EQ(b.starts[10], 897);
  std::vector<int32_t> later = ids;
  later[2] = 99;
  device_buckets(later, 10, 64, DeviceErrorSink{&record, DeviceErrorOp::EmbeddingBackward, 8});
  EXPECT_EQ(record.launch, 7u);
  EXPECT_EQ(record.position, 333);
  // Reports without a record are dropped.
  device_buckets(ids, 10, 64);
}

TEST(EmbeddingEmu, RejectsInvalidArguments) {
  const int32_t ids[1] = {0};
  float table[4] = {}, out[4] = {};
  const cuda::EmbeddingShape negative{-1, 1, 4};
  EXPECT_EQ(cuda::embedding_forward(ids, table, out, negative, {}, nullptr), cudaErrorInvalidValue);
  const cuda::EmbeddingShape one_row{1, 1, 4};
  const int32_t* no_ids = nullptr;
  EXPECT_EQ(cuda::embedding_forward(no_ids, table, out, one_row, {}, nullptr), cudaErrorInvalidValue);
  const cuda::DeviceBuckets missing{nullptr, nullptr, 1};
  EXPECT_EQ(cuda::embedding_backward<float>(missing, out, table, 4, nullptr), cudaErrorInvalidValue);
  int64_t starts[2] = {}, positions[1] = {};
  int32_t histogram[1] = {};
  const cuda::BucketArgs<int32_t> inconsistent{ids, {1, 1, 2048, 2}, histogram, starts, positions, {}};
  EXPECT_EQ(cuda::embedding_buckets(inconsistent, nullptr), cudaErrorInvalidValue);
  const cuda::BucketArgs<int32_t> no_starts{ids, cuda::embedding_bucket_plan(1, 1), histogram, nullptr, positions, {}};
  EXPECT_EQ(cuda::embedding_buckets(no_starts, nullptr), cudaErrorInvalidValue);
}
