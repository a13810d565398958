// tests/emu_backend/test_emu_counters.cpp: the emulation's operation counters (cuda_emu/counters.h) count exactly what each cudart, cuBLASLt and NCCL call cost.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "cublaslt_test_util.h"
#include "cuda_emu/counters.h"
#include "cudart_test_util.h"
#include "nccl_test_util.h"

namespace {

using mpt::cuda_emu::counters;
using mpt::cuda_emu::reset_counters;
using mpt::cuda_emu::testing::device_pool;

// Everything counted since the last reset_counters(), as "field=value ..." (nonzero fields only).
std::string counted() { return mpt::cuda_emu::to_string(counters()); }

__global__ void add_one(const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i] + 1.0f;
}

void* device_bytes(size_t bytes, int device = 0) {
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
  const std::vector<char> zeros(bytes, 0);
  EXPECT_EQ(cudaMemcpy(p, zeros.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  return p;
}

// Each test builds what it needs, resets the counters, then issues the sequence it counts.
class EmuCounters : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    cudaStreamDestroy(s);
    mpt::cuda_emu::clear_sticky_error();
    (void)cudaGetLastError();
  }
  cudaStream_t s = nullptr;
};

TEST_F(EmuCounters, StartFromZeroAfterAReset) {
  void* d = device_bytes(16);
  EXPECT_NE(counted(), "");
  reset_counters();
  EXPECT_EQ(counted(), "");
  EXPECT_EQ(counters().syncs, 0u);
  cudaFree(d);
}

TEST_F(EmuCounters, AsyncCopyFromPageableMemoryIsOneUnsynchronisedHostToDeviceCopy) {
  void* d = device_bytes(256);
  std::vector<char> host(256, 1);
  reset_counters();
  ASSERT_EQ(cudaMemcpyAsync(d, host.data(), 256, cudaMemcpyHostToDevice, s), cudaSuccess);
  const auto c = counters();
  EXPECT_EQ(c.h2d, 1u);
  EXPECT_EQ(c.h2d_bytes, 256u);
  EXPECT_EQ(c.pageable_copies, 1u);
  EXPECT_EQ(c.sync_copies, 0u);
  EXPECT_EQ(counted(), "h2d=1 h2d_bytes=256 pageable_copies=1");
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaFree(d);
}

// R8.3: a device-to-host copy into pageable memory returns when the data is there; into pinned memory it does not.
TEST_F(EmuCounters, AsyncCopyIntoPageableMemorySynchronisesTheHostIntoPinnedMemoryDoesNot) {
  void* d = device_bytes(256);
  std::vector<char> pageable(256);
  void* pinned = nullptr;
  reset_counters();
  ASSERT_EQ(cudaMallocHost(&pinned, 256), cudaSuccess);
  EXPECT_EQ(counted(), "host_mallocs=1");
  reset_counters();
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), d, 256, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(counted(), "d2h=1 d2h_bytes=256 pageable_copies=1 sync_copies=1 syncs=1");
  reset_counters();
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 256, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, static_cast<char*>(pinned) + 128, 128, cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_EQ(counted(), "h2d=1 h2d_bytes=128 d2h=1 d2h_bytes=256");
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(counted(), "h2d=1 h2d_bytes=128 d2h=1 d2h_bytes=256 stream_syncs=1 syncs=1");
  reset_counters();
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(counted(), "host_frees=1");
  cudaFree(d);
}

TEST_F(EmuCounters, CudaHostAllocMemoryIsPinnedToo) {
  void* d = device_bytes(64);
  void* pinned = nullptr;
  reset_counters();
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocPortable), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 64, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(counted(), "d2h=1 d2h_bytes=64 stream_syncs=1 syncs=1 host_mallocs=1 host_frees=1");
  EXPECT_EQ(cudaHostAlloc(&pinned, 64, 0x80), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  cudaFree(d);
}

