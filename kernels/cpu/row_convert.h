// kernels/cpu/row_convert.h: rows of f16/bf16 viewed as float through a per-thread buffer (vectorised conversions),
// so the row loops of the CPU kernels run on plain float arrays the compiler can vectorise.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

// One row of T as opmath values. For float and double the row is used in place; for f16 and bf16 it is
// converted into (or out of) the buffer with kernels/cpu/convert.h, whose results equal math::load and
// math::store bit for bit. Not thread-safe: one per thread.
template <class T>
class OpmathRow {
 public:
  using F = math::opmath_t<T>;
  static constexpr bool kDirect = std::is_same_v<T, F>;

  explicit OpmathRow(int64_t n) : buf_(kDirect ? 0 : static_cast<size_t>(n)) {}

  // src[0, n) as F.
  const F* load(const T* src, int64_t n) {
    if constexpr (kDirect) {
      return src;
    } else {
      convert(src, buf_.data(), static_cast<size_t>(n));
      return buf_.data();
    }
  }

  // Where to write n F values bound for dst; store(dst, n) then rounds them into dst.
  F* out(T* dst) {
    if constexpr (kDirect) {
      return dst;
    } else {
      return buf_.data();
    }
  }

  void store(T* dst, int64_t n) {
    if constexpr (!kDirect) convert(buf_.data(), dst, static_cast<size_t>(n));
  }

 private:
  std::vector<F> buf_;
};

// A parameter vector (weight, bias) as F: p itself when P is F, else converted into `storage`; null stays null.
template <class F, class P>
const F* params_as(const P* p, int64_t n, std::vector<F>& storage) {
  if constexpr (std::is_same_v<P, F>) {
    return p;
  } else {
    if (p == nullptr) return nullptr;
    storage.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) storage[static_cast<size_t>(i)] = static_cast<F>(math::load(p[i]));
    return storage.data();
  }
}

}  // namespace mpt::kernels::cpu
