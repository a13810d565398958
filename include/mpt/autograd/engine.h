// mpt/autograd/engine.h: runs backward through the recorded graph (iterative, deterministic, frees as it goes).
#pragma once

#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::autograd {

// Backpropagates from `roots` (each with its gradient; an undefined gradient means ones, allowed only for a root
// with one element) into every leaf that requires grad (leaf.grad += ...). Nodes run in a fixed order: a node
// runs once every node that feeds it has run, the most recently recorded ready node first, with no recursion
// (graphs of any depth). Each node's saved tensors are freed right after it runs unless retain_graph; a second
// backward through a freed node throws. Grad mode is off while backward functions run.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {}, bool retain_graph = false);

// While one is alive on this thread, a leaf's post-accumulate hooks may run at the end of the backward pass instead of
// as soon as the leaf's gradient is final: where the pass batches the leaf's small gradient add (on CUDA, into an
// existing gradient: docs/autograd.md), its hooks run after the batched adds. For hooks with nothing to do before
// the pass ends: DataParallel::NoSync's (gradient accumulation without communication). Nests.
class HooksMayWait {
 public:
  HooksMayWait();
  ~HooksMayWait();
  HooksMayWait(const HooksMayWait&) = delete;
  HooksMayWait& operator=(const HooksMayWait&) = delete;

 private:
  bool outer_;
};

// True while backward(..., retain_graph = true) runs nodes on this thread: a node may then run again, so it must not
// overwrite what it saved (the cross-entropy node writes its gradient over the logits only when this is false).
bool retaining_graph() noexcept;

}  // namespace mpt::autograd