TEST_F(EmuCounters, SynchronousCopiesCountAsSynchronisations) {
  void* d = device_bytes(32);
  std::vector<char> host(32, 2);
  reset_counters();
  ASSERT_EQ(cudaMemcpy(d, host.data(), 32, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), d, 16, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(counted(), "h2d=1 h2d_bytes=32 d2h=1 d2h_bytes=16 pageable_copies=2 sync_copies=2 syncs=2");
  cudaFree(d);
}

TEST_F(EmuCounters, DeviceToDeviceAndPeerCopies) {
  void* a = device_bytes(64);
  void* b = device_bytes(64);
  void* peer = device_bytes(64, 1);
  reset_counters();
  ASSERT_EQ(cudaMemcpyAsync(b, a, 64, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeerAsync(peer, 1, b, 0, 32, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeer(a, 0, peer, 1, 16), cudaSuccess);
  EXPECT_EQ(counted(), "d2d=3 d2d_bytes=112 sync_copies=1 stream_syncs=1 syncs=2");
  cudaFree(a);
  cudaFree(b);
  cudaFree(peer);
}

// Empty copies and memsets do nothing and count nothing; cudaMemset's synchronisation (the double's) is not counted.
TEST_F(EmuCounters, MemsetsAndEmptyOperations) {
  void* d = device_bytes(64);
  std::vector<char> host(64);
  reset_counters();
  ASSERT_EQ(cudaMemsetAsync(d, 0, 64, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 1, 32), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 0, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), d, 0, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(counted(), "memsets=2 stream_syncs=1 syncs=1");
  cudaFree(d);
}

TEST_F(EmuCounters, SynchronisationsEventsAndWaits) {
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e = nullptr, never = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&never), cudaSuccess);
  reset_counters();
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, e, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, never, 0), cudaSuccess);  // a no-op on the GPU, but a call all the same
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaEventQuery(e), cudaSuccess);  // queries do not block: not counted
  ASSERT_EQ(cudaStreamQuery(s), cudaSuccess);
  const auto c = counters();
  EXPECT_EQ(c.stream_syncs, 1u);
  EXPECT_EQ(c.device_syncs, 1u);
  EXPECT_EQ(c.event_syncs, 1u);
  EXPECT_EQ(c.syncs, 3u);
  EXPECT_EQ(counted(), "stream_syncs=1 device_syncs=1 event_syncs=1 syncs=3 event_records=1 stream_waits=2");
  ASSERT_EQ(cudaEventDestroy(never), cudaSuccess);
  reset_counters();
  EXPECT_EQ(cudaEventRecord(never, s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(other, never, 0), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  EXPECT_EQ(counted(), "");
  cudaEventDestroy(e);
  cudaStreamDestroy(other);
}

TEST_F(EmuCounters, DriverAllocations) {
  reset_counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 100), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  void* empty = &p;
  ASSERT_EQ(cudaMalloc(&empty, 0), cudaSuccess);  // allocates nothing
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(counted(), "mallocs=1 frees=1");
}

uint64_t reserved(cudaMemPool_t pool) {
  uint64_t v = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v), cudaSuccess);
  return v;
}

