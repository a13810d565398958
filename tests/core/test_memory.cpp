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

TEST(CpuAllocator, SizeClasses) {
  EXPECT_EQ(CpuAllocator::size_class(0), 0u);
  EXPECT_EQ(CpuAllocator::size_class(1), 64u);
  EXPECT_EQ(CpuAllocator::size_class(64), 64u);
  EXPECT_EQ(CpuAllocator::size_class(65), 128u);
  EXPECT_EQ(CpuAllocator::size_class(256), 256u);
  EXPECT_EQ(CpuAllocator::size_class(257), 320u);
  EXPECT_EQ(CpuAllocator::size_class(512), 512u);
  EXPECT_EQ(CpuAllocator::size_class(513), 640u);
  EXPECT_EQ(CpuAllocator::size_class(1000), 1024u);
  EXPECT_EQ(CpuAllocator::size_class(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(CpuAllocator::size_class((size_t{1} << 20) + 1), (size_t{5} << 20) / 4);
  size_t previous = 0;
  for (size_t n = 1; n < (size_t{1} << 22); n = n * 9 / 8 + 1) {
    const size_t c = CpuAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_EQ(c % 64, 0u) << n;
    EXPECT_LE(c, n + std::max<size_t>(63, n / 4)) << n;  // at most 25% (or one 64-byte step) of slack
    EXPECT_GE(c, previous) << n;
    EXPECT_EQ(CpuAllocator::size_class(c), c) << n;  // a class is its own class
    previous = c;
  }
}

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
  void* p = first->data();
  const mpt::MemoryStats before = mpt::memory_stats(Device::cpu());
  first.reset();
  const mpt::MemoryStats freed = mpt::memory_stats(Device::cpu());
  EXPECT_EQ(freed.current_bytes, before.current_bytes - 1000);
  EXPECT_EQ(freed.cached_bytes, before.cached_bytes + 1024);
  auto second = Storage::allocate(1000, Device::cpu());
  const mpt::MemoryStats after = mpt::memory_stats(Device::cpu());
  EXPECT_EQ(second->data(), p);
  EXPECT_EQ(after.reused, before.reused + 1);
  EXPECT_EQ(after.allocations, before.allocations + 1);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);
}

TEST(CpuAllocator, CurrentPeakReservedArithmetic) {
  CpuAllocator a(size_t{1} << 20);
  void* p100 = a.allocate(100);
  mpt::MemoryStats s = a.stats();
  EXPECT_EQ(s.current_bytes, 100);
  EXPECT_EQ(s.peak_bytes, 100);
  EXPECT_EQ(s.reserved_bytes, 128);
  void* p300 = a.allocate(300);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 400);
  EXPECT_EQ(s.peak_bytes, 400);
  EXPECT_EQ(s.reserved_bytes, 128 + 320);
  a.free(p100, 100);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 300);
  EXPECT_EQ(s.peak_bytes, 400);
  EXPECT_EQ(s.cached_bytes, 128);
  EXPECT_EQ(s.reserved_bytes, 128 + 320);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, 300);
  void* p50 = a.allocate(50);  // class 64: nothing cached there, a new block
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 350);
  EXPECT_EQ(s.peak_bytes, 350);
  EXPECT_EQ(s.reused, 0);
  void* p120 = a.allocate(120);  // the 128-byte class: the block freed above
  EXPECT_EQ(p120, p100);
  s = a.stats();
  EXPECT_EQ(s.reused, 1);
  EXPECT_EQ(s.allocations, 4);
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.current_bytes, 470);
  a.free(p50, 50);
  a.free(p120, 120);
  a.free(p300, 300);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.peak_bytes, 470);
  EXPECT_EQ(s.cached_bytes, 64 + 128 + 320);
  EXPECT_EQ(s.reserved_bytes, s.cached_bytes);
}

