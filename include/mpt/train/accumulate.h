// mpt/train/accumulate.h: gradient accumulation: k micro-batches per optimizer step, the loss normalised once.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "mpt/core/tensor.h"

namespace mpt::train {

// How the k micro-batch losses combine into the batch loss whose gradient backward accumulates.
enum class LossNormalization {
  MicroBatchMean,  // each micro-batch loss is a mean; the batch loss is their mean (loss_i / k each)
  TokenSum,        // each micro-batch loss is a sum over its tokens; the batch loss is the sum over the total token
                   // count (loss_i / total_tokens): exact for micro-batches with different numbers of counted tokens
};

struct MicroBatchLoss {
  MicroBatchLoss() = default;
  // Implicit from a loss, so a micro-batch function may return the loss Tensor itself.
  MicroBatchLoss(Tensor loss_, int64_t tokens_ = 0) : loss(std::move(loss_)), tokens(tokens_) {}  // NOLINT

  Tensor loss;         // a scalar that requires grad
  int64_t tokens = 0;  // TokenSum: the tokens the loss summed over (reported back; the divisor is total_tokens)
};

struct AccumulateOptions {
  LossNormalization normalization = LossNormalization::MicroBatchMean;
  int64_t total_tokens = 0;  // TokenSum: the tokens of all k micro-batches, known before the first backward
  // Applied to each normalised micro-batch loss before its backward, e.g. a GradScaler's scale().
  std::function<Tensor(const Tensor&)> scale_loss;
};

struct AccumulateResult {
  // The batch loss (the normalised sum of the micro-batch losses, detached), 0-d f32 (f64 for f64 losses) on the
  // losses' device. Nothing reads it back: value() does (on CUDA it waits for the device), or a ScalarReadback
  // (mpt/core/readback.h) without stalling the stream.
  Tensor loss;
  int64_t tokens = 0;  // sum of the micro-batches' token counts
  double value() const { return loss.item<double>(); }
};

// Runs micro_batch(i) for i = 0..k-1, each followed by backward of its normalised (and scaled) loss, so the
// parameters' gradients accumulate the gradient of the batch loss (into FP32 masters under Autocast). The caller
// zeroes gradients before and steps the optimizer after. Only one micro-batch's activations are alive at a time.
AccumulateResult accumulate_gradients(int64_t k, const std::function<MicroBatchLoss(int64_t)>& micro_batch,
                                      const AccumulateOptions& options = {});

}  // namespace mpt::train
