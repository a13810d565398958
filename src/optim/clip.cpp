// src/optim/clip.cpp: clip_grad_norm_ over ops::global_l2_norm and ops::scale.
#include "mpt/optim/clip.h"

#include <algorithm>
#include <cmath>

#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/optim.h"
#include "mpt/ops/pointwise.h"
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

// The global norm of gradients sharded across processes: this process's sum of squares (read back), combined.
double combined_norm(const std::vector<Tensor>& grads, const std::function<double(double)>& combine) {
  double local = 0;
  if (!grads.empty()) {
    const double norm = ops::global_l2_norm(grads).item<double>();
    local = norm * norm;
  }
  return std::sqrt(combine(local));
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::function<double(double)>& combine) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads = defined_grads(params, max_norm);
  const double total = combined_norm(grads, combine);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (Tensor& g : grads) g.copy_(ops::scale(g, coef));
  return Tensor::full({}, total, DType::F32);
}

ClipCoefficient clip_coefficient(const std::vector<Tensor>& params, double max_norm, Device device,
                                 const std::function<double(double)>& combine) {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params, max_norm);
  const double total = combined_norm(grads, combine);
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);
  // The gradients' dtype class, as clip_coefficient's: f64 for f64 gradients, else f32.
  const DType d = !grads.empty() && grads[0].dtype() == DType::F64 ? DType::F64 : DType::F32;
  return {Tensor::full({}, total, d, device), Tensor::full({}, coef, d, device)};
}

ClipCoefficient clip_coefficient_on_device(const std::vector<Tensor>& params, double max_norm, Device device,
                                           const std::function<void(Tensor&)>& combine) {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params, max_norm);
  for (const Tensor& g : grads) {
    MPT_CHECK(g.dtype() != DType::F64 && g.device() == device, "[clip_coefficient_on_device] expected f32, bf16 or "
              "f16 gradients on {}, got {} (f64 gradients combine on the host: clip_coefficient)", device,
              g.meta_str());
  }
  Tensor sum_of_squares = Tensor::zeros({1}, DType::F32, device);
  if (!grads.empty()) {
    const Tensor local = ops::global_l2_norm(grads);
    sum_of_squares = ops::mul(local, local).reshape({1});
  }
  combine(sum_of_squares);
  Tensor total = ops::sqrt(sum_of_squares).reshape({});
  Tensor coefficient = ops::clip_coefficient(total, max_norm);
  return {std::move(total), std::move(coefficient)};
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
