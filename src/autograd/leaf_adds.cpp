// src/autograd/leaf_adds.cpp: the collector of backward's small leaf-gradient adds and its multi-tensor flush.
#include "autograd/leaf_adds.h"

#include "mpt/core/profile.h"
#include "mpt/ops/optim.h"

namespace mpt::autograd::detail {

namespace {
thread_local LeafAdds* t_collector = nullptr;
}  // namespace

LeafAdds::LeafAdds() : outer_(t_collector) { t_collector = this; }

LeafAdds::~LeafAdds() { t_collector = outer_; }

void LeafAdds::flush() {
  if (dst_.empty()) return;
  const profile::Range range("AccumulateGrad");
  ops::add_(dst_, src_);
  dst_.clear();
  src_.clear();
  bytes_ = 0;
}

bool LeafAdds::defer(const Tensor& grad, const Tensor& g) {
  LeafAdds* c = t_collector;
  if (c == nullptr || !grad.device().is_cuda() || g.device() != grad.device() || g.dtype() != grad.dtype() ||
      !grad.is_contiguous() || !g.is_contiguous() || g.nbytes() > kMaxBytes || g.shares_storage(grad)) {
    return false;
  }
  c->dst_.push_back(grad);
  c->src_.push_back(g);
  c->bytes_ += g.nbytes();
  if (c->bytes_ >= kFlushBytes) c->flush();
  return true;
}

}  // namespace mpt::autograd::detail
