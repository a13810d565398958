// tests/emu_backend/cudart_test_util.h: a tiny kernel and device buffers shared by the cudart double's tests.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <vector>

#include "cuda_emu/cuda_emu.h"

namespace mpt::cuda_emu::testing {

// y[i] = x[i] + 1 for i < n.
__global__ inline void add_one(const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i] + 1.0f;
}

inline cudaError_t launch_add_one(const float* x, float* y, int n, cudaStream_t s) {
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  return mpt::cuda_emu::launch_sized(mpt::cuda_emu::Traffic{bytes, bytes}, add_one, dim3((n + 63) / 64), dim3(64), 0,
                                     s, x, y, n);
}

// A device copy of `host` (cudaMalloc + a synchronous upload).
inline float* device_floats(const std::vector<float>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<float*>(p);
}

// A stream-ordered pool of device 0's memory, as mptrain's allocator makes one (nullptr if the double refused).
inline cudaMemPool_t device_pool() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  return pool;
}

inline std::vector<float> to_host(const float* d, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

}  // namespace mpt::cuda_emu::testing
