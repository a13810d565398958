// tests/emu/test_harness.cpp: the CUDA emulation harness against CUDA's documented semantics (shuffles, votes, barriers, shared memory, atomics).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "kernels/cuda/launch.cuh"

namespace {

using mpt::kernels::cuda::launch;
using mpt::kernels::cuda::LaunchConfig;

enum Shuffle { kIdx, kUp, kDown, kXor };

int lane_value(int t) { return 1000 * t + 7; }

__global__ void shuffle_kernel(int* out, Shuffle kind, int arg, int width) {
  const int t = threadIdx.x;
  const int v = lane_value(t);
  const int a = kind == kIdx ? (t * 7 + arg) : arg;  // __shfl_sync's source differs lane by lane
  switch (kind) {
    case kIdx: out[t] = __shfl_sync(0xffffffffu, v, a, width); break;
    case kUp: out[t] = __shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(a), width); break;
    case kDown: out[t] = __shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(a), width); break;
    case kXor: out[t] = __shfl_xor_sync(0xffffffffu, v, a, width); break;
  }
}

// The lane a thread reads, written from the CUDA Programming Guide's description: the warp is split
// into groups of `width` lanes; indices are relative to the group (srcLane % width); up/down/xor
// return the caller's own value when the source lies outside (after, for xor) the caller's group.
int expected_shuffle(Shuffle kind, int t, int arg, int width) {
  const int warp_base = t / 32 * 32, lane = t % 32;
  const int group = lane / width * width, pos = lane % width;
  int src = lane;
  switch (kind) {
    case kIdx: src = group + ((t * 7 + arg) % width + width) % width; break;
    case kUp: src = pos - arg >= 0 ? lane - arg : lane; break;
    case kDown: src = pos + arg < width ? lane + arg : lane; break;
    case kXor: src = (lane ^ arg) < group + width ? (lane ^ arg) : lane; break;
  }
  return lane_value(warp_base + src);
}

TEST(CudaEmu, EveryShuffleVariantMatchesCudaSemanticsForEveryWidth) {
  constexpr int kThreads = 64;
  for (Shuffle kind : {kIdx, kUp, kDown, kXor}) {
    for (int width : {32, 16, 8, 4, 2, 1}) {
      for (int arg : {0, 1, 3, 5, 16, 31}) {
        std::vector<int> out(kThreads, -1);
        ASSERT_EQ(launch(shuffle_kernel, LaunchConfig{dim3(1), dim3(kThreads)}, out.data(), kind, arg, width),
                  cudaSuccess);
        for (int t = 0; t < kThreads; ++t) {
          ASSERT_EQ(out[t], expected_shuffle(kind, t, arg, width))
              << "kind " << kind << " width " << width << " arg " << arg << " thread " << t;
        }
      }
    }
  }
}

__global__ void shuffle_types_kernel(double* d, float* f, long long* ll) {
  const int t = threadIdx.x;
  d[t] = __shfl_xor_sync(0xffffffffu, 0.5 + t, 1);
  f[t] = __shfl_down_sync(0xffffffffu, 0.25f * static_cast<float>(t), 2);
  ll[t] = __shfl_sync(0xffffffffu, (1LL << 40) + t, 31 - t);
}

TEST(CudaEmu, ShufflesMoveEightByteAndFloatValuesBitExactly) {
  std::vector<double> d(32);
  std::vector<float> f(32);
  std::vector<long long> ll(32);
  ASSERT_EQ(launch(shuffle_types_kernel, LaunchConfig{dim3(1), dim3(32)}, d.data(), f.data(), ll.data()), cudaSuccess);
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(d[t], 0.5 + (t ^ 1));
    EXPECT_EQ(f[t], 0.25f * static_cast<float>(t + 2 < 32 ? t + 2 : t));
    EXPECT_EQ(ll[t], (1LL << 40) + (31 - t));
  }
}

