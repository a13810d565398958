// src/nn/recompute.h: a block's activation checkpoint that recomputes under the Autocast policy its forward ran in.
#pragma once

#include <functional>

#include "mpt/core/tensor.h"

namespace mpt::nn::detail {

// autograd::checkpoint(fn, x), with the Autocast policy in force now (if any) in force again while backward recomputes
// fn: backward runs outside the forward's Autocast scope (train::Trainer, a user's loop), and a recomputation under no
// policy would run FP32 GEMMs where the forward ran BF16 or FP8 ones, so the gradient would be another graph's.
// PyTorch's checkpoint restores the autocast state likewise.
Tensor checkpoint_under_policy(std::function<Tensor(const Tensor&)> fn, const Tensor& x);

}  // namespace mpt::nn::detail
