// src/autograd/leaf_adds.h: backward's small adds into leaves' existing gradients, made in one launch per pass.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "mpt/autograd/node.h"
#include "mpt/core/tensor.h"

namespace mpt::autograd::detail {

// A later micro-batch adds into every gradient the first one left: the GEMMs add theirs in place (beta = 1), but the
// norms' weights and biases and the Linears' biases arrive as small new tensors, an add launch each (98 per
// micro-batch at GPT-2 124M, a few thousand elements apiece). While a pass collects them (one LeafAdds per backward,
// on its thread), AccumulateGrad hands over the adds that nothing reads before the pass ends, and the pass makes them
// at its end with ops::add_'s multi-tensor launch: the same sums, bit for bit, in one or two launches.
class LeafAdds {
 public:
  static constexpr size_t kMaxBytes = size_t{1} << 20;       // larger gradients are added at once
  static constexpr size_t kFlushBytes = size_t{16} << 20;    // pending gradients kept alive at most

  LeafAdds();   // this thread's collector until destroyed (a nested pass, a checkpointed block's, has its own)
  ~LeafAdds();  // what was not flushed (the pass threw) is dropped
  LeafAdds(const LeafAdds&) = delete;
  LeafAdds& operator=(const LeafAdds&) = delete;

  // Makes the pending adds, then runs the hooks held for after them.
  void flush();
  // Takes `grad += g` for later when a pass collects on this thread and the add qualifies: a CUDA gradient, g of its
  // dtype, both contiguous, g at most kMaxBytes. `hooks`: the leaf's node, whose post-accumulate hooks then run after
  // the add (only while an autograd::HooksMayWait is alive: else a leaf with hooks is added into at once). False:
  // the caller adds now (and runs the hooks).
  static bool defer(const Tensor& grad, const Tensor& g, std::shared_ptr<AccumulateGrad> hooks = nullptr);
  // Whether this pass holds `node`'s hooks for its end (the engine then does not run them now).
  bool holds_hooks(const Node* node) const;

 private:
  void make_adds();  // the pending adds only (past kFlushBytes mid-pass); the held hooks stay held

  std::vector<Tensor> dst_, src_;
  std::vector<std::shared_ptr<AccumulateGrad>> hooks_;
  size_t bytes_ = 0;
  LeafAdds* outer_;
};

}  // namespace mpt::autograd::detail
