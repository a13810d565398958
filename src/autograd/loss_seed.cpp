// src/autograd/loss_seed.cpp: the per-thread innermost LossSeed and its seed, made on request.
#include "mpt/autograd/loss_seed.h"

#include "mpt/autograd/grad_mode.h"

namespace mpt::autograd {

namespace {
thread_local LossSeed* t_innermost = nullptr;
}  // namespace

LossSeed::LossSeed(Factory make) : make_(std::move(make)), outer_(t_innermost) {
  MPT_CHECK(static_cast<bool>(make_), "[LossSeed] the seed factory is empty");
  t_innermost = this;
}

LossSeed::~LossSeed() { t_innermost = outer_; }

Tensor LossSeed::request(Device device, DType dtype) {
  LossSeed* s = t_innermost;
  if (s == nullptr) return {};
  if (!s->seed_.defined()) {
    const NoGradGuard no_grad;  // a constant, not part of any graph
    Tensor seed = s->make_(device, dtype);
    MPT_CHECK(seed.defined() && seed.numel() == 1 && seed.device() == device && seed.dtype() == dtype,
              "[LossSeed] the factory must make one element of {} on {}, got {}", dtype, device.str(),
              seed.defined() ? seed.meta_str() : "an undefined tensor");
    s->seed_ = std::move(seed);
  }
  return s->seed_.device() == device && s->seed_.dtype() == dtype ? s->seed_ : Tensor{};
}

}  // namespace mpt::autograd
