// tests/emu_backend/test_nccl_groups_async.cpp: the NCCL double's groups, asynchronous completion, watchdog/abort, injected failures, mismatches, non-blocking communicators and misuse.
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"
#include "nccl_test_util.h"

namespace {

using namespace mpt::nccl_test;
using mpt::cuda_emu::MisuseError;
using mpt::cuda_emu::NcclInPlaceRest;
using namespace std::chrono_literals;

// ---- groups ----
TEST_F(NcclDouble, OneThreadDrivesFourRanksWithAGroup) {
  std::vector<ncclComm_t> comms(4);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 4, nullptr), ncclSuccess);
  std::vector<float*> send(4), recv(4);
  std::vector<cudaStream_t> streams(4);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    send[r] = to_device(std::vector<float>{1.0f * (r + 1), -1.0f});
    recv[r] = to_device(std::vector<float>(8, 0));
    streams[r] = new_stream();
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 4; ++r) {  // several collectives per rank in one group, issued at ncclGroupEnd
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(ncclAllReduce(send[r], recv[r], 2, ncclFloat32, ncclSum, comms[r], streams[r]), ncclSuccess);
    ASSERT_EQ(ncclAllGather(send[r], recv[r] + 2, 1, ncclFloat32, comms[r], streams[r]), ncclSuccess);
  }
  EXPECT_EQ(cudaStreamQuery(streams[0]), cudaSuccess);  // nothing enqueued before ncclGroupEnd
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
    EXPECT_EQ(to_host(recv[r], 6), (std::vector<float>{10, -4, 1, 2, 3, 4}));
  }
  for (int r = 0; r < 4; ++r) {
    int rank = -1, count = -1, device = -1;
    EXPECT_EQ(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCount(comms[r], &count), ncclSuccess);
    EXPECT_EQ(ncclCommCuDevice(comms[r], &device), ncclSuccess);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(count, 4);
    EXPECT_EQ(device, r);
  }
  destroy_all(comms);
}

TEST_F(NcclDouble, OneThreadInitialisesRanksInAGroupAndNestsGroups) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(2);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(ncclCommInitRank(&comms[r], 2, id, r), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<int32_t*> buf(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    buf[r] = to_device(std::vector<int32_t>{r + 1});
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // nested: only the outermost end issues
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(ncclAllReduce(buf[r], buf[r], 1, ncclInt32, ncclProd, comms[r], nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_EQ(to_host(buf[r], 1), (std::vector<int32_t>{2}));
  }
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // no group open
  destroy_all(comms);
}

TEST_F(NcclDouble, AFailedCallCancelsItsGroupAndInitCannotShareAGroupWithCollectives) {
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    float* b = to_device(std::vector<float>{1});
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    EXPECT_EQ(ncclBroadcast(b, b, 1, ncclFloat32, 5, comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
    EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);  // nothing was issued
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclComm_t extra = nullptr;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclCommInitRank(&extra, 1, id, 0), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
    // Both ranks still agree on the sequence: a later collective works.
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    EXPECT_EQ(to_host(b, 1), (std::vector<float>{2}));
  });
  destroy_all(comms);
}

TEST_F(NcclDouble, OneThreadDrivingTwoRanksWithoutAGroupIsMisuse) {
  std::vector<ncclComm_t> comms(2);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<float*> b(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    b[r] = to_device(std::vector<float>{1});
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(b[0], b[0], 1, ncclFloat32, ncclSum, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_THROW(ncclAllReduce(b[1], b[1], 1, ncclFloat32, ncclSum, comms[1], nullptr), MisuseError);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommAbort(c), ncclSuccess);
}

// ---- asynchronous completion, the watchdog pattern, injected failures ----
TEST_F(NcclDouble, ACollectiveCompletesOnlyWhenTheLastRankArrives) {
  auto comms = init_ranks(2);
  std::promise<void> rank0_checked;
  auto checked = rank0_checked.get_future().share();
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    cudaEvent_t ev;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    float* b = to_device(std::vector<float>{1.0f + r});
    if (r == 1) checked.wait();  // rank 1 calls only after rank 0 saw its collective pending
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);  // returns at once
    ASSERT_EQ(cudaEventRecord(ev, st), cudaSuccess);
    if (r == 0) {
      EXPECT_EQ(cudaEventQuery(ev), cudaErrorNotReady);
      EXPECT_EQ(cudaStreamQuery(st), cudaErrorNotReady);
      ncclResult_t async = ncclInternalError;
      EXPECT_EQ(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
      EXPECT_EQ(async, ncclSuccess);  // NCCL knows nothing is wrong: it just waits
      rank0_checked.set_value();
    }
    ASSERT_EQ(cudaEventSynchronize(ev), cudaSuccess);
    EXPECT_EQ(to_host(b, 1), (std::vector<float>{3}));
  });
  destroy_all(comms);
}

