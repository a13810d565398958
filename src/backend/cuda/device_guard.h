// src/backend/cuda/device_guard.h: makes a CUDA device current for a scope and restores the previous one.
#pragma once

#include "backend/cuda/check.h"

namespace mpt::cuda_backend {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : target_(device) {
    MPT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != target_) MPT_CUDA_CHECK(cudaSetDevice(target_));
  }
  ~DeviceGuard() {
    if (previous_ != target_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int target_;
};

}  // namespace mpt::cuda_backend
