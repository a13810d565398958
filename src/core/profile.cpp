// src/core/profile.cpp: the range switch (MPT_NVTX), NVTX push/pop in CUDA builds, and the range observer.
#include "mpt/core/profile.h"

#include <cstdlib>
#include <memory>
#include <mutex>

// NVTX3 is header-only (it finds the profiler's injection library at run time, so nothing is linked). The emulation
// build compiles the CUDA backend without the toolkit's headers: no NVTX there.
#if defined(MPT_WITH_CUDA) && !defined(MPT_CUDA_EMULATION)
#include <nvtx3/nvToolsExt.h>
#define MPT_PROFILE_NVTX 1
#endif

namespace mpt::profile {

namespace detail {
constinit std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

// Read when the library's static objects are initialised (before main); set_nvtx overrides it.
[[maybe_unused]] const bool g_env_read = [] {
  const char* v = std::getenv("MPT_NVTX");
  if (v != nullptr && *v != '\0' && std::string_view(v) != "0") detail::g_enabled.store(true);
  return true;
}();

// The observer is copied under the lock and called outside it, so it may be replaced while another thread calls it.
std::mutex g_observer_mutex;
std::shared_ptr<const RangeObserver> g_observer;
std::atomic<bool> g_has_observer{false};

void notify(std::string_view name, bool push) {
  if (!g_has_observer.load(std::memory_order_acquire)) return;
  std::shared_ptr<const RangeObserver> observer;
  {
    const std::lock_guard lock(g_observer_mutex);
    observer = g_observer;
  }
  if (observer) (*observer)(name, push);
}

}  // namespace

namespace detail {

void push(const std::string& name) {
  notify(name, true);  // first: if the observer throws, nothing was pushed
#ifdef MPT_PROFILE_NVTX
  nvtxRangePushA(name.c_str());
#endif
}

void pop(const std::string& name) {
#ifdef MPT_PROFILE_NVTX
  nvtxRangePop();
#endif
  notify(name, false);
}

}  // namespace detail

void set_nvtx(bool on) { detail::g_enabled.store(on, std::memory_order_relaxed); }

bool nvtx_available() noexcept {
#ifdef MPT_PROFILE_NVTX
  return true;
#else
  return false;
#endif
}

void set_range_observer(RangeObserver observer) {
  const std::lock_guard lock(g_observer_mutex);
  g_observer = observer ? std::make_shared<const RangeObserver>(std::move(observer)) : nullptr;
  g_has_observer.store(g_observer != nullptr, std::memory_order_release);
}

}  // namespace mpt::profile
