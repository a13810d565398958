// tests/emu_backend/test_cudart_double.cpp: the cudart double against vendor-semantics §8: devices, memory, copies, streams, events, errors.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "cuda_emu/device_work.h"
#include "cudart_test_util.h"

namespace {

using mpt::cuda_emu::Access;
using mpt::cuda_emu::MisuseError;

TEST(CudartDevices, DescribesSeveralSm90Devices) {
  int version = 0, count = 0;
  ASSERT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 4);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 3), cudaSuccess);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.minor, 0);
  EXPECT_EQ(prop.maxThreadsPerBlock, 1024);
  EXPECT_EQ(prop.warpSize, 32);
  EXPECT_EQ(prop.sharedMemPerBlockOptin, 227u * 1024);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 4), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace

namespace {

// A kernel in the emulated runtime: y[i] = x[i] + 1, launched on `s`.
using mpt::cuda_emu::testing::add_one;
using mpt::cuda_emu::testing::device_floats;
using mpt::cuda_emu::testing::device_pool;
using mpt::cuda_emu::testing::launch_add_one;
using mpt::cuda_emu::testing::to_host;

// Every test starts on cuda:0 (the current device is per host thread and a failed test may leave another).
class CudartDouble : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudaSetDevice(0), cudaSuccess); }
};
class CudartMisuse : public CudartDouble {};

TEST_F(CudartDouble, CopiesInEveryDirectionAndMemset) {
  float* a = device_floats({1, 2, 3, 4});
  void* b = nullptr;
  ASSERT_EQ(cudaMalloc(&b, 16), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, a, 16, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(static_cast<char*>(b) + 4, 0, 4, s), cudaSuccess);
  std::vector<float> h(4);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), b, 16, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(h, (std::vector<float>{1, 0, 3, 4}));
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* c = nullptr;
  ASSERT_EQ(cudaMalloc(&c, 16), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeerAsync(c, 1, b, 0, 16, nullptr), cudaSuccess);
  EXPECT_EQ(to_host(static_cast<float*>(c), 4), (std::vector<float>{1, 0, 3, 4}));
  EXPECT_EQ(cudaMemcpy(c, a, 16, cudaMemcpyDefault), cudaSuccess);  // kind inferred from the pointers
  EXPECT_EQ(cudaFree(c), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(b, a, 16, static_cast<cudaMemcpyKind>(7)), cudaErrorInvalidMemcpyDirection);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

