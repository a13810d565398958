// src/core/readback.cpp: ScalarReadback: device scalars to pinned host memory behind an event.
#include "mpt/core/readback.h"

#include "core/backend.h"
#include "mpt/core/memory.h"

namespace mpt {

ScalarReadback::ScalarReadback(Device device, int64_t capacity)
    : device_(device), capacity_(capacity), event_(device) {
  MPT_CHECK(capacity >= 1, "[ScalarReadback] capacity must be >= 1, got {}", capacity);
  if (device_.is_cuda()) {
    staging_ = Tensor::empty({capacity}, DType::F32, device_);
    pinned_ = static_cast<float*>(cuda_backend::host_alloc_pinned(static_cast<size_t>(capacity) * sizeof(float)));
  }
}

ScalarReadback::~ScalarReadback() { cuda_backend::host_free_pinned(pinned_); }

void ScalarReadback::request(const std::vector<Tensor>& values) {
  const auto n = static_cast<int64_t>(values.size());
  MPT_CHECK(n >= 1 && n <= capacity_, "[ScalarReadback] request of {} values, capacity {}", n, capacity_);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& v = values[static_cast<size_t>(i)];
    MPT_CHECK(v.defined() && v.numel() == 1 && is_floating(v.dtype()) && v.device() == device_,
              "[ScalarReadback] value {} must be a one-element floating tensor on {}, got {}", i, device_.str(),
              v.defined() ? v.meta_str() : std::string("undefined"));
  }
  count_ = n;
  if (device_.is_cpu()) {
    host_.clear();
    for (const Tensor& v : values) host_.push_back(v.item<double>());
    return;
  }
  for (int64_t i = 0; i < n; ++i) staging_.slice(0, i, i + 1).copy_(values[static_cast<size_t>(i)].reshape({1}));
  const Stream stream = Stream::current(device_);
  copy_bytes(pinned_, Device::cpu(), staging_.data_ptr(), device_, static_cast<size_t>(n) * sizeof(float), stream);
  event_.record(stream);
}

std::vector<double> ScalarReadback::values() const {
  if (device_.is_cpu()) return host_;
  return std::vector<double>(pinned_, pinned_ + count_);
}

std::optional<std::vector<double>> ScalarReadback::poll() const {
  MPT_CHECK(count_ >= 0, "[ScalarReadback] poll() before any request()");
  if (!event_.ready()) return std::nullopt;
  return values();
}

std::vector<double> ScalarReadback::wait() const {
  MPT_CHECK(count_ >= 0, "[ScalarReadback] wait() before any request()");
  event_.synchronize();
  return values();
}

}  // namespace mpt