// A pool that keeps what is freed (mptrain's allocator sets the threshold so): an allocation grows the pool exactly
// when cudaMemPoolAttrReservedMemCurrent grows.
TEST_F(EmuCounters, PoolAllocationsGrowThePoolOnlyWhenItsFreeMemoryCannotServeThem) {
  cudaMemPool_t pool = device_pool();
  ASSERT_NE(pool, nullptr);
  uint64_t keep_all = std::numeric_limits<uint64_t>::max();
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), cudaSuccess);
  reset_counters();
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 1 << 20, pool, s), cudaSuccess);
  EXPECT_EQ(reserved(pool), 1u << 20);
  EXPECT_EQ(counted(), "pool_allocs=1 pool_grows=1");
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 1 << 20, pool, s), cudaSuccess);  // the same size again: served from the pool
  EXPECT_EQ(reserved(pool), 1u << 20);
  EXPECT_EQ(counted(), "stream_syncs=1 syncs=1 pool_allocs=2 pool_frees=1 pool_grows=1");
  ASSERT_EQ(cudaMallocFromPoolAsync(&q, 1 << 10, pool, s), cudaSuccess);  // nothing free left: grows
  EXPECT_EQ(reserved(pool), (1u << 20) + (1u << 10));
  EXPECT_EQ(counters().pool_grows, 2u);
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(q, s), cudaSuccess);
  ASSERT_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 1 << 10, pool, s), cudaSuccess);  // trimmed: grows again
  EXPECT_EQ(counted(), "stream_syncs=1 syncs=1 pool_allocs=4 pool_frees=3 pool_grows=3");
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

// cudaMallocAsync's default pool keeps nothing in the double (release threshold 0): every allocation grows it.
TEST_F(EmuCounters, DefaultPoolAllocationsAlwaysGrow) {
  reset_counters();
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 256, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&p, 256, s), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);  // cudaFree of pool memory is a free, not a pool free
  EXPECT_EQ(counted(), "stream_syncs=1 syncs=1 frees=1 pool_allocs=2 pool_frees=1 pool_grows=2");
}

