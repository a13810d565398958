// kernels/math/device_errors.h: deferred device errors: the per-device record a kernel fills when it meets a bad
// input (an out-of-range id), and the sink it reports through. The host reads the record when it next synchronises
// with the device (src/core/device_errors.h) and throws there.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"

#if defined(MPT_CUDA_EMULATION)
#include <cuda_emu/device.h>
#endif

namespace mpt::kernels {

// Who reported: DeviceErrorRecord::op. None (0) means the record is empty.
enum class DeviceErrorOp : int32_t { None = 0, Embedding = 1, EmbeddingBackward = 2, CrossEntropy = 3 };

// One per device, in device memory, all zero = no error. Only reporting threads touch it (under `lock`), so a
// kernel that meets no bad input never reads or writes it.
struct DeviceErrorRecord {
  unsigned int lock;          // 0 free, 1 held by a reporting thread
  int32_t op;                 // DeviceErrorOp
  unsigned long long launch;  // DeviceErrorSink::launch of the report kept
  int64_t position;           // index of the bad element in the op's input
  int64_t value;              // its value
  int64_t bound;              // the valid range is [0, bound)
};

// Passed by value to a kernel. The record keeps the first launch that reported (in device order) and, within it,
// the smallest position: integer comparisons under a lock, so the result does not depend on thread scheduling.
// record == nullptr: reports are dropped (kernel tests that do not look at errors).
struct DeviceErrorSink {
  DeviceErrorRecord* record = nullptr;
  DeviceErrorOp op = DeviceErrorOp::None;
  unsigned long long launch = 0;  // distinct per launch (src/core/device_errors.cpp counts them)

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)
  // Device code only. Spins on the record's lock: safe with sm_70+'s independent thread scheduling (and under the
  // emulation harness, whose fibers never switch inside the critical section). Error paths only: it is slow.
  MPT_DEVICE void report(int64_t position, int64_t value, int64_t bound) const {
    if (record == nullptr) return;
    while (atomicCAS(&record->lock, 0u, 1u) != 0u) {
    }
    __threadfence();
    volatile DeviceErrorRecord* r = record;
    if (r->op == static_cast<int32_t>(DeviceErrorOp::None) || (r->launch == launch && position < r->position)) {
      r->op = static_cast<int32_t>(op);
      r->launch = launch;
      r->position = position;
      r->value = value;
      r->bound = bound;
    }
    __threadfence();
    atomicExch(&record->lock, 0u);
  }
#endif
};

}  // namespace mpt::kernels
