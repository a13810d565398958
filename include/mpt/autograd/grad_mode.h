// mpt/autograd/grad_mode.h: whether ops record autograd nodes (per thread), and the guards that switch it.
#pragma once

namespace mpt::autograd {

// On by default in every thread. Ops record a node only when it is on and an input requires grad.
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Turns recording off for a scope (inference, optimizer updates, evaluation), like torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns recording back on for a scope (inside a NoGradGuard; activation checkpointing's recomputation).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace mpt::autograd
