// tests/emu/test_reduce.cpp: warp/block reductions and the full-array sum kernel, emulated, against exact and float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/math/numerics.h"
#include "kernels/math/reduce.h"

namespace {

namespace math = mpt::kernels::math;
using mpt::kernels::cuda::launch;
using mpt::kernels::cuda::LaunchConfig;

// Small integers, so every sum is exact in float whatever the order.
float block_value(int block, int t) { return static_cast<float>((t * 13 + block * 7) % 97 - 40); }

// Three back-to-back reductions sharing one scratch buffer, as kernels do.
__global__ void block_allreduce_kernel(float* sums, float* maxes, float* sums_again) {
  __shared__ float scratch[math::kBlockReduceScratch];
  const int t = math::block_thread_index();
  const int g = blockIdx.x * math::block_threads() + t;
  const float v = block_value(blockIdx.x, t);
  sums[g] = math::block_allreduce(v, math::SumOp{}, 0.0f, scratch);
  maxes[g] = math::block_allreduce(v, math::MaxOp{}, -INFINITY, scratch);
  sums_again[g] = math::block_allreduce(2.0f * v, math::SumOp{}, 0.0f, scratch);
}

TEST(EmuReduce, BlockAllreduceGivesEveryThreadTheResultForAnyBlockSize) {
  for (const dim3 block : {dim3(1), dim3(7), dim3(32), dim3(33), dim3(40), dim3(64), dim3(100), dim3(257),
                           dim3(1000), dim3(1024), dim3(10, 3, 2)}) {
    const int n = static_cast<int>(block.x * block.y * block.z), blocks = 2;
    std::vector<float> sums(n * blocks), maxes(n * blocks), sums_again(n * blocks);
    ASSERT_EQ(launch(block_allreduce_kernel, LaunchConfig{dim3(blocks), block}, sums.data(), maxes.data(),
                     sums_again.data()),
              cudaSuccess);
    for (int b = 0; b < blocks; ++b) {
      double sum = 0, max = -INFINITY;
      for (int t = 0; t < n; ++t) {
        sum += block_value(b, t);
        max = std::max<double>(max, block_value(b, t));
      }
      for (int t = 0; t < n; ++t) {
        ASSERT_EQ(sums[b * n + t], sum) << "block size " << n << " block " << b << " thread " << t;
        ASSERT_EQ(maxes[b * n + t], max) << "block size " << n << " block " << b << " thread " << t;
        ASSERT_EQ(sums_again[b * n + t], 2 * sum) << "block size " << n << " block " << b << " thread " << t;
      }
    }
  }
}

__global__ void warp_allreduce_kernel(float* out) {
  const unsigned mask = math::warp_lanes_mask();
  out[threadIdx.x] = math::warp_allreduce(static_cast<float>(threadIdx.x), math::SumOp{}, mask);
}

TEST(EmuReduce, WarpAllreduceCoversAPartialLastWarp) {
  std::vector<float> out(45);
  ASSERT_EQ(launch(warp_allreduce_kernel, LaunchConfig{dim3(1), dim3(45)}, out.data()), cudaSuccess);
  for (int t = 0; t < 45; ++t) EXPECT_EQ(out[t], t < 32 ? 31 * 32 / 2 : (32 + 44) * 13 / 2) << t;
}

// Non-zero values of both signs with magnitudes over two decades.
std::vector<float> random_inputs(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> magnitude(0.01f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = (rng() & 1 ? 1.0f : -1.0f) * magnitude(rng);
  return x;
}

// Sizes around the vector width (4), the warp, the block (256 threads x 4) and several blocks.
const int64_t kSizes[] = {1, 3, 4, 5, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4099, 70001};

TEST(EmuReduce, SumMatchesAFloat64ReferenceWithinTheOrderIndependentBound) {
  for (int64_t n : kSizes) {
    for (int offset : {0, 1, 2, 3}) {  // offset 1..3 floats: misaligned start, scalar head and tail
      std::vector<float> storage = random_inputs(n + offset, static_cast<uint32_t>(n * 4 + offset));
      const float* x = storage.data() + offset;
      double ref = 0.25, abs_sum = 0.25;
      for (int64_t i = 0; i < n; ++i) {
        ref += x[i];
        abs_sum += std::fabs(x[i]);
      }
      float out = 0.25f;  // accumulates
      ASSERT_EQ(mpt::kernels::cuda::sum_accumulate(x, n, &out, nullptr), cudaSuccess);
      // Any summation order of n + 1 terms is within n * u * sum|x_i| of the exact sum (u = 2^-24).
      const double bound = static_cast<double>(n) * 0x1p-24 * abs_sum * (1 + 1e-6);
      EXPECT_NEAR(out, ref, bound) << "n " << n << " offset " << offset;
    }
  }
}

TEST(EmuReduce, SumOfSmallIntegersIsExact) {
  for (int64_t n : kSizes) {
    for (int offset : {0, 1}) {
      std::vector<float> storage(static_cast<size_t>(n + offset));
      int64_t ref = 0;
      for (size_t i = 0; i < storage.size(); ++i) {
        const int64_t k = static_cast<int64_t>(i * 2654435761u % 17) - 8;
        storage[i] = static_cast<float>(k == 0 ? 3 : k);  // non-zero, in [-8, 8]
        if (static_cast<int64_t>(i) >= offset) ref += static_cast<int64_t>(storage[i]);
      }
      float out = 0.0f;
      ASSERT_EQ(mpt::kernels::cuda::sum_accumulate(storage.data() + offset, n, &out, nullptr), cudaSuccess);
      EXPECT_EQ(out, static_cast<float>(ref)) << "n " << n << " offset " << offset;
    }
  }
}

// More elements than the grid's threads hold in one step (1024 blocks x 256 threads x 4 floats), so
// the grid-stride loop runs more than once.
TEST(EmuReduce, SumGridStrideLoopCoversLargeArrays) {
  constexpr int64_t n = 1024 * 256 * 4 + 4099;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7 - 3 == 0 ? 1 : i % 7 - 3);
  double ref = 0;
  for (float v : x) ref += v;
  float out = 0.0f;
  ASSERT_EQ(mpt::kernels::cuda::sum_accumulate(x.data() + 1, n - 1, &out, nullptr), cudaSuccess);
  EXPECT_EQ(out, static_cast<float>(ref - x[0]));
}

TEST(EmuReduce, SumOfBf16InputsAccumulatesInFloat) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{9}, int64_t{1000}, int64_t{2053}}) {
    for (int offset : {0, 3}) {  // 3 bf16 = 6 bytes: a misaligned start
      const std::vector<float> values = random_inputs(n + offset, static_cast<uint32_t>(n + 17 * offset));
      std::vector<mpt::bf16> storage(values.size());
      for (size_t i = 0; i < values.size(); ++i) storage[i] = mpt::bf16(values[i]);
      const mpt::bf16* x = storage.data() + offset;
      double ref = 0, abs_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += static_cast<float>(x[i]);
        abs_sum += std::fabs(static_cast<float>(x[i]));
      }
      float out = 0.0f;
      ASSERT_EQ(mpt::kernels::cuda::sum_accumulate(x, n, &out, nullptr), cudaSuccess);
      EXPECT_NEAR(out, ref, static_cast<double>(n) * 0x1p-24 * abs_sum * (1 + 1e-6)) << "n " << n;
    }
  }
}

TEST(EmuReduce, SumRejectsInvalidArgumentsWithoutTouchingTheOutput) {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float out = 5.0f;
  EXPECT_EQ(mpt::kernels::cuda::sum_accumulate(x, -1, &out, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::sum_accumulate(x, 8, static_cast<float*>(nullptr), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::sum_accumulate(static_cast<const float*>(nullptr), 8, &out, nullptr),
            cudaErrorInvalidValue);
  const float* misaligned = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x) + 2);
  EXPECT_EQ(mpt::kernels::cuda::sum_accumulate(misaligned, 4, &out, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::sum_accumulate(x, 0, &out, nullptr), cudaSuccess);
  EXPECT_EQ(out, 5.0f);
}

}  // namespace