__global__ void vote_kernel(unsigned* ballot, int* any, int* all) {
  const int t = threadIdx.x, warp = t / 32;
  // warp 0: every third lane; warp 1: no lane; warp 2: every lane.
  const int pred = warp == 0 ? t % 3 == 0 : warp == 2;
  ballot[t] = __ballot_sync(0xffffffffu, pred);
  any[t] = __any_sync(0xffffffffu, pred);
  all[t] = __all_sync(0xffffffffu, pred);
}

TEST(CudaEmu, BallotAnyAndAllVoteOverTheWarp) {
  std::vector<unsigned> ballot(96);
  std::vector<int> any(96), all(96);
  ASSERT_EQ(launch(vote_kernel, LaunchConfig{dim3(1), dim3(96)}, ballot.data(), any.data(), all.data()), cudaSuccess);
  unsigned every_third = 0;
  for (int l = 0; l < 32; l += 3) every_third |= 1u << l;
  for (int t = 0; t < 96; ++t) {
    const int warp = t / 32;
    EXPECT_EQ(ballot[t], warp == 0 ? every_third : (warp == 1 ? 0u : 0xffffffffu)) << t;
    EXPECT_EQ(any[t], warp != 1) << t;
    EXPECT_EQ(all[t], warp == 2) << t;
  }
}

// A block of 40 threads: warp 1 has 8 lanes, which must name exactly those in their masks.
__global__ void partial_warp_kernel(int* down, unsigned* ballot, int* synced) {
  const int t = threadIdx.x, lane = t % 32;
  const unsigned mask = t < 32 ? 0xffffffffu : 0xffu;
  const int lanes = t < 32 ? 32 : 8;
  const int src = lane + 1 < lanes ? lane + 1 : lane;
  down[t] = __shfl_sync(mask, lane_value(t), src);
  ballot[t] = __ballot_sync(mask, lane % 2);
  __syncwarp(mask);
  synced[t] = 1;
}

TEST(CudaEmu, PartialLastWarpWorksWithAMaskOfItsLanes) {
  std::vector<int> down(40), synced(40);
  std::vector<unsigned> ballot(40);
  ASSERT_EQ(launch(partial_warp_kernel, LaunchConfig{dim3(1), dim3(40)}, down.data(), ballot.data(), synced.data()),
            cudaSuccess);
  for (int t = 0; t < 40; ++t) {
    const int last = t < 32 ? 31 : 39;
    EXPECT_EQ(down[t], lane_value(t < last ? t + 1 : t)) << t;
    EXPECT_EQ(ballot[t], t < 32 ? 0xaaaaaaaau : 0xaau) << t;
    EXPECT_EQ(synced[t], 1);
  }
}

// Reverses each block's slice through shared memory; a 3-D block checks the linear thread order.
__global__ void reverse_kernel(const int* in, int* out) {
  __shared__ int buf[256];
  const int n = blockDim.x * blockDim.y * blockDim.z;
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int base = blockIdx.x * n;
  buf[t] = in[base + t];
  __syncthreads();
  const int mirrored = buf[n - 1 - t];
  __syncthreads();
  buf[t] = mirrored * 2;
  __syncthreads();
  out[base + t] = buf[(t + 1) % n];
}

TEST(CudaEmu, SyncthreadsOrdersSharedMemoryWithinEachBlock) {
  for (const dim3 block : {dim3(256), dim3(8, 4, 3), dim3(5, 7, 1)}) {
    const int n = static_cast<int>(block.x * block.y * block.z), blocks = 9;
    std::vector<int> in(n * blocks), out(n * blocks, -1);
    std::iota(in.begin(), in.end(), 100);
    ASSERT_EQ(launch(reverse_kernel, LaunchConfig{dim3(blocks), block}, in.data(), out.data()), cudaSuccess);
    for (int b = 0; b < blocks; ++b) {
      for (int t = 0; t < n; ++t) {
        const int next = (t + 1) % n;
        ASSERT_EQ(out[b * n + t], 2 * in[b * n + (n - 1 - next)]) << "block " << b << " thread " << t;
      }
    }
  }
}

__global__ void index_kernel(unsigned* out) {
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  unsigned* o = out + 4 * (b * nt + t);
  o[0] = threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16;
  o[1] = blockIdx.x | blockIdx.y << 8 | blockIdx.z << 16;
  o[2] = blockDim.x | blockDim.y << 8 | blockDim.z << 16;
  o[3] = gridDim.x | gridDim.y << 8 | gridDim.z << 16;
}