// The reserve's high-water mark: the most held (live blocks rounded up plus cached ones), not falling when blocks
// are cached or released, and started again at the current reserve by reset_peak.
TEST(CpuAllocator, ReservedPeakIsTheMostHeldSinceAReset) {
  CpuAllocator a(size_t{1} << 20);
  void* p100 = a.allocate(100);
  void* p300 = a.allocate(300);
  EXPECT_EQ(a.reserved_peak(), 128 + 320);
  a.free(p300, 300);  // cached: still reserved
  void* p120 = a.allocate(120);  // a 128-byte block beside the cached 320-byte one
  EXPECT_EQ(a.stats().reserved_bytes, 128 + 320 + 128);
  EXPECT_EQ(a.reserved_peak(), 128 + 320 + 128);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, 256);
  EXPECT_EQ(a.reserved_peak(), 576);
  a.reset_peak();
  EXPECT_EQ(a.reserved_peak(), 256);
  a.free(p100, 100);
  a.free(p120, 120);
  EXPECT_EQ(a.reserved_peak(), 256);
  a.empty_cache();
}

// The process allocator's, through the public call.
TEST(CpuAllocator, ReservedPeakBytesFollowsTheProcessPool) {
  mpt::reset_peak_memory_stats(Device::cpu());
  const int64_t before = mpt::reserved_peak_bytes(Device::cpu());
  EXPECT_EQ(before, mpt::memory_stats(Device::cpu()).reserved_bytes);
  {
    // A size class nothing cached: the reserve grows by it.
    const mpt::Tensor big = mpt::Tensor::empty({(1 << 22) + 3}, mpt::DType::F32, Device::cpu());
    EXPECT_GE(mpt::reserved_peak_bytes(Device::cpu()), before + 4 * (1 << 22));
    EXPECT_GE(mpt::reserved_peak_bytes(Device::cpu()), mpt::memory_stats(Device::cpu()).reserved_bytes);
  }
  EXPECT_GE(mpt::reserved_peak_bytes(Device::cpu()), mpt::memory_stats(Device::cpu()).reserved_bytes);
}

TEST(CpuAllocator, EmptyCacheReleasesEverythingCached) {
  CpuAllocator a(size_t{1} << 20);
  void* keep = a.allocate(4096);
  for (size_t n : {10, 1000, 5000}) a.free(a.allocate(n), n);
  mpt::MemoryStats s = a.stats();
  EXPECT_EQ(s.cached_bytes, 64 + 1024 + 5120);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 4096);
  EXPECT_EQ(s.current_bytes, 4096);
  a.free(a.allocate(1000), 1000);
  EXPECT_EQ(a.stats().reused, 0);  // nothing left to reuse
  a.free(keep, 4096);
}

TEST(CpuAllocator, CacheLimitBoundsThePool) {
  CpuAllocator a(1024);
  a.free(a.allocate(2000), 2000);  // a 2048-byte block does not fit a 1024-byte cache
  mpt::MemoryStats s = a.stats();
  EXPECT_EQ(s.cached_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  void* x = a.allocate(600);  // 640
  void* y = a.allocate(600);
  a.free(x, 600);
  a.free(y, 600);  // 640 + 640 > 1024: goes back to the system
  s = a.stats();
  EXPECT_EQ(s.cached_bytes, 640);
  EXPECT_EQ(s.reserved_bytes, 640);
}

TEST(CpuAllocator, DifferentSizeClassIsNotReused) {
  CpuAllocator a(size_t{1} << 20);
  a.free(a.allocate(1000), 1000);
  void* p = a.allocate(2000);
  EXPECT_EQ(a.stats().reused, 0);
  EXPECT_EQ(a.stats().cached_bytes, 1024);
  a.free(p, 2000);
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
  CpuAllocator a(size_t{1} << 20);
  auto* p = static_cast<volatile char*>(a.allocate(100));  // class 128
  p[99] = 1;
  EXPECT_DEATH(p[110] = 1, "use-after-poison");  // past the request, inside the block
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