// NCCL has no timeout: the application polls, gives up after its own deadline and aborts.
TEST_F(NcclDouble, WatchdogAbortsARankWhosePeerNeverArrives) {
  for (bool report_peer : {true, false}) {
    mpt::cuda_emu::nccl_set_report_peer_abort(report_peer);
    auto comms = init_ranks(2);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t st = new_stream();
    cudaEvent_t ev;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    float* send = to_device(std::vector<float>{1, 2});
    float* recv = to_device(std::vector<float>{0, 0});
    ASSERT_EQ(ncclAllReduce(send, recv, 2, ncclFloat32, ncclSum, comms[0], st), ncclSuccess);  // rank 1 never calls
    ASSERT_EQ(cudaEventRecord(ev, st), cudaSuccess);
    const auto deadline = std::chrono::steady_clock::now() + 50ms;
    bool gave_up = false;
    while (cudaEventQuery(ev) == cudaErrorNotReady) {
      ncclResult_t async = ncclSuccess;
      ASSERT_EQ(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
      ASSERT_EQ(async, ncclSuccess);
      if (std::chrono::steady_clock::now() > deadline) {
        gave_up = true;
        ASSERT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
      }
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_TRUE(gave_up);
    EXPECT_EQ(cudaEventQuery(ev), cudaSuccess);  // abort completed the pending operation
    uint32_t bits[2];
    ASSERT_EQ(cudaMemcpy(bits, recv, sizeof(bits), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(bits[0], 0xFFFFFFFFu);  // unspecified contents, poisoned
    EXPECT_EQ(bits[1], 0xFFFFFFFFu);
    ncclResult_t peer = ncclSuccess;
    ASSERT_EQ(ncclCommGetAsyncError(comms[1], &peer), ncclSuccess);
    EXPECT_EQ(peer, report_peer ? ncclRemoteError : ncclSuccess);
    if (report_peer) {
      EXPECT_NE(std::string(ncclGetLastError(comms[1])).find("ncclCommAbort"), std::string::npos);
    }
    EXPECT_THROW(ncclCommGetAsyncError(comms[0], &peer), MisuseError);  // aborted handles are freed
    EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  }
}

TEST_F(NcclDouble, StreamSynchronisationOnACollectiveThatNeverCompletesTimesOut) {
  mpt::cuda_emu::set_wait_timeout(100ms);
  auto comms = init_ranks(2);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t st = new_stream();
  float* b = to_device(std::vector<float>{1});
  ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[0], st), ncclSuccess);
  EXPECT_THROW(cudaStreamSynchronize(st), MisuseError);
  EXPECT_THROW(ncclCommDestroy(comms[0]), MisuseError);  // would hang: abort instead
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
}

TEST_F(NcclDouble, AnInjectedFailureIsReportedAsynchronouslyOnThatRank) {
  auto comms = init_ranks(2);
  mpt::cuda_emu::nccl_inject_failure(comms[1], ncclSystemError);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t st1 = new_stream();
  float* b1 = to_device(std::vector<float>{5});
  ASSERT_EQ(ncclAllReduce(b1, b1, 1, ncclFloat32, ncclSum, comms[1], st1), ncclSuccess);  // enqueued fine
  ASSERT_EQ(cudaStreamSynchronize(st1), cudaSuccess);
  ncclResult_t async = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comms[1], &async), ncclSuccess);
  EXPECT_EQ(async, ncclSystemError);
  EXPECT_NE(std::string(ncclGetLastError(comms[1])).find("nccl_inject_failure"), std::string::npos);
  uint32_t bits;
  ASSERT_EQ(cudaMemcpy(&bits, b1, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(bits, 0xFFFFFFFFu);
  EXPECT_EQ(ncclAllReduce(b1, b1, 1, ncclFloat32, ncclSum, comms[1], st1), ncclSystemError);  // the error sticks
  // Rank 0 waits for a peer that dropped out, until its watchdog aborts.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t st0 = new_stream();
  float* b0 = to_device(std::vector<float>{1});
  ASSERT_EQ(ncclAllReduce(b0, b0, 1, ncclFloat32, ncclSum, comms[0], st0), ncclSuccess);
  EXPECT_EQ(cudaStreamQuery(st0), cudaErrorNotReady);
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  EXPECT_EQ(cudaStreamQuery(st0), cudaSuccess);
}

// ---- mismatched calls: ncclInvalidUsage on every rank, with the same message ----
TEST_F(NcclDouble, MismatchedCallsAreReportedOnEveryRank) {
  struct Case {
    const char* what;
    std::function<ncclResult_t(int r, float* b, ncclComm_t c, cudaStream_t st)> call;
  };
  const std::vector<Case> cases = {
      {"count", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclAllReduce(b, b, r == 0 ? 2 : 4, ncclFloat32, ncclSum, c, st); }},
      {"op", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclAllReduce(b, b, 2, ncclFloat32, r == 0 ? ncclSum : ncclMax, c, st); }},
      {"dtype", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclAllReduce(b, b, 2, r == 0 ? ncclFloat32 : ncclInt32, ncclSum, c, st); }},
      {"root", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclBroadcast(b, b, 2, ncclFloat32, r, c, st); }},
      {"collective", [](int r, float* b, ncclComm_t c, cudaStream_t st) {
         return r == 0 ? ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, c, st) : ncclAllGather(b, b + 1, 1, ncclFloat32, c, st);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto comms = init_ranks(2);
    std::promise<void> first_called;
    auto first = first_called.get_future().share();
    std::vector<ncclResult_t> returned(2);
    run_ranks(2, [&](int r) {
      cudaStream_t st = new_stream();
      float* b = to_device(std::vector<float>{1, 2, 3, 4});
      if (r == 1) first.wait();  // rank 1 arrives last and detects the mismatch
      returned[r] = c.call(r, b, comms[r], st);
      if (r == 0) first_called.set_value();
      if (r == 0) return;
      for (int q = 0; q < 2; ++q) {
        ncclResult_t async = ncclSuccess;
        ASSERT_EQ(ncclCommGetAsyncError(comms[q], &async), ncclSuccess);
        EXPECT_EQ(async, ncclInvalidUsage);
        EXPECT_NE(std::string(ncclGetLastError(comms[q])).find("collective mismatch"), std::string::npos);
      }
      ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);  // no hang: completed with poisoned results
    });
    EXPECT_EQ(returned[0], ncclSuccess);
    EXPECT_EQ(returned[1], ncclInvalidUsage);
    for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  }
}

