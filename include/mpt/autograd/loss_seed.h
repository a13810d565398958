// mpt/autograd/loss_seed.h: the gradient a loss will be backpropagated from, promised before its forward.
#pragma once

#include <functional>

#include "mpt/core/tensor.h"

namespace mpt::autograd {

// While a LossSeed is alive on a thread, the loss computed there will be backpropagated from one known tensor
// (loss.backward(seed)): gradient accumulation's 1 / micro-batches times the loss scale. A loss that can use it asks
// for it (LanguageModel::loss passes it to softmax_cross_entropy as options.gradient, which then writes the
// gradient of the logits in the forward pass: llm.c's fused classifier); the owner then seeds backward with made().
// Nesting: the innermost LossSeed answers; destroying it restores the outer one.
class LossSeed {
 public:
  // make(device, dtype): the one-element seed for a loss of `dtype` on `device`, called at most once, on request.
  using Factory = std::function<Tensor(Device, DType)>;
  explicit LossSeed(Factory make);
  ~LossSeed();
  LossSeed(const LossSeed&) = delete;
  LossSeed& operator=(const LossSeed&) = delete;

  // The innermost LossSeed's seed for a loss of `dtype` on `device`, made on the first request; undefined when no
  // LossSeed is alive on this thread, or when this one has already made a seed for another dtype or device.
  static Tensor request(Device device, DType dtype);

  // The seed made in this scope, undefined if nothing asked for one.
  const Tensor& made() const { return seed_; }

 private:
  Factory make_;
  Tensor seed_;
  LossSeed* outer_;
};

}  // namespace mpt::autograd
