// tests/emu_backend/nccl_test_util.h: the NCCL double tests' harness: one thread per rank on its own device, buffers, the fixture.
#pragma once

#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"

namespace mpt::nccl_test {

// ---- harness: one std::thread per rank, each on its own device ----
template <class F>
void run_ranks(int n, F&& body) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

inline std::vector<ncclComm_t> init_ranks(int n) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(n);
  run_ranks(n, [&](int r) { ASSERT_EQ(ncclCommInitRank(&comms[r], n, id, r), ncclSuccess); });
  return comms;
}

inline void destroy_all(const std::vector<ncclComm_t>& comms) {
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

template <class T>
T* to_device(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, host.size() * sizeof(T))), cudaSuccess);
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> to_host(const T* dev, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

inline cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  return s;
}

class NcclDouble : public ::testing::Test {
 protected:
  void SetUp() override { mpt::cuda_emu::nccl_reset_controls(); }
  void TearDown() override {
    mpt::cuda_emu::nccl_reset_controls();
    mpt::cuda_emu::set_wait_timeout(saved_timeout_);
    for (int d = 0; d < 4; ++d) mpt::cuda_emu::set_compute_capability(d, 90);
  }
  std::chrono::milliseconds saved_timeout_ = mpt::cuda_emu::wait_timeout();
};

// Runs one collective per rank (on a fresh stream) and returns each rank's receive buffer.
template <class T, class Call>
std::vector<std::vector<T>> collective(int n, const std::vector<std::vector<T>>& send, size_t recv_count, Call call) {
  auto comms = init_ranks(n);
  std::vector<std::vector<T>> out(n);
  run_ranks(n, [&](int r) {
    T* s = to_device(send[r]);
    T* d = to_device(std::vector<T>(recv_count, T{}));
    cudaStream_t st = new_stream();
    ASSERT_EQ(call(s, d, comms[r], st), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    out[r] = to_host(d, recv_count);
  });
  destroy_all(comms);
  return out;
}

}  // namespace mpt::nccl_test