// ---- non-blocking communicators ----
TEST_F(NcclDouble, NonBlockingCommunicatorsReportProgressThroughGetAsyncError) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(2);
  auto poll = [](ncclComm_t c) {
    ncclResult_t state = ncclInProgress;
    int polls = 0;
    while (state == ncclInProgress) {
      EXPECT_EQ(ncclCommGetAsyncError(c, &state), ncclSuccess);
      ++polls;
      std::this_thread::yield();
    }
    EXPECT_EQ(state, ncclSuccess);
    return polls;
  };
  run_ranks(2, [&](int r) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ASSERT_EQ(ncclCommInitRankConfig(&comms[r], 2, id, r, &config), ncclInProgress);
    poll(comms[r]);
    cudaStream_t st = new_stream();
    double* b = to_device(std::vector<double>{0.5 * (r + 1)});
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat64, ncclSum, comms[r], st), ncclInProgress);
    EXPECT_GE(poll(comms[r]), 2);  // ncclInProgress at least once, then ncclSuccess (enqueued)
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    EXPECT_EQ(to_host(b, 1), (std::vector<double>{1.5}));
    ASSERT_EQ(ncclCommFinalize(comms[r]), ncclInProgress);
    poll(comms[r]);
  });
  destroy_all(comms);
  ncclConfig_t bad{};
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&c, 1, id, 0, &bad), ncclInvalidArgument);  // not NCCL_CONFIG_INITIALIZER
}