TEST(CudaEmu, BuiltInIndicesFollowCudasLinearOrder) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  std::vector<unsigned> out(4 * 12 * 24, 0xdeadbeef);
  ASSERT_EQ(launch(index_kernel, LaunchConfig{grid, block}, out.data()), cudaSuccess);
  for (unsigned b = 0; b < 12; ++b) {
    for (unsigned t = 0; t < 24; ++t) {
      const unsigned* o = &out[4 * (b * 24 + t)];
      EXPECT_EQ(o[0], (t % 4) | (t / 4 % 3) << 8 | (t / 12) << 16);
      EXPECT_EQ(o[1], (b % 3) | (b / 3 % 2) << 8 | (b / 6) << 16);
      EXPECT_EQ(o[2], 4u | 3u << 8 | 2u << 16);
      EXPECT_EQ(o[3], 3u | 2u << 8 | 2u << 16);
    }
  }
}

__global__ void dynamic_shared_kernel(const float* in, float* out, unsigned* poison, uintptr_t* address) {
  MPT_DYNAMIC_SHARED(float, smem);
  const int t = threadIdx.x, n = blockDim.x;
  unsigned before;
  std::memcpy(&before, &smem[t], sizeof before);
  poison[blockIdx.x * n + t] = before;
  if (t == 0) address[blockIdx.x] = reinterpret_cast<uintptr_t>(smem);
  smem[t] = in[blockIdx.x * n + t];
  smem[n + t] = 1.0f;  // the second half of a 2n-float allocation
  __syncthreads();
  out[blockIdx.x * n + t] = smem[n - 1 - t] + smem[2 * n - 1 - t];
}

TEST(CudaEmu, DynamicSharedMemoryIsPerBlockAlignedAndPoisoned) {
  constexpr int kThreads = 96, kBlocks = 5;
  std::vector<float> in(kThreads * kBlocks), out(kThreads * kBlocks);
  std::vector<unsigned> poison(kThreads * kBlocks);
  std::vector<uintptr_t> address(kBlocks);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.5f * static_cast<float>(i);
  const LaunchConfig config{dim3(kBlocks), dim3(kThreads), 2 * kThreads * sizeof(float)};
  ASSERT_EQ(launch(dynamic_shared_kernel, config, in.data(), out.data(), poison.data(), address.data()), cudaSuccess);
  for (int b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(address[b] % 16, 0u);
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(poison[b * kThreads + t], 0xffffffffu) << "uninitialised shared memory should read as NaN";
      EXPECT_EQ(out[b * kThreads + t], in[b * kThreads + kThreads - 1 - t] + 1.0f);
    }
  }
}

__global__ void large_dynamic_shared_kernel(int* out) {
  MPT_DYNAMIC_SHARED(int, smem);
  constexpr int kInts = 200 * 1024 / 4;
  for (int i = threadIdx.x; i < kInts; i += blockDim.x) smem[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = smem[kInts - 1];
}

TEST(CudaEmu, DynamicSharedMemoryUpToTheHopperLimitLaunches) {
  int out = 0;
  ASSERT_EQ(launch(large_dynamic_shared_kernel, LaunchConfig{dim3(1), dim3(128), 200 * 1024}, &out), cudaSuccess);
  EXPECT_EQ(out, 200 * 1024 / 4 - 1);
}

__global__ void atomics_kernel(int* counter, int* old_values, float* fsum, unsigned* usum, int* imax) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  old_values[g] = atomicAdd(counter, 1);
  atomicAdd(fsum, 0.5f);
  atomicAdd(usum, 3u);
  atomicMax(imax, (g * 37) % 1001);
}

