// kernels/math/pointwise.h: the general elementwise functors (unary, binary, comparisons, select, arg-reduction)
// and their gradients, written once for CPU and CUDA.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/math/activation.h"
#include "kernels/math/common.h"
#include "kernels/math/exp.h"
#include "kernels/math/opmath.h"
#include "kernels/math/random.h"
#include "kernels/math/reduce_ops.h"
#include "kernels/math/rounded.h"

namespace mpt::kernels::math {

// Every product that feeds an addition is an explicit fma_op or a rounded mul_rn, so CPU and CUDA compute the same
// bits (kernels/math/rounded.h); exp, log, tanh and sigmoid are our own float code for the same reason. Only pow with
// a general exponent calls the platform's powf (glibc's on the CPU, CUDA's on a GPU: they may differ in the last
// bits); exponents 0, 1, 2, 3, 0.5, -0.5, -1 and -2 are exact arithmetic instead.
enum class UnaryKind : uint8_t { Neg, Abs, Relu, Silu, Tanh, Sigmoid, Exp, Log, Sqrt, Rsqrt, Pow, Clamp, Softplus };
enum class BinaryKind : uint8_t { Sub, Div, Maximum, Minimum, Pow, SiluMul };
enum class CompareKind : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

// The scalars of a unary op: Pow's exponent (a), Clamp's bounds [a, b] (-inf / +inf for a missing one).
struct UnaryParams {
  double a = 0;
  double b = 0;
};

// ---- float helpers

// log in float: log_rn (kernels/math/random.h, 0.76 ulp) for positive normals, subnormals scaled by 2^24 first;
// log(0) = -inf, log(+inf) = +inf, log(x < 0) and log(NaN) = NaN. f64: libm.
MPT_HD MPT_INLINE float log_any(float x) {
  const bool tiny = x < 1.17549435e-38f;
  const float r = log_rn(tiny ? x * 16777216.0f : x);
  float y = tiny ? sub_rn(r, 16.6355323f) : r;  // 24 ln 2
  y = x == 0.0f ? -INFINITY : y;
  y = x == INFINITY ? INFINITY : y;
  return (x < 0.0f || x != x) ? NAN : y;
}
MPT_HD MPT_INLINE double log_any(double x) { return log_op(x); }

// log(1 + e) for e >= 0, accurate for tiny e (Goldberg: log(u) * e / (u - 1) with u = 1 + e rounded).
template <class F>
MPT_HD MPT_INLINE F log1p_pos(F e) {
  const F u = add_rn(F(1), e);
  const F d = sub_rn(u, F(1));
  return d == F(0) ? e : div_rn(mul_rn(log_any(u), e), d);
}

// 1 / (1 + exp(-x)) without overflow: e = exp(-|x|) <= 1, then 1 / (1 + e) or e / (1 + e).
template <class F>
MPT_HD MPT_INLINE F sigmoid_op(F x) {
  const F e = exp_op(x < F(0) ? x : -x);
  const F r = div_rn(F(1), add_rn(F(1), e));
  return x < F(0) ? mul_rn(e, r) : r;
}

// |x| with |-0| = +0 and NaN kept.
template <class F>
MPT_HD MPT_INLINE F abs_op(F x) {
  return x <= F(0) ? F(0) - x : x;
}

template <class F>
MPT_HD MPT_INLINE F pow_libm(F x, F p) {
#if defined(__CUDA_ARCH__)
  return ::pow(x, p);
#else
  return std::pow(x, p);
#endif
}

// x^p: common exponents as exact arithmetic (the same bits everywhere), others through powf / pow.
template <class F>
MPT_HD MPT_INLINE F pow_op(F x, F p) {
  if (p == F(2)) return mul_rn(x, x);
  if (p == F(1)) return x;
  if (p == F(0)) return F(1);
  if (p == F(3)) return mul_rn(mul_rn(x, x), x);
  if (p == F(0.5)) return sqrt_rn(x);
  if (p == F(-1)) return div_rn(F(1), x);
  if (p == F(-2)) return div_rn(F(1), mul_rn(x, x));
  if (p == F(-0.5)) return div_rn(F(1), sqrt_rn(x));
  return pow_libm(x, p);
}

// ---- unary: y = f(x) and dx = dy * f'(x) (recomputed from x)

template <UnaryKind K, class F>
struct Unary {
  F a, b;
  MPT_HD MPT_INLINE F operator()(F x) const {
    if constexpr (K == UnaryKind::Neg) return -x;
    else if constexpr (K == UnaryKind::Abs) return abs_op(x);
    else if constexpr (K == UnaryKind::Relu) return x > F(0) || x != x ? x : F(0);
    else if constexpr (K == UnaryKind::Silu) return mul_rn(x, sigmoid_op(x));
    else if constexpr (K == UnaryKind::Tanh) return tanh_op(x);
    else if constexpr (K == UnaryKind::Sigmoid) return sigmoid_op(x);
    else if constexpr (K == UnaryKind::Exp) return exp_op(x);
    else if constexpr (K == UnaryKind::Log) return log_any(x);
    else if constexpr (K == UnaryKind::Sqrt) return sqrt_rn(x);
    else if constexpr (K == UnaryKind::Rsqrt) return div_rn(F(1), sqrt_rn(x));
    else if constexpr (K == UnaryKind::Pow) return pow_op(x, a);
    else if constexpr (K == UnaryKind::Clamp) {
      const F lo = x < a ? a : x;  // NaN stays NaN
      return lo > b ? b : lo;
    } else {
      static_assert(K == UnaryKind::Softplus);
      return add_rn(x > F(0) ? x : F(0), log1p_pos(exp_op(-abs_op(x))));  // max(x, 0) + log(1 + exp(-|x|))
    }
  }
};

template <UnaryKind K, class F>
struct UnaryBackward {
  F a, b;
  MPT_HD MPT_INLINE F operator()(F dy, F x) const {
    if constexpr (K == UnaryKind::Neg) return -dy;
    else if constexpr (K == UnaryKind::Abs) return x > F(0) ? dy : (x < F(0) ? -dy : F(0));
    else if constexpr (K == UnaryKind::Relu) return x > F(0) ? dy : F(0);
    else if constexpr (K == UnaryKind::Silu) {
      const F s = sigmoid_op(x);  // silu' = s (1 + x (1 - s))
      return mul_rn(dy, mul_rn(s, fma_op(x, sub_rn(F(1), s), F(1))));
    } else if constexpr (K == UnaryKind::Tanh) {
      const F t = tanh_op(x);
      return mul_rn(dy, fma_op(-t, t, F(1)));
    } else if constexpr (K == UnaryKind::Sigmoid) {
      const F s = sigmoid_op(x);
      return mul_rn(dy, mul_rn(s, sub_rn(F(1), s)));
    } else if constexpr (K == UnaryKind::Exp) return mul_rn(dy, exp_op(x));
    else if constexpr (K == UnaryKind::Log) return div_rn(dy, x);
    else if constexpr (K == UnaryKind::Sqrt) return div_rn(dy, mul_rn(F(2), sqrt_rn(x)));
    else if constexpr (K == UnaryKind::Rsqrt) {
      const F r = div_rn(F(1), sqrt_rn(x));  // d x^-1/2 = -x^-3/2 / 2
      return mul_rn(mul_rn(mul_rn(F(-0.5), dy), r), mul_rn(r, r));
    } else if constexpr (K == UnaryKind::Pow) {
      return a == F(0) ? F(0) : mul_rn(mul_rn(dy, a), pow_op(x, sub_rn(a, F(1))));
    } else if constexpr (K == UnaryKind::Clamp) {
      return x >= a && x <= b ? dy : F(0);  // PyTorch's rule: the bounds themselves pass the gradient
    } else {
      static_assert(K == UnaryKind::Softplus);
      return mul_rn(dy, sigmoid_op(x));
    }
  }
};

// ---- binary: out = f(a, b) and the two gradients

template <BinaryKind K>
struct Binary {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F a, F b) const {
    if constexpr (K == BinaryKind::Sub) return sub_rn(a, b);
    else if constexpr (K == BinaryKind::Div) return div_rn(a, b);
    else if constexpr (K == BinaryKind::Maximum) return a != a || b != b ? add_rn(a, b) : (a > b ? a : b);
    else if constexpr (K == BinaryKind::Minimum) return a != a || b != b ? add_rn(a, b) : (a < b ? a : b);
    else if constexpr (K == BinaryKind::Pow) return pow_op(a, b);
    else {
      static_assert(K == BinaryKind::SiluMul);  // SwiGLU's gate: silu(a) * b
      return mul_rn(mul_rn(a, sigmoid_op(a)), b);
    }
  }
};

