// src/ops/dispatch.cpp: argument checks shared by the ops.
#include "ops/dispatch.h"

#include "mpt/core/stream.h"

namespace mpt::ops::detail {

Device check_same_device(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  int i = 0;
  for (const Tensor* t : tensors) {
    MPT_CHECK(t->defined(), "[{}] argument {} is an undefined tensor", op, i);
    if (first == nullptr) first = t;
    MPT_CHECK(t->device() == first->device(), "[{}] all tensors must be on one device: argument {} is {}, argument 0 "
              "is {}", op, i, t->meta_str(), first->meta_str());
    ++i;
  }
  MPT_CHECK(first != nullptr, "[{}] no tensors", op);
  return first->device();
}

void check_same_dtype(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  int i = 0;
  for (const Tensor* t : tensors) {
    if (first == nullptr) first = t;
    MPT_CHECK(t->dtype() == first->dtype(), "[{}] dtype mismatch: argument {} is {}, argument 0 is {}", op, i,
              t->meta_str(), first->meta_str());
    ++i;
  }
}

void check_shape(const Tensor& t, const Shape& expected, const char* what, const char* op) {
  MPT_CHECK(t.shape() == expected, "[{}] {} must have shape {}, got {}", op, what, shape_str(expected), t.meta_str());
}

void check_f64_on_cpu(const Tensor& t, const char* op) {
  MPT_CHECK(t.dtype() != DType::F64 || t.device().is_cpu(), "[{}] f64 is a CPU reference dtype, got {}", op,
            t.meta_str());
}

void* stream_of(Device device) { return device.is_cpu() ? nullptr : Stream::current(device).native(); }

}  // namespace mpt::ops::detail
