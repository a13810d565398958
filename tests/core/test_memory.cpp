// tests/core/test_memory.cpp: the pooled CPU allocator, Storage, copy_bytes, and the CUDA pool (GPU only).
#include <gtest/gtest.h>

#include "test_util.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "../../src/core/cpu_allocator.h"
#include "mpt/core/device.h"
#include "mpt/core/error.h"
#include "mpt/core/memory.h"
#include "mpt/core/memory_peak.h"
#include "mpt/core/tensor.h"

using mpt::CpuAllocator;
using mpt::Device;
using mpt::Storage;

namespace {

using mpt::testing::contains;
using mpt::testing::error_message;

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(CpuAllocator, StorageIs64ByteAlignedForManySizes) {
  std::vector<std::shared_ptr<Storage>> live;
  for (size_t n = 0; n <= 4100; n += (n < 130 ? 1 : 61)) {
    auto s = Storage::allocate(n, Device::cpu());
    EXPECT_EQ(s->nbytes(), n);
    EXPECT_EQ(s->device(), Device::cpu());
    if (n == 0) {
      EXPECT_EQ(s->data(), nullptr);
    } else {
      ASSERT_NE(s->data(), nullptr);
      EXPECT_TRUE(aligned64(s->data())) << n;
      std::memset(s->data(), 0xAB, n);  // the whole block is writable (ASan checks the bounds)
    }
    live.push_back(std::move(s));
  }
  for (size_t n : {size_t{1} << 20, (size_t{3} << 20) + 7}) {
    auto s = Storage::allocate(n, Device::cpu());
    EXPECT_TRUE(aligned64(s->data()));
    std::memset(s->data(), 1, n);
  }
}

TEST(CpuAllocator, FreedBlockIsReusedThroughStorage) {
  auto first = Storage::allocate(1000, Device::cpu());
  const mpt::MemoryStats before = mpt::memory_stats(Device::cpu());
  first.reset();
  const mpt::MemoryStats freed = mpt::memory_stats(Device::cpu());
  EXPECT_EQ(freed.current_bytes, before.current_bytes - 1000);
  EXPECT_EQ(freed.cached_bytes, before.cached_bytes + 1024) << "rounded to 512 bytes";
  auto second = Storage::allocate(1000, Device::cpu());
  const mpt::MemoryStats after = mpt::memory_stats(Device::cpu());
  EXPECT_EQ(after.reused, before.reused + 1);
  EXPECT_EQ(after.allocations, before.allocations + 1);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes) << "no new segment";
}

constexpr int64_t kMiB = int64_t{1} << 20;

// The statistics over detail::BlockCache: requests up to 1 MiB share a 2 MiB segment (reserved), the bytes no live
// block holds are cached, a freed block merges back and serves the next request, whatever its size.
TEST(CpuAllocator, CurrentPeakReservedArithmetic) {
  CpuAllocator a(size_t{1} << 30);
  void* p100 = a.allocate(100);
  mpt::MemoryStats s = a.stats();
  EXPECT_EQ(s.current_bytes, 100);
  EXPECT_EQ(s.peak_bytes, 100);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.cached_bytes, 2 * kMiB - 512);
  EXPECT_EQ(s.reused, 0) << "a new segment";
  void* p300 = a.allocate(300);
  EXPECT_EQ(static_cast<char*>(p300), static_cast<char*>(p100) + 512) << "split off the same segment";
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 400);
  EXPECT_EQ(s.peak_bytes, 400);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.cached_bytes, 2 * kMiB - 1024);
  EXPECT_EQ(s.reused, 1);
  a.free(p100, 100);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 300);
  EXPECT_EQ(s.peak_bytes, 400);
  EXPECT_EQ(s.cached_bytes, 2 * kMiB - 512);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, 300);
  void* p50 = a.allocate(50);  // the best fit: the 512-byte block p100 left
  EXPECT_EQ(p50, p100);
  void* big = a.allocate(3 * kMiB);  // a large request: a 20 MiB segment of the large pool
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 350 + 3 * kMiB);
  EXPECT_EQ(s.peak_bytes, 350 + 3 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 22 * kMiB);
  EXPECT_EQ(s.allocations, 4);
  EXPECT_EQ(s.reused, 2);
  a.free(p50, 50);
  a.free(p300, 300);
  a.free(big, 3 * kMiB);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.peak_bytes, 350 + 3 * kMiB);
  EXPECT_EQ(s.cached_bytes, 22 * kMiB);
  EXPECT_EQ(s.reserved_bytes, s.cached_bytes);
}

