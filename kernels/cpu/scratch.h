// kernels/cpu/scratch.h: per-thread reusable buffers for large kernel temporaries (no page faults after first use).
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

namespace mpt::kernels::cpu {

// A buffer of at least n elements of T for slot `Slot` of the calling thread, kept (and grown, never shrunk) for
// the thread's lifetime. A fresh multi-megabyte allocation per call costs a page fault per 4 KiB on first
// touch, as much as converting the data itself; reusing the buffer removes that. The contents are unspecified.
// One caller per slot at a time: a kernel must not hold a slot across a call that may use the same slot.
template <class T, int Slot>
T* scratch(size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  thread_local std::unique_ptr<T[]> buffer;
  thread_local size_t capacity = 0;
  if (n > capacity) {
    buffer.reset();
    buffer.reset(new T[n]);
    capacity = n;
  }
  return buffer.get();
}

}  // namespace mpt::kernels::cpu
