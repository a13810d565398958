// mpt/core/readback.h: device scalars read by the host without stalling the stream: one asynchronous copy into
// pinned memory behind an event (the loss and the loss scale at logging steps).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mpt/core/stream.h"
#include "mpt/core/tensor.h"

namespace mpt {

// Usage per logging step: readback.request({loss, scaler.scale_tensor()}); ... later (the next step, or once the
// work is done): if (auto v = readback.poll()) log(*v). On the CPU the values are read at request().
class ScalarReadback {
 public:
  explicit ScalarReadback(Device device, int64_t capacity = 16);
  ~ScalarReadback();
  ScalarReadback(const ScalarReadback&) = delete;
  ScalarReadback& operator=(const ScalarReadback&) = delete;

  // Gathers one-element floating tensors of the device into a device buffer (device copies, converted to f32),
  // starts one device-to-host copy of it into pinned memory on the current stream and records an event. Nothing
  // waits. A request replaces the previous one.
  void request(const std::vector<Tensor>& values);
  // The last request's values once its copy has landed (an event query: never waits), else nothing.
  std::optional<std::vector<double>> poll() const;
  // The last request's values, waiting on its event if they have not landed yet.
  std::vector<double> wait() const;

 private:
  std::vector<double> values() const;

  Device device_;
  int64_t capacity_;
  int64_t count_ = -1;  // values of the last request; -1: none yet
  Tensor staging_;      // f32 [capacity] on the device
  float* pinned_ = nullptr;
  std::vector<double> host_;  // the CPU's values
  Event event_;
};

}  // namespace mpt
