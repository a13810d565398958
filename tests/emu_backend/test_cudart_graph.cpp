// tests/emu_backend/test_cudart_graph.cpp: the cudart double's stream capture and graph replay: recording, replay, capture errors, counters.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cublaslt_test_util.h"
#include "cuda_emu/counters.h"
#include "cuda_emu/device_work.h"
#include "cudart_test_util.h"

namespace {

using mpt::cuda_emu::MisuseError;

using mpt::cuda_emu::testing::add_one;
using mpt::cuda_emu::testing::device_floats;
using mpt::cuda_emu::testing::launch_add_one;
using mpt::cuda_emu::testing::to_host;

class Capture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  }
  void TearDown() override {
    cudaStreamCaptureStatus status{};
    if (cudaStreamIsCapturing(s, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t g = nullptr;
      (void)cudaStreamEndCapture(s, &g);
    }
    (void)cudaGetLastError();
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
  cudaStream_t s = nullptr;
};

TEST_F(Capture, RecordsWithoutRunningAndReplaysInOrder) {
  float* x = device_floats({1, 2, 3});
  float* y = device_floats({0, 0, 0});
  float* z = device_floats({9, 9, 9});
  float* w = device_floats({5, 5, 5});
  float* m = device_floats({7, 7, 7});
  cudaEvent_t ev = nullptr;
  ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  mpt::cuda_emu::reset_counters();
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status{};
  unsigned long long id = 0;
  ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_NE(id, 0u);
  ASSERT_EQ(launch_add_one(x, y, 3, s), cudaSuccess);  // y = x + 1
  ASSERT_EQ(launch_add_one(y, z, 3, s), cudaSuccess);  // z = y + 1
  ASSERT_EQ(cudaMemcpyAsync(w, z, 3 * sizeof(float), cudaMemcpyDeviceToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(m, 0, 3 * sizeof(float), s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ev, s), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(mpt::cuda_emu::to_string(mpt::cuda_emu::counters()), "");  // recorded, not run
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(to_host(y, 3), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(to_host(z, 3), (std::vector<float>{9, 9, 9}));
  EXPECT_EQ(to_host(w, 3), (std::vector<float>{5, 5, 5}));
  EXPECT_EQ(to_host(m, 3), (std::vector<float>{7, 7, 7}));

  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);  // the executable graph keeps its own copy
  mpt::cuda_emu::reset_counters();
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // A replayed step costs one graph launch; its nodes count as the work they do.
  EXPECT_EQ(mpt::cuda_emu::to_string(mpt::cuda_emu::counters()),
            "kernel_launches=2 kernel_bytes_read=24 kernel_bytes_written=24 graph_launches=1 d2d=1 d2d_bytes=12 memsets=1 stream_syncs=1 syncs=1 event_records=1");
  EXPECT_EQ(cudaEventQuery(ev), cudaSuccess);
  EXPECT_EQ(to_host(y, 3), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(to_host(z, 3), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(to_host(w, 3), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(to_host(m, 3), (std::vector<float>{0, 0, 0}));

  // A second replay reads the inputs as they are now.
  const std::vector<float> x2 = {10, 20, 30};
  ASSERT_EQ(cudaMemcpy(x, x2.data(), sizeof(float) * 3, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(to_host(w, 3), (std::vector<float>{12, 22, 32}));
  EXPECT_EQ(mpt::cuda_emu::counters().graph_launches, 2u);

  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);
  for (float* p : {x, y, z, w, m}) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(Capture, LegacyStreamCannotBeCaptured) {
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeRelaxed), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
}

TEST_F(Capture, PageableCopyInvalidatesTheCapture) {
  float* y = device_floats({0, 0, 0});
  std::vector<float> host = {1, 2, 3};
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(y, host.data(), 12, cudaMemcpyHostToDevice, s), cudaErrorStreamCaptureUnsupported);
  EXPECT_NE(mpt::cuda_emu::capture_failure().find("pageable"), std::string::npos);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ(launch_add_one(y, y, 3, s), cudaErrorStreamCaptureInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(&status);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  // Pinned memory can be captured; the stream works normally again after the capture.
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 12), cudaSuccess);
  pinned[0] = 4, pinned[1] = 5, pinned[2] = 6;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(y, pinned, 12, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(to_host(y, 3), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(y), cudaSuccess);
}

// Each refused call invalidates the capture; the next capture starts clean.
TEST_F(Capture, SynchronisingCallsAreRefused) {
  float* y = device_floats({0, 0, 0});
  std::vector<float> host(3);
  const auto expect_invalidated = [&](cudaError_t got, cudaError_t want, const char* what) {
    EXPECT_EQ(got, want) << what;
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated) << what;
    (void)cudaGetLastError();
  };
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  expect_invalidated(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize");
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  expect_invalidated(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported, "cudaStreamQuery");
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  expect_invalidated(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported, "cudaDeviceSynchronize");
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);  // s is a blocking stream
  expect_invalidated(cudaMemcpy(host.data(), y, 12, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureImplicit,
                     "cudaMemcpy");
  void* p = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  expect_invalidated(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported, "cudaMalloc (Global)");
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  expect_invalidated(cudaMallocAsync(&p, 16, s), cudaErrorNotSupported, "cudaMallocAsync");
  EXPECT_NE(mpt::cuda_emu::capture_failure().find("graph memory nodes"), std::string::npos);

  // Relaxed mode allows cudaMalloc.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(y), cudaSuccess);
}

TEST_F(Capture, ReplayAfterACapturedBufferWasFreedIsAUseAfterFree) {
  float* x = device_floats({1, 2, 3});
  float* y = device_floats({0, 0, 0});
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(launch_add_one(x, y, 3, s), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaFree(y), cudaSuccess);
  try {
    (void)cudaGraphLaunch(exec, s);
    ADD_FAILURE() << "the replay used freed memory without a MisuseError";
  } catch (const MisuseError& e) {
    EXPECT_NE(std::string(e.what()).find("use after free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaFree(x), cudaSuccess);
}

TEST_F(Capture, ForkedStreamsMustJoinBack) {
  float* x = device_floats({1, 2, 3});
  float* y = device_floats({0, 0, 0});
  float* z = device_floats({0, 0, 0});
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(cudaStreamCreate(&side), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const bool joins : {false, true}) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(launch_add_one(x, y, 3, s), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);  // side joins the capture
    cudaStreamCaptureStatus status{};
    ASSERT_EQ(cudaStreamIsCapturing(side, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    ASSERT_EQ(launch_add_one(y, z, 3, side), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
    if (joins) {
      ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
    }
    cudaGraph_t graph = nullptr;
    if (!joins) {
      EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureUnjoined);
      (void)cudaGetLastError();
      continue;
    }
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    ASSERT_EQ(cudaStreamIsCapturing(side, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
    EXPECT_EQ(to_host(z, 3), (std::vector<float>{0, 0, 0}));
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(to_host(z, 3), (std::vector<float>{3, 4, 5}));
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  EXPECT_EQ(cudaEventDestroy(fork), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(join), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
  for (float* p : {x, y, z}) EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(Capture, CublasLtMatmulIsRecordedAndReplayed) {
  using namespace mpt::lt_test;
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  {
    Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
    Dev<float> a(kA), b(kB), c(kOnes), d(std::vector<float>{0, 0, 0, 0});
    const float alpha = 2, beta = 3;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    mpt::cuda_emu::reset_counters();
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(cublasLtMatmul(handle, g.desc, &alpha, a.p, g.a, b.p, g.b, &beta, c.p, g.c, d.p, g.d, nullptr, nullptr,
                             0, s),
              CUBLAS_STATUS_SUCCESS)
        << mpt::cuda_emu::cublaslt_last_failure();
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(mpt::cuda_emu::counters().matmuls, 0u);
    EXPECT_EQ(d.get(), (std::vector<float>{0, 0, 0, 0}));
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_EQ(d.get(), (std::vector<float>{11, 23, 13, 25}));
    }
    EXPECT_EQ(mpt::cuda_emu::counters().matmuls, 2u);
    EXPECT_EQ(mpt::cuda_emu::counters().graph_launches, 2u);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  EXPECT_EQ(cublasLtDestroy(handle), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
