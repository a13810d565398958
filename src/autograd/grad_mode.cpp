// src/autograd/grad_mode.cpp: the per-thread grad-mode flag.
#include "mpt/autograd/grad_mode.h"

namespace mpt::autograd {

namespace {
thread_local bool g_grad_enabled = true;
}  // namespace

bool is_grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool enabled) { g_grad_enabled = enabled; }

}  // namespace mpt::autograd
