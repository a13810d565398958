// mpt/ops/loss.h: regression losses, binary cross-entropy with logits, and cross-entropy with label smoothing.
#pragma once

#include <cstdint>

#include "mpt/core/tensor.h"
#include "mpt/ops/softmax.h"

namespace mpt::ops {

// Every loss here computes in f32 (f64 for f64 inputs) whatever the inputs' float dtype, like the losses PyTorch's
// autocast runs in float32, and returns f32 (f64): a 0-d tensor for Mean and Sum, the elementwise loss for None. The
// gradient flows back to the inputs in their own dtype. Prediction and target must have one shape and device; an
// mpt::Error names the loss and both tensors otherwise. Composed of recorded ops, so autograd differentiates them.

// mean((pred - target)^2)
Tensor mse_loss(const Tensor& pred, const Tensor& target, LossReduction reduction = LossReduction::Mean);
// mean(|pred - target|)
Tensor l1_loss(const Tensor& pred, const Tensor& target, LossReduction reduction = LossReduction::Mean);
// d = |pred - target|: 0.5 d^2 / beta where d < beta, else d - 0.5 beta (torch's smooth_l1_loss; beta 0 is L1).
Tensor smooth_l1_loss(const Tensor& pred, const Tensor& target, double beta = 1.0,
                      LossReduction reduction = LossReduction::Mean);
// 0.5 d^2 where d < delta, else delta (d - 0.5 delta) (torch's huber_loss).
Tensor huber_loss(const Tensor& pred, const Tensor& target, double delta = 1.0,
                  LossReduction reduction = LossReduction::Mean);
// -[w_p y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], computed stably as (1 - y) x + (1 + (w_p - 1) y) softplus(-x)
// (torch's binary_cross_entropy_with_logits). target: probabilities in [0, 1], logits' shape; pos_weight (optional):
// broadcast over the logits (a [classes] vector), 1 when undefined.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        LossReduction reduction = LossReduction::Mean, const Tensor& pos_weight = {});

struct CrossEntropyLossOptions {
  int64_t ignore_index = -100;                    // rows with this target contribute 0 and are not counted
  LossReduction reduction = LossReduction::Mean;  // Mean divides by the number of non-ignored rows
  // eps in [0, 1]: the target distribution is (1 - eps) onehot + eps / V, i.e.
  // loss_r = (1 - eps) (lse_r - x_r[t_r]) + eps (lse_r - mean_j x_rj) (torch's label_smoothing).
  double label_smoothing = 0;
  // As ops::CrossEntropyOptions::classes: 0, every entry of the last dimension is a class; otherwise only the first
  // `classes` are and the rest are padding (no part in the softmax, gradient 0). Not supported together with
  // label_smoothing > 0 (an mpt::Error).
  int64_t classes = 0;
};
// Cross-entropy of logits [..., V] (f32, f16, bf16; f64 on the CPU) against class indices [...] (i64 or i32): the
// fused ops::softmax_cross_entropy, plus the smoothing term when label_smoothing > 0 (its gradient
// eps (softmax - 1/V) g is computed in f32 beside the fused kernel's).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyLossOptions& options = {});

}  // namespace mpt::ops