// The gradient with respect to a (kWrtB false) or b (true). maximum / minimum split a tie evenly, as PyTorch does;
// pow's gradient is 0 where the exponent is 0 (for a) and where a == 0 with b >= 0 (for b), also as in PyTorch.
template <BinaryKind K, bool kWrtB>
struct BinaryBackward {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F dy, F a, F b) const {
    if constexpr (K == BinaryKind::Sub) return kWrtB ? -dy : dy;
    else if constexpr (K == BinaryKind::Div) {
      const F q = div_rn(dy, b);
      return kWrtB ? -mul_rn(q, div_rn(a, b)) : q;  // d(a/b)/db = -a / b^2
    } else if constexpr (K == BinaryKind::Maximum || K == BinaryKind::Minimum) {
      const F mine = kWrtB ? b : a, other = kWrtB ? a : b;
      const bool wins = K == BinaryKind::Maximum ? mine > other : mine < other;
      return wins ? dy : (mine == other ? mul_rn(F(0.5), dy) : F(0));
    } else if constexpr (K == BinaryKind::SiluMul) {
      const F s = sigmoid_op(a);
      if constexpr (kWrtB) return mul_rn(dy, mul_rn(a, s));  // silu(a)
      else return mul_rn(mul_rn(dy, b), mul_rn(s, fma_op(a, sub_rn(F(1), s), F(1))));  // b silu'(a)
    } else {
      static_assert(K == BinaryKind::Pow);
      if constexpr (kWrtB) return a == F(0) && b >= F(0) ? F(0) : mul_rn(mul_rn(dy, pow_op(a, b)), log_any(a));
      else return b == F(0) ? F(0) : mul_rn(mul_rn(dy, b), pow_op(a, sub_rn(b, F(1))));
    }
  }
};

