// src/optim/clip.cpp: clip_grad_norm_ over ops::global_l2_norm and ops::scale.
#include "mpt/optim/clip.h"

#include <cmath>

#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/optim.h"
#include "mpt/ops/reduction.h"

namespace mpt::optim {

namespace {

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params, double max_norm) {
  MPT_CHECK(max_norm >= 0, "[clip_grad_norm_] max_norm must be >= 0, got {}", max_norm);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    MPT_CHECK(params[i].defined(), "[clip_grad_norm_] parameter {} is an undefined tensor", i);
    Tensor g = params[i].grad();
    if (g.defined()) grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::function<double(double)>& combine) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads = defined_grads(params, max_norm);
  double local = 0;
  if (!grads.empty()) {
    const double norm = ops::global_l2_norm(grads).item<double>();
    local = norm * norm;
  }
  const double total = std::sqrt(combine(local));
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (Tensor& g : grads) g.copy_(ops::scale(g, coef));
  return Tensor::full({}, total, DType::F32);
}

ClipCoefficient clip_coefficient(const std::vector<Tensor>& params, double max_norm) {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params, max_norm);
  if (grads.empty()) return {};
  Tensor total = ops::global_l2_norm(grads);
  return {total, ops::clip_coefficient(total, max_norm)};
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  autograd::NoGradGuard no_grad;
  const ClipCoefficient c = clip_coefficient(params, max_norm);
  if (!c.total_norm.defined()) return Tensor::zeros({});
  ops::mul_(defined_grads(params, max_norm), c.coefficient);  // on the device; a coefficient of 1 keeps the bits
  return c.total_norm;
}

}  // namespace mpt::optim
