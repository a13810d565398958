// src/autograd/fresh_offers.h: the offers of the node running on this thread, leaves' destinations made on demand.
#pragma once

#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::autograd {
class AccumulateGrad;
}

namespace mpt::autograd::detail {

// What the engine offers a node that takes offers (Node::apply_partial), beside `partial` itself.
struct Offers {
  std::vector<Tensor>* partial = nullptr;     // the node's offers (autograd::offer asks for this vector only)
  std::vector<const AccumulateGrad*> lazy;    // per input: a leaf whose destination offer() may ask for
  std::vector<Tensor> fresh;                  // the destinations asked for (is_fresh_offer: written with beta = 0)
};

// While alive, `offers` (or none) is this thread's running node's; the outer scope's comes back at the end (a
// checkpointed block's nested pass runs inside a node).
class OffersScope {
 public:
  explicit OffersScope(Offers* offers);
  ~OffersScope();
  OffersScope(const OffersScope&) = delete;
  OffersScope& operator=(const OffersScope&) = delete;

 private:
  Offers* outer_;
};

}  // namespace mpt::autograd::detail
