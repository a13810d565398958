// src/train/accumulate.cpp: gradient accumulation over micro-batches.
#include "mpt/train/accumulate.h"

#include "mpt/autograd/loss_seed.h"
#include "mpt/ops/elementwise.h"

namespace mpt::train {

AccumulateResult accumulate_gradients(int64_t k, const std::function<MicroBatchLoss(int64_t)>& micro_batch,
                                      const AccumulateOptions& o) {
  MPT_CHECK(k >= 1, "[accumulate_gradients] expected k >= 1 micro-batches, got {}", k);
  MPT_CHECK(static_cast<bool>(micro_batch), "[accumulate_gradients] micro_batch is empty");
  const bool by_tokens = o.normalization == LossNormalization::TokenSum;
  MPT_CHECK(!by_tokens || o.total_tokens > 0,
            "[accumulate_gradients] TokenSum normalisation needs total_tokens > 0, got {}", o.total_tokens);
  const double divisor = by_tokens ? static_cast<double>(o.total_tokens) : static_cast<double>(k);
  // The gradient backward brings to a micro-batch's loss: what scale(loss, 1 / divisor), then scale_loss, pass back
  // from 1 (a GradScaler's multiplication passes back its scale), with the same ops, so the same bits.
  const auto seed_for = [&](Device device, DType dtype) {
    Tensor seed = Tensor::ones({}, dtype, device);
    if (o.scale_loss) seed = o.scale_loss(seed);
    return ops::scale(seed, 1.0 / divisor);
  };
  AccumulateResult r;
  for (int64_t i = 0; i < k; ++i) {
    MicroBatchLoss mb;
    Tensor seed;
    {
      // Offered to the loss before its forward (autograd::LossSeed): GPT's and Llama's cross-entropy then write the
      // logits' gradient in the forward pass.
      autograd::LossSeed offer(seed_for);
      mb = micro_batch(i);
      seed = offer.made();
    }
    MPT_CHECK(mb.loss.defined() && mb.loss.numel() == 1 && mb.loss.requires_grad(),
              "[accumulate_gradients] micro-batch {} returned {}: expected a one-element loss that requires grad", i,
              mb.loss.defined() ? mb.loss.meta_str() : "an undefined tensor");
    if (seed.defined() && seed.dtype() == mb.loss.dtype() && seed.device() == mb.loss.device()) {
      mb.loss.backward(seed.view(mb.loss.shape()));
    } else {
      Tensor normalised = ops::scale(mb.loss, 1.0 / divisor);
      if (o.scale_loss) normalised = o.scale_loss(normalised);
      normalised.backward();
    }
    Tensor part = mb.loss.detach();  // the logged loss stays on the device: no host read per micro-batch
    if (part.dtype() != DType::F64) part = part.to(DType::F32);
    part = ops::scale(part.reshape({}), 1.0 / divisor);
    r.loss = r.loss.defined() ? ops::add(r.loss, part) : part;
    r.tokens += mb.tokens;
  }
  MPT_CHECK(!by_tokens || r.tokens == o.total_tokens,
            "[accumulate_gradients] the micro-batches reported {} tokens but total_tokens was {}: the gradients were "
            "normalised by the wrong count", r.tokens, o.total_tokens);
  return r;
}

}  // namespace mpt::train
