// mpt/core/profile.h: named ranges (NVTX for Nsight Systems, or an observer) around modules and training phases.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace mpt::profile {

namespace detail {
extern std::atomic<bool> g_enabled;
void push(const std::string& name);
void pop(const std::string& name);
}  // namespace detail

// Ranges on or off for the whole process; off unless set_nvtx(true) or MPT_NVTX=1 in the environment (read once, at
// start; any value but empty or "0" turns them on). Off, a Range costs one branch.
void set_nvtx(bool on);
inline bool nvtx_enabled() noexcept { return detail::g_enabled.load(std::memory_order_relaxed); }

// Whether ranges reach NVTX in this build (CUDA, not the emulation build). Elsewhere only the observer sees them.
bool nvtx_available() noexcept;

// Called on the thread that opens (push = true) or closes (push = false) each range while ranges are on, in every
// build; for tests and for anyone who wants a trace. An empty function removes it. It must not
// throw (ranges close in destructors) nor open ranges itself.
using RangeObserver = std::function<void(std::string_view name, bool push)>;
void set_range_observer(RangeObserver observer);

// An RAII range: nvtxRangePushA on construction, nvtxRangePop on destruction (when ranges were on at construction;
// turning them off meanwhile still closes it). The fmt overload formats only when ranges are on.
class Range {
 public:
  explicit Range(const char* name) {
    if (nvtx_enabled()) [[unlikely]] begin(name);
  }
  explicit Range(const std::string& name) {
    if (nvtx_enabled()) [[unlikely]] begin(name);
  }
  template <class... Args>
    requires(sizeof...(Args) > 0)
  explicit Range(fmt::format_string<Args...> format, Args&&... args) {
    if (nvtx_enabled()) [[unlikely]] begin(fmt::format(format, std::forward<Args>(args)...));
  }
  ~Range() {
    if (active_) [[unlikely]] detail::pop(name_);
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void begin(std::string name) {
    name_ = std::move(name);
    detail::push(name_);
    active_ = true;
  }
  bool active_ = false;
  std::string name_;
};

}  // namespace mpt::profile
