// mpt/autograd/grad_mode.h: whether ops record autograd nodes (per thread), and the guards that switch it.
#pragma once

namespace mpt::autograd {

// On by default in every thread. Ops record a node only when it is on and an input requires grad.
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Sets grad mode for a scope and restores the previous mode when the scope ends.
template <bool kEnabled>
class GradModeGuard {
 public:
  GradModeGuard() : previous_(is_grad_enabled()) { set_grad_enabled(kEnabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Recording off (inference, optimizer updates, evaluation), like torch.no_grad().
using NoGradGuard = GradModeGuard<false>;
// Recording back on inside a NoGradGuard (activation checkpointing's recomputation).
using EnableGradGuard = GradModeGuard<true>;

}  // namespace mpt::autograd