// ---- comparisons (1 or 0, stored as u8) and select

template <CompareKind K>
struct Compare {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F a, F b) const {
    bool r;
    if constexpr (K == CompareKind::Eq) r = a == b;
    else if constexpr (K == CompareKind::Ne) r = a != b;
    else if constexpr (K == CompareKind::Lt) r = a < b;
    else if constexpr (K == CompareKind::Le) r = a <= b;
    else if constexpr (K == CompareKind::Gt) r = a > b;
    else r = a >= b;
    return r ? F(1) : F(0);
  }
};

// out = cond != 0 ? a : b
struct Where {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F cond, F a, F b) const {
    return cond != F(0) ? a : b;
  }
};

// ---- max / min with indices: does v replace the running best? NaN wins (and then stays), ties keep the first.
template <bool kMax, class F>
MPT_HD MPT_INLINE bool arg_better(F v, F best) {
  if (best != best) return false;
  if (v != v) return true;
  return kMax ? v > best : v < best;
}

// Output r of a max/min over the middle axis of x viewed as [outer, len, inner] (len >= 1): the chosen element's
// value (copied as it is) and its index along the axis, scanned in order (the CPU loop and the CUDA thread alike).
template <bool kMax, class T>
MPT_HD MPT_INLINE void arg_reduce_output(const T* x, T* values, int64_t* indices, const ReduceShape& s, int64_t r) {
  const int64_t o = r / s.inner, i = r % s.inner;
  const T* row = x + o * s.len * s.inner + i;
  auto best = load(row[0]);
  int64_t at = 0;
  for (int64_t j = 1; j < s.len; ++j) {
    const auto v = load(row[j * s.inner]);
    if (arg_better<kMax>(v, best)) {
      best = v;
      at = j;
    }
  }
  values[r] = row[at * s.inner];
  indices[r] = at;
}

// ---- host-side dispatch from a runtime kind to the functor's template argument (once per call)

template <class Fn>
decltype(auto) visit_unary_kind(UnaryKind k, Fn&& fn) {
  using K = UnaryKind;
#define MPT_CASE(name) \
  case K::name: return fn(std::integral_constant<K, K::name>{});
  switch (k) {
    MPT_CASE(Neg) MPT_CASE(Abs) MPT_CASE(Relu) MPT_CASE(Silu) MPT_CASE(Tanh) MPT_CASE(Sigmoid) MPT_CASE(Exp)
    MPT_CASE(Log) MPT_CASE(Sqrt) MPT_CASE(Rsqrt) MPT_CASE(Pow) MPT_CASE(Clamp)
    default: return fn(std::integral_constant<K, K::Softplus>{});
  }
#undef MPT_CASE
}

template <class Fn>
decltype(auto) visit_binary_kind(BinaryKind k, Fn&& fn) {
  using K = BinaryKind;
  switch (k) {
    case K::Sub: return fn(std::integral_constant<K, K::Sub>{});
    case K::Div: return fn(std::integral_constant<K, K::Div>{});
    case K::Maximum: return fn(std::integral_constant<K, K::Maximum>{});
    case K::Minimum: return fn(std::integral_constant<K, K::Minimum>{});
    case K::Pow: return fn(std::integral_constant<K, K::Pow>{});
    default: return fn(std::integral_constant<K, K::SiluMul>{});
  }
}

template <class Fn>
decltype(auto) visit_compare_kind(CompareKind k, Fn&& fn) {
  using K = CompareKind;
  switch (k) {
    case K::Eq: return fn(std::integral_constant<K, K::Eq>{});
    case K::Ne: return fn(std::integral_constant<K, K::Ne>{});
    case K::Lt: return fn(std::integral_constant<K, K::Lt>{});
    case K::Le: return fn(std::integral_constant<K, K::Le>{});
    case K::Gt: return fn(std::integral_constant<K, K::Gt>{});
    default: return fn(std::integral_constant<K, K::Ge>{});
  }
}

}  // namespace mpt::kernels::math
