// src/optim/clip.cpp: clip_grad_norm_ over ops::global_l2_norm and ops::scale.
#include "mpt/optim/clip.h"

#include <cmath>

#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/reduction.h"

namespace mpt::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  MPT_CHECK(max_norm >= 0, "[clip_grad_norm_] max_norm must be >= 0, got {}", max_norm);
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    MPT_CHECK(p.defined(), "[clip_grad_norm_] parameter {} is an undefined tensor", grads.size());
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(std::move(g));
  }
  if (grads.empty()) return Tensor::zeros({});
  Tensor total = ops::global_l2_norm(grads);
  const double coef = max_norm / (total.item<double>() + 1e-6);
  if (coef >= 1) return total;  // NaN falls through and scales (torch's clamp keeps NaN)
  for (Tensor& g : grads) g.copy_(ops::scale(g, coef));
  return total;
}

}  // namespace mpt::optim