// The reserve's high-water mark: the most held (segments), not falling when segments go back, and started again at
// the current reserve by reset_peak.
TEST(CpuAllocator, ReservedPeakIsTheMostHeldSinceAReset) {
  CpuAllocator a(size_t{1} << 30);
  void* small = a.allocate(100);
  void* large = a.allocate(12 * kMiB);  // a segment of its own
  EXPECT_EQ(a.reserved_peak(), 14 * kMiB);
  a.free(large, 12 * kMiB);  // cached: still reserved
  EXPECT_EQ(a.stats().reserved_bytes, 14 * kMiB);
  void* other = a.allocate(11 * kMiB);  // fits the freed 12 MiB block: no new segment
  EXPECT_EQ(a.stats().reserved_bytes, 14 * kMiB);
  a.free(other, 11 * kMiB);
  a.empty_cache();  // the wholly free 12 MiB segment goes back; the small one holds `small`
  EXPECT_EQ(a.stats().reserved_bytes, 2 * kMiB);
  EXPECT_EQ(a.reserved_peak(), 14 * kMiB);
  a.reset_peak();
  EXPECT_EQ(a.reserved_peak(), 2 * kMiB);
  a.free(small, 100);
  EXPECT_EQ(a.reserved_peak(), 2 * kMiB);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0);
}

// The process allocator's, through the public call.
TEST(CpuAllocator, ReservedPeakBytesFollowsTheProcessPool) {
  mpt::reset_peak_memory_stats(Device::cpu());
  const int64_t before = mpt::reserved_peak_bytes(Device::cpu());
  EXPECT_EQ(before, mpt::memory_stats(Device::cpu()).reserved_bytes);
  {
    // Larger than everything cached: the reserve grows by a segment of at least its size.
    const int64_t n = (mpt::memory_stats(Device::cpu()).cached_bytes / kMiB + 64) * kMiB;
    const mpt::Tensor big = mpt::Tensor::empty({n / 4}, mpt::DType::F32, Device::cpu());
    EXPECT_GE(mpt::reserved_peak_bytes(Device::cpu()), before + n);
    EXPECT_GE(mpt::reserved_peak_bytes(Device::cpu()), mpt::memory_stats(Device::cpu()).reserved_bytes);
  }
  EXPECT_GE(mpt::reserved_peak_bytes(Device::cpu()), mpt::memory_stats(Device::cpu()).reserved_bytes);
}

TEST(CpuAllocator, EmptyCacheReleasesEveryWhollyFreeSegment) {
  CpuAllocator a(size_t{1} << 30);
  void* keep = a.allocate(4096);
  for (size_t n : {size_t{10}, size_t{5} << 20, size_t{30} << 20}) a.free(a.allocate(n), n);
  mpt::MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB + 20 * kMiB + 30 * kMiB);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB) << "the small segment holds `keep`";
  EXPECT_EQ(s.cached_bytes, 2 * kMiB - 4096);
  EXPECT_EQ(s.current_bytes, 4096);
  a.free(a.allocate(6 * kMiB), 6 * kMiB);
  EXPECT_EQ(a.stats().reused, 1) << "only the 10-byte request reused memory (the kept segment's)";
  a.free(keep, 4096);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 0);
}