// ---- initialisation and misuse ----
TEST_F(NcclDouble, VersionUniqueIdsAndInitialisationRules) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 22809);
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(a.internal, b.internal, sizeof(a.internal)), 0);
  static_assert(sizeof(ncclUniqueId) == 128);
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, 2, a, 2), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&c, 0, a, 0), ncclInvalidArgument);
  const int same[] = {1, 1};
  ncclComm_t pair[2];
  EXPECT_EQ(ncclCommInitAll(pair, 2, same), ncclInvalidUsage);
  EXPECT_EQ(ncclCommInitAll(pair, 2, std::vector<int>{0, 7}.data()), ncclInvalidArgument);
  // Two ranks of one communicator on the same device: both fail, like NCCL's "Duplicate GPU detected".
  std::vector<ncclResult_t> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(0);
      ncclComm_t comm = nullptr;
      results[r] = ncclCommInitRank(&comm, 2, b, r);
      EXPECT_EQ(comm, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results, (std::vector<ncclResult_t>{ncclInvalidUsage, ncclInvalidUsage}));
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("Duplicate GPU"), std::string::npos);
  EXPECT_STREQ(ncclGetErrorString(ncclInProgress), "NCCL operation in progress");
}

TEST_F(NcclDouble, CountZeroIsANoOpEvenWithoutPeers) {
  auto comms = init_ranks(2);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t st = new_stream();
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comms[0], st), ncclSuccess);
  EXPECT_EQ(ncclReduceScatter(nullptr, nullptr, 0, ncclBfloat16, ncclAvg, comms[0], st), ncclSuccess);
  EXPECT_EQ(ncclAllGather(nullptr, nullptr, 0, ncclInt8, comms[0], st), ncclSuccess);
  EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);
  // Still in step with rank 1: the next real collective matches.
  run_ranks(2, [&](int r) {
    cudaStream_t s = new_stream();
    int32_t* x = to_device(std::vector<int32_t>{r + 1});
    ASSERT_EQ(ncclAllReduce(x, x, 1, ncclInt32, ncclMin, comms[r], s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(to_host(x, 1), (std::vector<int32_t>{1}));
  });
  destroy_all(comms);
}

TEST_F(NcclDouble, OverlapsNullBuffersAndFreedCommunicatorsAreMisuse) {
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    float* b = to_device(std::vector<float>(8, 1.0f));
    EXPECT_THROW(ncclAllReduce(b, b + 1, 4, ncclFloat32, ncclSum, comms[r], st), MisuseError);
    EXPECT_THROW(ncclReduceScatter(b, b + (1 - r) * 2, 2, ncclFloat32, ncclSum, comms[r], st), MisuseError);
    EXPECT_THROW(ncclAllGather(b + 1, b, 2, ncclFloat32, comms[r], st), MisuseError);
    EXPECT_THROW(ncclAllReduce(nullptr, b, 4, ncclFloat32, ncclSum, comms[r], st), MisuseError);
    EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);
  });
  destroy_all(comms);
  int count = 0;
  EXPECT_THROW(ncclCommCount(comms[0], &count), MisuseError);
  EXPECT_THROW(ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, comms[1], nullptr), MisuseError);
}

TEST_F(NcclDouble, FinalizeWaitsForOutstandingWorkThenDestroy) {
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    float* b = to_device(std::vector<float>{2});
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    ASSERT_EQ(ncclCommFinalize(comms[r]), ncclSuccess);
    EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);
    EXPECT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclInvalidUsage);
  });
  destroy_all(comms);
}

}  // namespace
