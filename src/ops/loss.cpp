// src/ops/loss.cpp: MSE, L1, smooth-L1, Huber, BCE with logits and label-smoothed cross-entropy, composed of
// recorded ops in f32 (f64 for f64).
#include "mpt/ops/loss.h"

#include <cmath>

#include "mpt/ops/operators.h"
#include "mpt/ops/pointwise.h"
#include "mpt/ops/reduction.h"
#include "ops/dispatch.h"

namespace mpt::ops {

namespace {

DType wide_dtype(const Tensor& t) { return t.dtype() == DType::F64 ? DType::F64 : DType::F32; }

// The inputs widened to f32 (f64), after the shape, dtype and device checks every loss makes.
std::pair<Tensor, Tensor> widened(const Tensor& pred, const Tensor& target, const char* op) {
  MPT_CHECK(pred.defined() && target.defined(), "[{}] undefined input", op);
  detail::check_same_device({&pred, &target}, op);
  MPT_CHECK(is_floating(pred.dtype()) && is_floating(target.dtype()) && !is_fp8(pred.dtype()) &&
                !is_fp8(target.dtype()),
            "[{}] expected float tensors (f32, f16, bf16, f64), got {} and {}", op, pred.meta_str(),
            target.meta_str());
  MPT_CHECK(pred.shape() == target.shape(), "[{}] input {} and target {} must have one shape", op, pred.meta_str(),
            target.meta_str());
  const DType wide = wide_dtype(pred);
  return {pred.to(wide), target.to(wide)};
}

Tensor reduce(const Tensor& loss, LossReduction reduction) {
  switch (reduction) {
    case LossReduction::None: return loss;
    case LossReduction::Sum: return sum(loss);
    default: return mean(loss);
  }
}

}  // namespace

Tensor mse_loss(const Tensor& pred, const Tensor& target, LossReduction reduction) {
  const auto [p, t] = widened(pred, target, "mse_loss");
  const Tensor d = p - t;
  return reduce(d * d, reduction);
}

Tensor l1_loss(const Tensor& pred, const Tensor& target, LossReduction reduction) {
  const auto [p, t] = widened(pred, target, "l1_loss");
  return reduce(abs(p - t), reduction);
}

Tensor smooth_l1_loss(const Tensor& pred, const Tensor& target, double beta, LossReduction reduction) {
  MPT_CHECK(beta >= 0 && std::isfinite(beta), "[smooth_l1_loss] beta must be finite and >= 0, got {}", beta);
  const auto [p, t] = widened(pred, target, "smooth_l1_loss");
  const Tensor d = abs(p - t);
  if (beta == 0) return reduce(d, reduction);
  return reduce(where(lt(d, beta), d * d * (0.5 / beta), d - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& pred, const Tensor& target, double delta, LossReduction reduction) {
  MPT_CHECK(delta > 0 && std::isfinite(delta), "[huber_loss] delta must be finite and > 0, got {}", delta);
  const auto [p, t] = widened(pred, target, "huber_loss");
  const Tensor d = abs(p - t);
  return reduce(where(lt(d, delta), d * d * 0.5, (d - 0.5 * delta) * delta), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, LossReduction reduction,
                                        const Tensor& pos_weight) {
  const char* op = "binary_cross_entropy_with_logits";
  const auto [x, y] = widened(logits, target, op);
  const Tensor sp = softplus(-x);  // -log sigmoid(x)
  Tensor weight_term = sp;
  if (pos_weight.defined()) {
    detail::check_same_device({&logits, &pos_weight}, op);
    MPT_CHECK(broadcast_shapes(logits.shape(), pos_weight.shape(), op) == logits.shape(),
              "[{}] pos_weight {} must broadcast to the logits {}", op, pos_weight.meta_str(), logits.meta_str());
    const Tensor lw = (pos_weight.to(x.dtype()) - 1.0) * y + 1.0;
    weight_term = lw * sp;
  }
  return reduce((1.0 - y) * x + weight_term, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyLossOptions& o) {
  const char* op = "cross_entropy";
  MPT_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1, "[{}] label_smoothing must be in [0, 1], got {}", op,
            o.label_smoothing);
  if (o.label_smoothing == 0) {
    return softmax_cross_entropy(logits, targets,
                                 {.ignore_index = o.ignore_index, .reduction = o.reduction, .classes = o.classes})
        .loss;
  }
  // The smoothing term averages the logits over the classes, which the padding columns would join.
  MPT_CHECK(o.classes == 0, "[{}] label_smoothing ({}) with padded logits (classes = {} of {}) is not supported", op,
            o.label_smoothing, o.classes, logits.meta_str());
  const CrossEntropyResult ce =
      softmax_cross_entropy(logits, targets, {.ignore_index = o.ignore_index, .reduction = LossReduction::None});
  const double eps = o.label_smoothing;
  const DType wide = wide_dtype(logits);
  const int64_t vocab = logits.size(-1);
  // Rows that count: targets != ignore_index, compared in f64 on the CPU and in f32 on CUDA (exact for indices below
  // 2^24; f64 tensors are CPU-only).
  const DType exact = targets.device().is_cpu() ? DType::F64 : DType::F32;
  const Tensor valid = ne(targets.to(exact), static_cast<double>(o.ignore_index)).to(wide);
  // The smoothing term s_r = lse_r - mean_j x_rj per row, 0 where ignored; its gradient g_r (softmax_rj - 1/V).
  Tensor smooth;
  {
    const detail::GradRecorder grad({&logits});
    const Tensor x = logits.to(wide);
    smooth = (ce.saved.lse.reshape(valid.shape()) - mean(x, -1)) * valid;
    grad.record("LabelSmoothingBackward", {&smooth},
                [x = x.detach(), lse = ce.saved.lse.reshape(valid.shape()), valid, vocab,
                 dtype = logits.dtype()](const std::vector<Tensor>& g) {
                  if (!g[0].defined()) return std::vector<Tensor>{Tensor{}};
                  const Tensor p = exp(x - lse.unsqueeze(-1));
                  const Tensor scale = (g[0].to(x.dtype()) * valid).unsqueeze(-1);
                  return std::vector<Tensor>{((p - 1.0 / static_cast<double>(vocab)) * scale).to(dtype)};
                });
  }
  const Tensor rows = ce.loss * (1.0 - eps) + smooth * eps;
  switch (o.reduction) {
    case LossReduction::None: return rows;
    case LossReduction::Sum: return sum(rows);
    default: return sum(rows) / sum(valid);
  }
}

}  // namespace mpt::ops