TEST(CpuAllocator, CacheLimitBoundsThePool) {
  CpuAllocator a(size_t{3} << 20);
  void* x = a.allocate(600);
  a.free(x, 600);  // 2 MiB free: within the 3 MiB limit, kept
  mpt::MemoryStats s = a.stats();
  EXPECT_EQ(s.cached_bytes, 2 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  void* y = a.allocate(12 * kMiB);
  a.free(y, 12 * kMiB);  // 14 MiB free: over the limit, every wholly free segment goes back
  s = a.stats();
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
}

// What the pool is for: memory freed as one size serves requests of another (a step's activations, freed in
// backward, become its gradients), where a pool of exact size classes would ask the system for more.
TEST(CpuAllocator, MemoryFreedAsOneSizeServesAnother) {
  CpuAllocator a(size_t{1} << 30);
  void* p = a.allocate(16 * kMiB);
  a.free(p, 16 * kMiB);
  void* q = a.allocate(5 * kMiB);
  void* r = a.allocate(7 * kMiB);
  EXPECT_EQ(a.stats().reused, 2);
  EXPECT_EQ(a.stats().reserved_bytes, 16 * kMiB);
  EXPECT_EQ(q, p);
  a.free(q, 5 * kMiB);
  a.free(r, 7 * kMiB);
}

TEST(CpuAllocator, ThreadedStress) {
  CpuAllocator a(size_t{4} << 20);
  constexpr int kThreads = 4, kIters = 3000;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::uniform_int_distribution<size_t> size(1, 6000);
      std::vector<std::pair<uint8_t*, size_t>> live;
      for (int i = 0; i < kIters; ++i) {
        if (live.size() < 8 && (live.empty() || rng() % 2 == 0)) {
          const size_t n = size(rng);
          auto* p = static_cast<uint8_t*>(a.allocate(n));
          if (!aligned64(p)) ++failures[t];
          std::memset(p, t + 1, n);
          live.emplace_back(p, n);
        } else {
          const size_t k = rng() % live.size();
          auto [p, n] = live[k];
          for (size_t j = 0; j < n; ++j) failures[t] += p[j] != t + 1;  // nobody else wrote into our block
          a.free(p, n);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (auto [p, n] : live) a.free(p, n);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(std::accumulate(failures.begin(), failures.end(), 0), 0);
  const mpt::MemoryStats s = a.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, s.cached_bytes);
  EXPECT_GT(s.reused, 0);
  EXPECT_LE(s.reused, s.allocations);
  EXPECT_GT(s.peak_bytes, 0);
}

#if defined(__SANITIZE_ADDRESS__)
// Pooled memory never goes back to malloc, so ASan alone would miss a use after free: the pool poisons it.
TEST(CpuAllocatorDeathTest, CachedBlocksAndSlackArePoisonedUnderAsan) {
  CpuAllocator a(size_t{1} << 30);  // a limit the 2 MiB segment stays under when its block is freed
  auto* p = static_cast<volatile char*>(a.allocate(100));  // a 512-byte block
  p[99] = 1;
  EXPECT_DEATH(p[110] = 1, "use-after-poison");  // past the request, inside the block
  EXPECT_DEATH(p[600] = 1, "use-after-poison");  // inside the segment, in no block
  a.free(const_cast<char*>(p), 100);
  EXPECT_DEATH(p[0] = 1, "use-after-poison");
  auto* q = static_cast<volatile char*>(a.allocate(120));
  EXPECT_EQ(q, p);
  q[119] = 1;  // reuse unpoisons the requested bytes
  a.free(const_cast<char*>(q), 120);
}
#endif

TEST(CopyBytes, CpuToCpu) {
  std::vector<uint8_t> src(1000), dst(1000, 0), dst2(1000, 0);
  std::iota(src.begin(), src.end(), uint8_t{0});
  mpt::copy_bytes(dst.data(), Device::cpu(), src.data(), Device::cpu(), src.size());
  EXPECT_EQ(dst, src);
  mpt::Stream s(Device::cpu());
  mpt::copy_bytes(dst2.data() + 1, Device::cpu(), src.data(), Device::cpu(), 998, s);
  EXPECT_EQ(dst2[0], 0);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 998, dst2.begin() + 1));
  EXPECT_EQ(dst2[999], 0);
  EXPECT_NO_THROW(mpt::copy_bytes(nullptr, Device::cpu(), nullptr, Device::cpu(), 0));
  EXPECT_TRUE(contains(error_message([&] { mpt::copy_bytes(nullptr, Device::cpu(), src.data(), Device::cpu(), 4); }),
                       "[copy]"));
}

