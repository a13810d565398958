// src/autograd/leaf_adds.cpp: the collector of backward's small leaf-gradient adds and its multi-tensor flush.
#include "autograd/leaf_adds.h"

#include "mpt/autograd/engine.h"
#include "mpt/core/profile.h"
#include "mpt/ops/optim.h"

namespace mpt::autograd::detail {

namespace {
thread_local LeafAdds* t_collector = nullptr;
thread_local bool t_hooks_may_wait = false;
}  // namespace

LeafAdds::LeafAdds() : outer_(t_collector) { t_collector = this; }

LeafAdds::~LeafAdds() { t_collector = outer_; }

void LeafAdds::make_adds() {
  if (dst_.empty()) return;
  const profile::Range range("AccumulateGrad");
  ops::add_(dst_, src_);
  dst_.clear();
  src_.clear();
  bytes_ = 0;
}

void LeafAdds::flush() {
  make_adds();
  std::vector<std::shared_ptr<AccumulateGrad>> hooks;
  hooks.swap(hooks_);
  for (const auto& node : hooks) node->run_hooks();
}

bool LeafAdds::defer(const Tensor& grad, const Tensor& g, std::shared_ptr<AccumulateGrad> hooks) {
  LeafAdds* c = t_collector;
  if (c == nullptr || (hooks != nullptr && !t_hooks_may_wait) || !grad.device().is_cuda() ||
      g.device() != grad.device() || g.dtype() != grad.dtype() || !grad.is_contiguous() || !g.is_contiguous() ||
      g.nbytes() > kMaxBytes || g.shares_storage(grad)) {
    return false;
  }
  c->dst_.push_back(grad);
  c->src_.push_back(g);
  c->bytes_ += g.nbytes();
  if (hooks != nullptr) c->hooks_.push_back(std::move(hooks));
  if (c->bytes_ >= kFlushBytes) c->make_adds();  // the hooks still wait for the pass's end (holds_hooks stays true)
  return true;
}

bool LeafAdds::holds_hooks(const Node* node) const {
  for (const auto& h : hooks_)
    if (h.get() == node) return true;
  return false;
}

}  // namespace mpt::autograd::detail

namespace mpt::autograd {

HooksMayWait::HooksMayWait() : outer_(detail::t_hooks_may_wait) { detail::t_hooks_may_wait = true; }

HooksMayWait::~HooksMayWait() { detail::t_hooks_may_wait = outer_; }

}  // namespace mpt::autograd
