// src/autograd/fresh_offers.h: the fresh offers (leaves' gradient destinations) of the node running on this thread.
#pragma once

#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::autograd::detail {

// While alive, is_fresh_offer(t) is true for the defined tensors of `offers` (the engine's, around one node's run);
// the outer scope's list comes back at the end (a checkpointed block's nested pass runs inside a node).
class FreshOffers {
 public:
  explicit FreshOffers(const std::vector<Tensor>* offers);
  ~FreshOffers();
  FreshOffers(const FreshOffers&) = delete;
  FreshOffers& operator=(const FreshOffers&) = delete;

 private:
  const std::vector<Tensor>* outer_;
};

}  // namespace mpt::autograd::detail
