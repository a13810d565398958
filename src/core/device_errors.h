// src/core/device_errors.h: deferred device errors: a kernel reports a bad input (an out-of-range id) into its device's
// error record instead of the host reading its inputs back; the host throws at its next synchronisation.
#pragma once

#include "kernels/math/device_errors.h"
#include "mpt/core/device.h"

namespace mpt {

// The sink for one launch of `op` on CUDA device `device` (pass it to the kernel by value). The device's record is
// allocated and zeroed on first use (one synchronising copy, once per device and process).
kernels::DeviceErrorSink device_error_sink(Device device, kernels::DeviceErrorOp op);

// Synchronises `device`'s current stream, which reads its error record: throws the mpt::Error of the report kept
// (op, position, bad value, valid range) and clears the record, so the next call works. No-op for the CPU.
void check_device_errors(Device device);

namespace detail {
// The hook behind check_device_errors, called by cuda_backend::stream_synchronize right after the stream finished:
// reads the record of `device` on `stream` (nothing when no kernel on this device ever took a sink) and throws as
// above. Re-entered by its own synchronising copies, where it does nothing.
void check_device_errors_after_sync(int device, void* stream);
}  // namespace detail

}  // namespace mpt