TEST(CopyBytes, CpuStorageRoundTrip) {
  auto a = Storage::allocate(4096, Device::cpu());
  auto b = Storage::allocate(4096, Device::cpu());
  for (int i = 0; i < 1024; ++i) static_cast<float*>(a->data())[i] = 0.5f * static_cast<float>(i) - 3.0f;
  mpt::copy_bytes(b->data(), b->device(), a->data(), a->device(), 4096);
  EXPECT_EQ(std::memcmp(a->data(), b->data(), 4096), 0);
}

TEST(CudaMemory, NoGpuAllocationsAndCopiesThrow) {
  if (mpt::cuda_status().usable) GTEST_SKIP() << "a GPU is usable here; this checks the no-GPU behaviour";
  const Device gpu = Device::parse("cuda:0");
  const std::string& reason = mpt::cuda_status().reason;
  std::vector<uint8_t> host(16, 1);
  EXPECT_TRUE(contains(error_message([&] { Storage::allocate(16, gpu); }), reason));
  uint8_t* h = host.data();
  EXPECT_TRUE(contains(error_message([&] { mpt::copy_bytes(h, gpu, h, Device::cpu(), 16); }), reason));
  EXPECT_TRUE(contains(error_message([&] { mpt::copy_bytes(h, Device::cpu(), h, gpu, 16); }), reason));
  EXPECT_TRUE(contains(error_message([&] { mpt::memory_stats(gpu); }), reason));
  EXPECT_TRUE(contains(error_message([&] { mpt::empty_cache(gpu); }), reason));
#if !defined(MPT_WITH_CUDA)
  EXPECT_TRUE(contains(error_message([&] { Storage::allocate(16, gpu); }), "built without CUDA"));
#endif
}