TEST_F(CudartDouble, KernelsRunOnTheirStreamInOrder) {
  float* x = device_floats({1, 2, 3});
  void* y = nullptr;
  ASSERT_EQ(cudaMalloc(&y, 12), cudaSuccess);
  ASSERT_EQ(launch_add_one(x, static_cast<float*>(y), 3, nullptr), cudaSuccess);
  ASSERT_EQ(launch_add_one(static_cast<float*>(y), x, 3, nullptr), cudaSuccess);
  EXPECT_EQ(to_host(x, 3), (std::vector<float>{3, 4, 5}));
  // A bad configuration is reported by the launch and by cudaGetLastError, and runs nothing.
  EXPECT_EQ(mpt::cuda_emu::launch(add_one, dim3(1), dim3(2048), 0, nullptr, x, static_cast<float*>(y), 3),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(x);
  cudaFree(y);
}

// E8.2: k1 on s1; record e; k2 on s1; wait(s2, e); k3 on s2 is ordered after k1 only.
TEST_F(CudartDouble, EventWaitOrdersOnlyWhatWasRecorded) {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  float* a = device_floats({1, 2});
  void *b = nullptr, *c = nullptr, *d = nullptr;
  ASSERT_EQ(cudaMalloc(&b, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d, 8), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(launch_add_one(a, static_cast<float*>(b), 2, s1), cudaSuccess);  // k1 writes b
  ASSERT_EQ(cudaEventRecord(e, s1), cudaSuccess);
  ASSERT_EQ(launch_add_one(a, static_cast<float*>(c), 2, s1), cudaSuccess);  // k2 writes c
  ASSERT_EQ(cudaStreamWaitEvent(s2, e, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s1), cudaSuccess);  // re-recording changes no wait already issued
  ASSERT_EQ(launch_add_one(static_cast<float*>(b), static_cast<float*>(d), 2, s2), cudaSuccess);  // k3 reads b: ordered
  try {
    (void)launch_add_one(static_cast<float*>(c), static_cast<float*>(d), 2, s2);  // reads c: k2 is not ordered
    ADD_FAILURE() << "reading k2's output on s2 without an event after k2 must be refused";
  } catch (const MisuseError& err) {
    EXPECT_NE(std::string(err.what()).find("no event, stream order or host synchronisation"), std::string::npos)
        << err.what();
  }
  // After the host synchronises with s1, s2 may read it.
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(launch_add_one(static_cast<float*>(c), static_cast<float*>(d), 2, s2), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(static_cast<float*>(d), 2), (std::vector<float>{3, 4}));
  for (void* p : {static_cast<void*>(a), b, c, d}) cudaFree(p);
  cudaEventDestroy(e);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// E8.1: the legacy stream orders blocking streams; non-blocking ones are exempt.
TEST_F(CudartDouble, LegacyStreamSynchronisesBlockingStreamsOnly) {
  cudaStream_t blocking = nullptr, nonblocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  float* x = device_floats({1});
  void *y = nullptr, *z = nullptr;
  ASSERT_EQ(cudaMalloc(&y, 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&z, 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(launch_add_one(x, static_cast<float*>(y), 1, blocking), cudaSuccess);
  ASSERT_EQ(launch_add_one(static_cast<float*>(y), static_cast<float*>(z), 1, nullptr), cudaSuccess);  // after it
  // A non-blocking stream is not ordered after the legacy stream's read of y: overwriting y is a race.
  EXPECT_THROW((void)launch_add_one(x, static_cast<float*>(y), 1, nonblocking), MisuseError);
  cudaDeviceSynchronize();
  for (void* p : {static_cast<void*>(x), y, z}) cudaFree(p);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

// E8.3, E8.6: a fresh event, bogus handles, the last-error slot and a sticky error.
TEST_F(CudartDouble, EventsHandlesAndStickyErrors) {
  cudaEvent_t e = nullptr, t0 = nullptr, t1 = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, e, e), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaEventCreate(&t0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&t1), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(t0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(t1, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  auto bogus = reinterpret_cast<cudaEvent_t>(0x1234);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, bogus, 0), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x5678)), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  mpt::cuda_emu::inject_sticky_error(cudaErrorIllegalAddress);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 4), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaEventRecord(e, nullptr), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  mpt::cuda_emu::clear_sticky_error();
  (void)cudaGetLastError();
  for (cudaEvent_t x : {e, t0, t1}) EXPECT_EQ(cudaEventDestroy(x), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_F(CudartDouble, PoolsCountReuseAndRunOutOfMemory) {
  cudaMemPool_t pool = device_pool();
  ASSERT_NE(pool, nullptr);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 1 << 20, pool, nullptr), cudaSuccess);
  uint64_t reserved = 0, used = 0;
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
  EXPECT_EQ(reserved, 1u << 20);
  EXPECT_EQ(used, 0u);
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 1 << 20, pool, nullptr), cudaSuccess);  // served from the cache
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  EXPECT_EQ(reserved, 1u << 20);
  ASSERT_EQ(cudaFreeAsync(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  EXPECT_EQ(reserved, 0u);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, prop.totalGlobalMem + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
}

// The pool's high-water marks (cudaMemPoolAttrReservedMemHigh / UsedMemHigh, torch's max_memory_reserved source):
// the most it held since creation or a reset, resettable only with 0, which starts them again at the current amounts.
TEST_F(CudartDouble, PoolHighWaterMarksFollowTheMostHeldAndResetWithZero) {
  cudaMemPool_t pool = device_pool();
  ASSERT_NE(pool, nullptr);
  const auto get = [&](cudaMemPoolAttr attr) {
    uint64_t v = 0;
    EXPECT_EQ(cudaMemPoolGetAttribute(pool, attr, &v), cudaSuccess);
    return v;
  };
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&a, 3 << 20, pool, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMallocFromPoolAsync(&b, 1 << 20, pool, nullptr), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(a, nullptr), cudaSuccess);
  EXPECT_EQ(get(cudaMemPoolAttrReservedMemHigh), 4u << 20);  // 3 MiB cached + 1 MiB used now, 4 MiB at most
  EXPECT_EQ(get(cudaMemPoolAttrUsedMemHigh), 4u << 20);
  ASSERT_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  EXPECT_EQ(get(cudaMemPoolAttrReservedMemCurrent), 1u << 20);
  EXPECT_EQ(get(cudaMemPoolAttrReservedMemHigh), 4u << 20);  // a high-water mark does not fall with the memory
  uint64_t zero = 0, one = 1;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &one), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero), cudaSuccess);
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), cudaSuccess);
  EXPECT_EQ(get(cudaMemPoolAttrReservedMemHigh), 1u << 20);
  EXPECT_EQ(get(cudaMemPoolAttrUsedMemHigh), 1u << 20);
  ASSERT_EQ(cudaFreeAsync(b, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

// Misuse a GPU punishes: each is refused with a message saying what happened.
template <class F>
std::string misuse(F f) {
  try {
    f();
  } catch (const MisuseError& e) {
    return e.what();
  }
  return "(no MisuseError)";
}

TEST_F(CudartMisuse, HostPointerGivenToDeviceCode) {
  std::vector<float> host{1, 2};
  void* y = nullptr;
  ASSERT_EQ(cudaMalloc(&y, 8), cudaSuccess);
  EXPECT_NE(misuse([&] { (void)launch_add_one(host.data(), static_cast<float*>(y), 2, nullptr); })
                .find("is not device memory"),
            std::string::npos);
  EXPECT_NE(misuse([&] { (void)cudaMemcpy(y, host.data(), 8, cudaMemcpyDeviceToDevice); }).find("src"),
            std::string::npos);
  cudaFree(y);
}

TEST_F(CudartMisuse, UseAfterFreeAndDoubleFree) {
  float* x = device_floats({1, 2});
  void* y = nullptr;
  ASSERT_EQ(cudaMalloc(&y, 8), cudaSuccess);
  ASSERT_EQ(cudaFree(x), cudaSuccess);
  EXPECT_NE(misuse([&] { (void)launch_add_one(x, static_cast<float*>(y), 2, nullptr); }).find("use after free"),
            std::string::npos);
  EXPECT_NE(misuse([&] { (void)cudaFree(x); }).find("double free"), std::string::npos);
  cudaFree(y);
}

TEST_F(CudartMisuse, UninitialisedReadOutOfBoundsAndWrongDevice) {
  void *fresh = nullptr, *y = nullptr;
  ASSERT_EQ(cudaMalloc(&fresh, 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, 8), cudaSuccess);
  std::vector<float> h(2);
  EXPECT_NE(misuse([&] { (void)cudaMemcpy(h.data(), fresh, 8, cudaMemcpyDeviceToHost); }).find("nothing has written"),
            std::string::npos);
  EXPECT_NE(misuse([&] { (void)cudaMemcpy(y, h.data(), 12, cudaMemcpyHostToDevice); }).find("runs past the end"),
            std::string::npos);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_NE(misuse([&] { (void)cudaMemsetAsync(y, 0, 8, nullptr); }).find("memory of cuda:0 used on cuda:1"),
            std::string::npos);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaFree(fresh);
  cudaFree(y);
}

// E8.5: memory from cudaMallocAsync on s1 used on s2 without an event; freed on s2 while s1 may still use it.
TEST_F(CudartMisuse, StreamOrderedAllocationAcrossStreams) {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(&p, 8, s1), cudaSuccess);
  EXPECT_NE(misuse([&] { (void)cudaMemsetAsync(p, 0, 8, s2); }).find("cudaMallocAsync"), std::string::npos);
  ASSERT_EQ(cudaMemsetAsync(p, 0, 8, s1), cudaSuccess);
  EXPECT_NE(misuse([&] { (void)cudaFreeAsync(p, s2); }).find("no event"), std::string::npos);
  EXPECT_EQ(cudaFreeAsync(p, s1), cudaSuccess);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// R8.3: only a copy into pageable memory returns once the data arrived. One into pinned memory is asynchronous: the
// host has not synchronised with its stream, so another stream overwriting the source still needs an event.
TEST_F(CudartMisuse, CopyIntoPinnedMemoryLeavesTheHostUnsynchronised) {
  float* x = device_floats({1, 2});
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> pageable(2);
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), x, 8, cudaMemcpyDeviceToHost, s1), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(x, 0, 8, s2), cudaSuccess);  // ordered: the host waited for s1
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 16), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(static_cast<char*>(pinned) + 8, x, 8, cudaMemcpyDeviceToHost, s1), cudaSuccess);
  EXPECT_NE(misuse([&] { (void)cudaMemsetAsync(x, 0, 8, s2); }).find("no event"), std::string::npos);
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(x, 0, 8, s2), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  cudaFreeHost(pinned);
  cudaFree(x);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// E8.4: an asynchronous copy from pinned memory may run after the call returns, so the host must leave the source