TEST(CudaEmu, AtomicsAreAtomicAcrossBlocksOnDifferentOsThreads) {
  constexpr int kBlocks = 16, kThreads = 64, kTotal = kBlocks * kThreads;
  int counter = 0, imax = -1;
  float fsum = 0.0f;
  unsigned usum = 0;
  std::vector<int> old_values(kTotal, -1);
  ASSERT_EQ(launch(atomics_kernel, LaunchConfig{dim3(kBlocks), dim3(kThreads)}, &counter, old_values.data(), &fsum,
                   &usum, &imax),
            cudaSuccess);
  EXPECT_EQ(counter, kTotal);
  EXPECT_EQ(fsum, 0.5f * kTotal);  // exact: every partial sum is a multiple of 0.5 below 2^23
  EXPECT_EQ(usum, 3u * kTotal);
  int expected_max = 0;
  for (int g = 0; g < kTotal; ++g) expected_max = std::max(expected_max, (g * 37) % 1001);
  EXPECT_EQ(imax, expected_max);
  std::sort(old_values.begin(), old_values.end());
  for (int i = 0; i < kTotal; ++i) ASSERT_EQ(old_values[i], i) << "atomicAdd returned a duplicate old value";
}

__global__ void vector_copy_kernel(const float4* in, float4* out, const uint4* uin, uint4* uout) {
  const int t = threadIdx.x;
  const float4 v = in[t];
  out[t] = make_float4(v.w, v.z, v.y, v.x);
  const uint4 u = uin[t];
  uout[t] = make_uint4(u.x + 1, u.y + 1, u.z + 1, u.w + 1);
}

TEST(CudaEmu, SixteenByteVectorTypesHaveCudasLayout) {
  static_assert(sizeof(float4) == 16 && alignof(float4) == 16 && sizeof(uint4) == 16 && alignof(uint4) == 16);
  static_assert(sizeof(int4) == 16 && alignof(int4) == 16 && sizeof(float2) == 8 && alignof(float2) == 8);
  static_assert(sizeof(uint3) == 12 && sizeof(dim3) == 12);
  std::vector<float4> in(32), out(32);
  std::vector<uint4> uin(32), uout(32);
  for (int t = 0; t < 32; ++t) {
    in[t] = make_float4(t, t + 0.25f, t + 0.5f, t + 0.75f);
    uin[t] = make_uint4(4 * t, 4 * t + 1, 4 * t + 2, 4 * t + 3);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(in.data()) % 16, 0u);
  ASSERT_EQ(launch(vector_copy_kernel, LaunchConfig{dim3(1), dim3(32)}, in.data(), out.data(), uin.data(), uout.data()),
            cudaSuccess);
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(out[t].x, t + 0.75f);
    EXPECT_EQ(out[t].w, static_cast<float>(t));
    EXPECT_EQ(uout[t].x, 4u * t + 1);
    EXPECT_EQ(uout[t].w, 4u * t + 4);
  }
}

// Block b marks itself started, then waits for the other block: only possible if they run at once.
__global__ void concurrency_kernel(int* started, int* saw_other, std::thread::id* ids) {
  const int b = blockIdx.x;
  ids[b] = std::this_thread::get_id();
  std::atomic_ref<int>(started[b]).store(1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::atomic_ref<int>(started[1 - b]).load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  saw_other[b] = std::atomic_ref<int>(started[1 - b]).load();
}

TEST(CudaEmu, BlocksRunConcurrentlyOnSeveralOsThreads) {
  ASSERT_GE(mpt::cuda_emu::worker_threads(), 2u);
  int started[2] = {0, 0}, saw_other[2] = {0, 0};
  std::thread::id ids[2];
  ASSERT_EQ(launch(concurrency_kernel, LaunchConfig{dim3(2), dim3(1)}, started, saw_other, ids), cudaSuccess);
  EXPECT_EQ(saw_other[0], 1);
  EXPECT_EQ(saw_other[1], 1);
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[0], std::this_thread::get_id());
}

__global__ void arguments_kernel(long long a, double b, int* out) { out[0] = static_cast<int>(a + b); }

TEST(CudaEmu, ArgumentsConvertToTheKernelsParameterTypes) {
  int out = 0;
  ASSERT_EQ(launch(arguments_kernel, LaunchConfig{dim3(1), dim3(1)}, 40, 2.5f, &out), cudaSuccess);
  EXPECT_EQ(out, 42);
}

}  // namespace