// The block cache (mpt/core/memory.h): a block freed on the default stream goes to the next allocation of its
// rounded size there, without the pool; empty_cache gives the blocks back.
TEST(CudaMemory, BlockCacheHandsFreedDefaultStreamBlocksBack) {
  if (!mpt::cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << mpt::cuda_status().reason;
  const Device gpu = Device::cuda(0);
  const bool was = mpt::cuda_memory_caching();
  mpt::set_cuda_memory_caching(true);
  mpt::empty_cache(gpu);
  const mpt::Stream current = mpt::Stream::current(gpu);
  auto first = Storage::allocate(1000, current);
  void* p = first->data();
  const mpt::MemoryStats before = mpt::memory_stats(gpu);
  first.reset();
  const mpt::MemoryStats freed = mpt::memory_stats(gpu);
  EXPECT_EQ(freed.current_bytes, before.current_bytes - 1000);
  EXPECT_EQ(freed.cached_bytes, before.cached_bytes + 1024) << "rounded to 512 bytes, held by the block cache";
  auto second = Storage::allocate(1010, current);  // the same rounded size: the same block
  EXPECT_EQ(second->data(), p);
  EXPECT_EQ(mpt::memory_stats(gpu).reused, before.reused + 1);
  EXPECT_EQ(mpt::memory_stats(gpu).allocations, before.allocations + 1);
  auto other = Storage::allocate(5000, current);  // another size: a new block
  EXPECT_NE(other->data(), p);
  second.reset();
  other.reset();
  mpt::empty_cache(gpu);
  EXPECT_EQ(mpt::memory_stats(gpu).cached_bytes, 0);
  mpt::set_cuda_memory_caching(was);
}

TEST(CudaMemory, PoolReusesFreedBlockAndTracksStats) {
  if (!mpt::cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << mpt::cuda_status().reason;
  const Device gpu = Device::cuda(0);
  mpt::Stream stream(gpu);
  const size_t n = size_t{3} << 20;
  auto first = Storage::allocate(n, stream);
  void* p = first->data();
  EXPECT_EQ(first->stream(), stream.native());
  const mpt::MemoryStats before = mpt::memory_stats(gpu);
  first.reset();
  EXPECT_EQ(mpt::memory_stats(gpu).current_bytes, before.current_bytes - static_cast<int64_t>(n));
  auto second = Storage::allocate(n, stream);
  const mpt::MemoryStats after = mpt::memory_stats(gpu);
#if !defined(MPT_CUDA_EMULATION)
  // cudart's pool hands the block back on the same stream; the emulated pool counts the reuse but never gives an
  // address out twice, so that a use after free stays detectable (tests/support/cuda_emu/README.md).
  EXPECT_EQ(second->data(), p);
#else
  (void)p;
#endif
  EXPECT_EQ(after.reused, before.reused + 1);
  EXPECT_EQ(after.allocations, before.allocations + 1);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  mpt::reset_peak_memory_stats(gpu);
  auto third = Storage::allocate(n, stream);
  EXPECT_EQ(mpt::memory_stats(gpu).peak_bytes, after.current_bytes + static_cast<int64_t>(n));
  third.reset();
  second.reset();
  mpt::empty_cache(gpu);
  EXPECT_EQ(mpt::memory_stats(gpu).cached_bytes, 0);
}

TEST(CudaMemory, HostDeviceRoundTrip) {
  if (!mpt::cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << mpt::cuda_status().reason;
  const Device gpu = Device::cuda(0);
  std::vector<float> host(1 << 16), back(1 << 16, 0.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.25f - 7.0f;
  const size_t bytes = host.size() * sizeof(float);
  auto d = Storage::allocate(bytes, gpu);
  EXPECT_EQ(d->device(), gpu);
  mpt::copy_bytes(d->data(), gpu, host.data(), Device::cpu(), bytes);
  mpt::copy_bytes(back.data(), Device::cpu(), d->data(), gpu, bytes);
  EXPECT_EQ(back, host);
  EXPECT_EQ(Storage::allocate(0, gpu)->data(), nullptr);
}

}  // namespace

// A failed allocation is an mpt::Error naming the tensor's dtype, shape and bytes, never std::bad_alloc.
TEST(CpuAllocator, FailedTensorAllocationNamesShapeAndBytes) {
  // 2^62 bytes: over the allocator's 2^60-byte limit.
  const std::string too_big = error_message([] { mpt::Tensor::empty({1 << 30, 1 << 30}, mpt::DType::F32); });
  EXPECT_TRUE(contains(too_big, "[tensor] cannot allocate a f32 tensor of shape [1073741824, 1073741824] "
                                "(4611686018427387904 bytes) on cpu"))
      << too_big;
  // 2^48 bytes (256 TiB): under the limit, refused by the system (the asan preset lets ASan return null too).
  const std::string refused = error_message([] { mpt::Tensor::empty({int64_t{1} << 46}, mpt::DType::F32); });
  EXPECT_TRUE(contains(refused, "shape [70368744177664] (281474976710656 bytes) on cpu")) << refused;
  EXPECT_TRUE(contains(refused, "out of CPU memory")) << refused;
  // 2^64 bytes cannot even be counted.
  const std::string overflow = error_message([] { mpt::Tensor::empty({int64_t{1} << 62}, mpt::DType::F32); });
  EXPECT_TRUE(contains(overflow, "has more bytes than 2^64")) << overflow;
}
