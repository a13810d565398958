// src/ops/dispatch.cpp: argument checks shared by the ops.
#include "ops/dispatch.h"

#include <algorithm>

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

BinaryPlan plan_binary(const Tensor& a_in, const Tensor& b_in, const char* op) {
  check_same_device({&a_in, &b_in}, op);
  check_same_dtype({&a_in, &b_in}, op);
  check_f64_on_cpu(a_in, op);
  const Shape& as = a_in.shape();
  MPT_CHECK(b_in.dim() <= a_in.dim() && broadcast_shapes(as, b_in.shape(), op) == as,
            "[{}] b {} must broadcast to a's shape {} (the result has a's shape)", op, b_in.meta_str(), shape_str(as));
  Shape core = b_in.shape();
  core.erase(core.begin(), std::find_if(core.begin(), core.end(), [](int64_t s) { return s != 1; }));
  const bool suffix = std::equal(core.begin(), core.end(), as.end() - static_cast<std::ptrdiff_t>(core.size()));
  BinaryPlan plan{a_in.contiguous(), suffix ? b_in.contiguous() : b_in.expand(as).contiguous(), 0};
  plan.period = std::max<int64_t>(1, plan.b.numel());
  return plan;
}

Tensor expand_left(const Tensor& a, const Tensor& b, const char* op) {
  if (!a.defined() || !b.defined()) return {};  // the op's own checks name the undefined argument
  const Shape common = broadcast_shapes(a.shape(), b.shape(), op);
  return common == a.shape() ? Tensor{} : a.expand(common);
}

void* stream_of(Device device) { return device.is_cpu() ? nullptr : Stream::current(device).native(); }

}  // namespace mpt::ops::detail