TEST_F(EmuCounters, KernelLaunchesAndRefusedLaunches) {
  auto* x = static_cast<float*>(device_bytes(64 * sizeof(float)));
  auto* y = static_cast<float*>(device_bytes(64 * sizeof(float)));
  reset_counters();
  // The first launch says what it moves (the bytes its launcher computed: 64 floats read, 64 written), the second
  // does not; refused launches move nothing.
  const mpt::cuda_emu::Traffic traffic{64 * sizeof(float), 64 * sizeof(float)};
  ASSERT_EQ(mpt::cuda_emu::launch_sized(traffic, add_one, dim3(2), dim3(32), 0, s, x, y, 64), cudaSuccess);
  ASSERT_EQ(mpt::cuda_emu::launch(add_one, dim3(1), dim3(64), 0, s, x, y, 64), cudaSuccess);
  EXPECT_EQ(mpt::cuda_emu::launch_sized(traffic, add_one, dim3(1), dim3(2048), 0, s, x, y, 64),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(mpt::cuda_emu::launch(add_one, dim3(1), dim3(64), 300 * 1024, s, x, y, 64), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(counted(), "kernel_launches=2 kernel_launches_refused=2 kernel_bytes_read=256 kernel_bytes_written=256 "
                       "kernel_launches_unsized=1");
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaFree(x);
  cudaFree(y);
}

// After a sticky error nothing runs, so nothing is counted.
TEST_F(EmuCounters, CallsRefusedByAStickyErrorCountNothing) {
  auto* x = static_cast<float*>(device_bytes(64));
  std::vector<char> host(64);
  reset_counters();
  mpt::cuda_emu::inject_sticky_error(cudaErrorIllegalAddress);
  EXPECT_EQ(mpt::cuda_emu::launch(add_one, dim3(1), dim3(16), 0, s, x, x, 16), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaMemcpyAsync(host.data(), x, 64, cudaMemcpyDeviceToHost, s), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaMemsetAsync(x, 0, 64, s), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 8), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaMallocAsync(&p, 8, s), cudaErrorIllegalAddress);
  mpt::cuda_emu::clear_sticky_error();
  (void)cudaGetLastError();
  EXPECT_EQ(counted(), "");
  cudaFree(x);
}

class EmuCountersLt : public mpt::lt_test::LtDouble {};

// A column block of a wider matrix (ld 4 for 2 rows: every other pair of floats unread) is counted by its 6 elements,
// not by the 10 floats it spans: a GEMM over one projection's columns of a packed output reads those columns only.
TEST_F(EmuCountersLt, AStridedOperandCountsItsElementsNotItsSpan) {
  using namespace mpt::lt_test;
  Dev<float> A(std::vector<float>{1, 4, -1, -1, 2, 5, -1, -1, 3, 6, -1, -1}), B(kB), D(4);
  Gemm g(handle, Mat{CUDA_R_32F, 2, 3, 4}, Mat{CUDA_R_32F, 3, 2, 3}, Mat{CUDA_R_32F, 2, 2, 2},
         Mat{CUDA_R_32F, 2, 2, 2});
  reset_counters();
  ASSERT_EQ(g.run(1.0f, A.p, B.p, 0.0f, nullptr, D.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(counted(), "matmuls=1 matmul_flops=24 matmul_bytes=64");  // A 6 + B 6 + D 4 floats
  EXPECT_EQ(D.get(), (std::vector<float>{4, 10, 5, 11}));  // kA's GEMM (MatmulsThatRanAreCounted, alpha 1)
}

TEST_F(EmuCountersLt, MatmulsThatRanAreCounted) {
  using namespace mpt::lt_test;
  Dev<float> A(kA), B(kB), D(4);
  Gemm g(handle, Mat{CUDA_R_32F, 2, 3, 2}, Mat{CUDA_R_32F, 3, 2, 3}, Mat{CUDA_R_32F, 2, 2, 2},
         Mat{CUDA_R_32F, 2, 2, 2});
  reset_counters();
  ASSERT_EQ(g.run(1.0f, A.p, B.p, 0.0f, nullptr, D.p), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(g.run(2.0f, A.p, B.p, 0.0f, nullptr, D.p), CUBLAS_STATUS_SUCCESS);
  void* unaligned_workspace = reinterpret_cast<char*>(D.p) + 4;
  EXPECT_EQ(g.run(1.0f, A.p, B.p, 0.0f, nullptr, D.p, nullptr, unaligned_workspace, 8), CUBLAS_STATUS_INVALID_VALUE);
  // 2 x (2 M N K = 2*2*2*3 = 24 FLOPs; A 6 + B 6 + D 4 floats = 64 bytes, C not read with beta 0).
  EXPECT_EQ(counted(), "matmuls=2 matmul_flops=48 matmul_bytes=128");
  EXPECT_EQ(D.get(), (std::vector<float>{8, 20, 10, 22}));
}

// Record-only mode (MPT_EMU_DEVICE_WORK=record-only): everything is issued, checked and counted as usual, but kernel
// bodies, GEMM arithmetic, device-to-device copies above 64 KiB and memsets do not run; new memory is not poisoned
// (it reads zeros), host<->device copies and small device copies move their bytes.
TEST_F(EmuCountersLt, RecordOnlyCountsWhatWouldRunWithoutRunningIt) {
  using namespace mpt::lt_test;
  Dev<float> A(kA), B(kB), D(4);
  Gemm g(handle, Mat{CUDA_R_32F, 2, 3, 2}, Mat{CUDA_R_32F, 3, 2, 3}, Mat{CUDA_R_32F, 2, 2, 2},
         Mat{CUDA_R_32F, 2, 2, 2});
  ASSERT_EQ(g.run(1.0f, A.p, B.p, 0.0f, nullptr, D.p), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> before = D.get();
  mpt::cuda_emu::set_record_only(true);
  float* fresh = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&fresh), 4 * sizeof(float)), cudaSuccess);
  reset_counters();
  ASSERT_EQ(g.run(2.0f, A.p, B.p, 0.0f, nullptr, D.p), CUBLAS_STATUS_SUCCESS);
  const mpt::cuda_emu::Traffic traffic{4 * sizeof(float), 4 * sizeof(float)};
  ASSERT_EQ(mpt::cuda_emu::launch_sized(traffic, add_one, dim3(1), dim3(32), 0, nullptr, A.p, D.p, 4), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(D.p, 0, 4 * sizeof(float), nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(D.p, A.p, 4 * sizeof(float), cudaMemcpyDeviceToDevice, nullptr), cudaSuccess);
  std::vector<float> fresh_host(4, -1.0f);
  ASSERT_EQ(cudaMemcpy(fresh_host.data(), fresh, 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  const std::vector<float> after = D.get();
  mpt::cuda_emu::set_record_only(false);
  EXPECT_EQ(counted(), "kernel_launches=1 kernel_bytes_read=16 kernel_bytes_written=16 matmuls=1 matmul_flops=24 "
                       "matmul_bytes=64 d2h=2 d2h_bytes=32 d2d=1 d2d_bytes=16 pageable_copies=2 sync_copies=2 "
                       "memsets=1 syncs=2");
  EXPECT_EQ(after, std::vector<float>(kA.begin(), kA.begin() + 4))
      << "no GEMM, kernel or memset ran; the 16-byte device copy (the last) did";
  EXPECT_NE(before, after);
  EXPECT_EQ(fresh_host, std::vector<float>(4, 0.0f)) << "unpoisoned, unwritten memory reads zeros, without an error";
  ASSERT_EQ(cudaFree(fresh), cudaSuccess);
  // A device copy above kRecordOnlyCopyBytes does not run.
  const size_t big = mpt::cuda_emu::kRecordOnlyCopyBytes + 4;
  void *src = nullptr, *dst = nullptr;
  mpt::cuda_emu::set_record_only(true);  // before the allocations: not poisoned, they read zeros
  ASSERT_EQ(cudaMalloc(&src, big), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, big), cudaSuccess);
  const std::vector<unsigned char> ones(big, 1);
  ASSERT_EQ(cudaMemcpy(src, ones.data(), big, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice, nullptr), cudaSuccess);
  std::vector<unsigned char> got(big, 7), copied(big, 7);
  ASSERT_EQ(cudaMemcpy(copied.data(), src, big, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, big, cudaMemcpyDeviceToHost), cudaSuccess);
  mpt::cuda_emu::set_record_only(false);
  EXPECT_EQ(copied, ones) << "host<->device copies move their bytes";
  EXPECT_EQ(got, std::vector<unsigned char>(big, 0)) << "the large device copy did not run";
  ASSERT_EQ(cudaFree(src), cudaSuccess);
  ASSERT_EQ(cudaFree(dst), cudaSuccess);
}

class EmuCountersNccl : public mpt::nccl_test::NcclDouble {};

TEST_F(EmuCountersNccl, EveryRanksCollectiveIsCounted) {
  using namespace mpt::nccl_test;
  auto comms = init_ranks(2);
  std::vector<float*> buf(2);
  std::vector<cudaStream_t> streams(2);
  run_ranks(2, [&](int r) {
    buf[r] = to_device(std::vector<float>(8, float(r + 1)));
    streams[r] = new_stream();
  });
  reset_counters();
  run_ranks(2, [&](int r) {
    ASSERT_EQ(ncclAllReduce(buf[r], buf[r], 8, ncclFloat32, ncclSum, comms[r], streams[r]), ncclSuccess);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclBroadcast(buf[r], buf[r], 4, ncclFloat32, 0, comms[r], streams[r]), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(buf[r], buf[r], 0, ncclFloat32, ncclSum, comms[r], streams[r]), ncclSuccess);  // no-op
    ASSERT_EQ(ncclAllReduce(buf[r], buf[r], 4, ncclFloat32, ncclMax, comms[r], streams[r]), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
  });
  EXPECT_EQ(counted(), "collectives=6 stream_syncs=2 syncs=2");
  run_ranks(2, [&](int r) {
    EXPECT_EQ(to_host(buf[r], 8), std::vector<float>(8, 3.0f));
    cudaFree(buf[r]);
    cudaStreamDestroy(streams[r]);
  });
  destroy_all(comms);
}

}  // namespace
