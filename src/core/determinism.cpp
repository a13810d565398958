// src/core/determinism.cpp: the deterministic-mode flag (MPT_DETERMINISTIC, set_deterministic).
#include "mpt/core/determinism.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mpt {
namespace {

std::atomic<bool>& flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("MPT_DETERMINISTIC");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }()};
  return on;
}

}  // namespace

void set_deterministic(bool on) { flag().store(on, std::memory_order_relaxed); }
bool deterministic() { return flag().load(std::memory_order_relaxed); }

}  // namespace mpt