// alone until it knows the copy is done. A write before that is refused at the next call; a write after a
// synchronisation or a successful event query is fine.
TEST_F(CudartMisuse, HostWritesAPinnedSourceBeforeItsCopyIsKnownDone) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 8), cudaSuccess);
  double* h = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&h), 8), cudaSuccess);
  *h = 1;
  ASSERT_EQ(cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, s), cudaSuccess);
  *h = 2;  // the copy may not have run
  EXPECT_NE(misuse([&] { (void)cudaMemsetAsync(d, 0, 8, s); }).find("before synchronising with that copy"),
            std::string::npos);
  EXPECT_NE(misuse([&] { (void)cudaStreamSynchronize(s); }).find("cudaMemcpyAsync"), std::string::npos);
  *h = 1;  // as the copy read it: nothing to report any more
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  *h = 3;  // after the synchronisation: fine
  ASSERT_EQ(cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, s), cudaSuccess);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  ASSERT_EQ(cudaEventQuery(e), cudaSuccess);  // the double ran it: the query tells the host so
  *h = 4;
  EXPECT_EQ(cudaMemsetAsync(d, 0, 8, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaEventDestroy(e);
  cudaFreeHost(h);
  cudaFree(d);
  cudaStreamDestroy(s);
}

// Device memory is not host memory: a host dereference dies with the allocation named, as does a kernel touching
// freed memory through a pointer the launch could not see.
TEST(CudartMisuseDeathTest, HostDereferenceOfDeviceMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float* x = device_floats({1, 2});
  EXPECT_DEATH({ volatile float v = x[1]; (void)v; }, "the host dereferenced device memory: +byte 4 of the 8-byte");
  cudaFree(x);
}

struct Indirect {
  const float* x;
};
__global__ void read_indirect(Indirect in, float* y) { y[0] = in.x[0]; }

TEST(CudartMisuseDeathTest, KernelReadsFreedOrUnwrittenMemoryThroughAStruct) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float* x = device_floats({5});
  void *y = nullptr, *fresh = nullptr;
  ASSERT_EQ(cudaMalloc(&y, 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&fresh, 4), cudaSuccess);
  ASSERT_EQ(mpt::cuda_emu::launch(read_indirect, dim3(1), dim3(1), 0, nullptr, Indirect{x}, static_cast<float*>(y)),
            cudaSuccess);
  EXPECT_EQ(to_host(static_cast<float*>(y), 1), std::vector<float>{5});
  EXPECT_DEATH((void)mpt::cuda_emu::launch(read_indirect, dim3(1), dim3(1), 0, nullptr,
                                           Indirect{static_cast<const float*>(fresh)}, static_cast<float*>(y)),
               "device code read byte 0 of the 4-byte allocation .* which nothing has written yet");
  ASSERT_EQ(cudaFree(x), cudaSuccess);
  EXPECT_DEATH((void)mpt::cuda_emu::launch(read_indirect, dim3(1), dim3(1), 0, nullptr, Indirect{x},
                                           static_cast<float*>(y)),
               "device code touched freed memory: byte 0 .* after it was freed \\(use after free\\)");
  cudaFree(y);
  cudaFree(fresh);
}

}  // namespace
