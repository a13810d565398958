// tests/support/cuda_emu/nccl_reduce.cpp: the NCCL double's element arithmetic (Sum, Prod, Max, Min, Avg, PreMulSum) per data type, in rank order.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/math/numerics.h"
#include "nccl_internal.h"

// Semantics, after NCCL's reduce_kernel.h (v2.28): one reduction in rank order 0, 1, ..., n-1, copied to every
// rank, so results are bit-identical everywhere.
// - Integers wrap (two's complement). Avg sums (wrapping), then divides truncating toward zero.
// - float/double: IEEE arithmetic in the type; Max/Min are fmax/fmin (a NaN loses to a number).
// - f16/bf16: each step is correctly rounded in the type (__hadd, __hmul); FP8 steps go through half and back,
//   fp8(half(a) op half(b)), saturating by default. NcclLowPrecisionSum::FloatAccumulate instead accumulates in
//   float and rounds once. Max/Min pick an input (__hmax: a NaN loses; two NaNs give the canonical NaN).
// - Avg on floating types is PreMulSum with scalar T(float(1/n)): each input is multiplied (rounded in T), then summed.
namespace mpt::cuda_emu::nccl {

size_t dtype_size(ncclDataType_t dtype) {
  switch (dtype) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* dtype_name(ncclDataType_t dtype) {
  static const char* const names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
                                      "ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
                                      "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return dtype >= 0 && dtype < ncclNumTypes ? names[dtype] : "an invalid ncclDataType_t";
}

bool is_fp8(ncclDataType_t dtype) { return dtype == ncclFloat8e4m3 || dtype == ncclFloat8e5m2; }

bool is_integer(ncclDataType_t dtype) {
  return dtype == ncclInt8 || dtype == ncclUint8 || dtype == ncclInt32 || dtype == ncclUint32 || dtype == ncclInt64 ||
         dtype == ncclUint64;
}

namespace {

template <class T>
T load(const std::byte* base, size_t k) {
  T v;
  std::memcpy(&v, base + k * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void store(std::byte* base, size_t k, T v) {
  std::memcpy(base + k * sizeof(T), &v, sizeof(T));
}
template <class T>
T scalar_of(const PreMulOp& op) {
  T v;
  std::memcpy(&v, op.value.data(), sizeof(T));
  return v;
}

// ---- integers ----
template <class T>
T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <class T>
T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  using Wide = std::conditional_t<(sizeof(T) < 4), uint32_t, U>;  // no promotion to signed int
  return static_cast<T>(static_cast<U>(static_cast<Wide>(static_cast<U>(a)) * static_cast<Wide>(static_cast<U>(b))));
}

template <class T>
void reduce_integer(OpKind op, std::span<const std::byte* const> in, std::span<const PreMulOp> premul, size_t count,
                    std::byte* out) {
  const size_t n = in.size();
  std::vector<T> scalar(n, T{1});
  if (op == OpKind::PreMulSum)
    for (size_t r = 0; r < n; ++r) scalar[r] = scalar_of<T>(premul[r]);
  for (size_t k = 0; k < count; ++k) {
    T acc{};
    for (size_t r = 0; r < n; ++r) {
      T x = load<T>(in[r], k);
      if (op == OpKind::PreMulSum) x = wrap_mul(x, scalar[r]);
      if (r == 0) {
        acc = x;
        continue;
      }
      switch (op) {
        case OpKind::Prod: acc = wrap_mul(acc, x); break;
        case OpKind::Max: acc = x > acc ? x : acc; break;
        case OpKind::Min: acc = x < acc ? x : acc; break;
        default: acc = wrap_add(acc, x); break;
      }
    }
    if (op == OpKind::Avg) {
      if constexpr (std::is_signed_v<T>) {
        acc = static_cast<T>(static_cast<int64_t>(acc) / static_cast<int64_t>(n));  // C++ truncates toward zero
      } else {
        acc = static_cast<T>(acc / static_cast<T>(n));
      }
    }
    store<T>(out, k, acc);
  }
}

// ---- float and double ----
template <class T>
void reduce_ieee(OpKind op, std::span<const std::byte* const> in, std::span<const PreMulOp> premul, size_t count,
                 std::byte* out) {
  const size_t n = in.size();
  std::vector<T> scalar(n, T{1});
  for (size_t r = 0; r < n; ++r) {
    if (op == OpKind::PreMulSum) scalar[r] = scalar_of<T>(premul[r]);
    if (op == OpKind::Avg) scalar[r] = static_cast<T>(1.0 / static_cast<double>(n));
  }
  const bool premultiply = op == OpKind::PreMulSum || op == OpKind::Avg;
  for (size_t k = 0; k < count; ++k) {
    T acc{};
    for (size_t r = 0; r < n; ++r) {
      T x = load<T>(in[r], k);
      if (premultiply) x = x * scalar[r];
      if (r == 0) {
        acc = x;
        continue;
      }
      switch (op) {
        case OpKind::Prod: acc = acc * x; break;
        case OpKind::Max: acc = std::fmax(acc, x); break;
        case OpKind::Min: acc = std::fmin(acc, x); break;
        default: acc = acc + x; break;
      }
    }
    store<T>(out, k, acc);
  }
}

// ---- f16, bf16, FP8 (values held as their bit patterns) ----
class LowPrecision {
 public:
  LowPrecision(ncclDataType_t dtype, const Controls& controls)
      : dtype_(dtype), sat_(controls.fp8_overflow == NcclFp8Overflow::Saturate ? Fp8Saturation::Saturate
                                                                               : Fp8Saturation::NoSaturate) {}

  float value(uint32_t bits) const {
    switch (dtype_) {
      case ncclFloat16: return f16_bits_to_float(static_cast<uint16_t>(bits));
      case ncclBfloat16: return bf16_bits_to_float(static_cast<uint16_t>(bits));
      case ncclFloat8e4m3: return e4m3_bits_to_float(static_cast<uint8_t>(bits));
      default: return e5m2_bits_to_float(static_cast<uint8_t>(bits));
    }
  }
  // Rounds an exact result once to the type; FP8 first to half, as NCCL's fp8(__hadd(half, half)) does.
  uint32_t round_exact(double x) const {
    switch (dtype_) {
      case ncclFloat16: return double_to_f16_bits(x);
      case ncclBfloat16: return double_to_bf16_bits(x);
      default: return round_float(f16_bits_to_float(double_to_f16_bits(x)));
    }
  }
  uint32_t round_float(float x) const {
    switch (dtype_) {
      case ncclFloat16: return float_to_f16_bits(x);
      case ncclBfloat16: return float_to_bf16_bits(x);
      case ncclFloat8e4m3: return float_to_e4m3_bits(x, sat_);
      default: return float_to_e5m2_bits(x, sat_);
    }
  }
  uint32_t add(uint32_t a, uint32_t b) const {  // exact in double for these formats, then one rounding
    return round_exact(static_cast<double>(value(a)) + static_cast<double>(value(b)));
  }
  uint32_t mul(uint32_t a, uint32_t b) const {
    return round_exact(static_cast<double>(value(a)) * static_cast<double>(value(b)));
  }
  // __hmax / __hmin: a NaN loses to a number; two NaNs give the canonical NaN.
  uint32_t select(uint32_t a, uint32_t b, bool max) const {
    const float x = value(a), y = value(b);
    if (std::isnan(x) && std::isnan(y)) return dtype_size(dtype_) == 1 ? kFp8CanonicalNaN : kF16CanonicalNaN;
    if (std::isnan(x)) return b;
    if (std::isnan(y)) return a;
    return (max ? x > y : x < y) ? a : b;
  }

 private:
  ncclDataType_t dtype_;
  Fp8Saturation sat_;
};

uint32_t load_bits(const std::byte* base, size_t k, size_t size) {
  return size == 1 ? load<uint8_t>(base, k) : load<uint16_t>(base, k);
}

void reduce_low_precision(ncclDataType_t dtype, OpKind op, std::span<const std::byte* const> in,
                          std::span<const PreMulOp> premul, size_t count, std::byte* out, const Controls& controls) {
  const LowPrecision lp(dtype, controls);
  const size_t n = in.size();
  const size_t size = dtype_size(dtype);
  std::vector<uint32_t> scalar(n, 0);
  for (size_t r = 0; r < n; ++r) {
    if (op == OpKind::PreMulSum) scalar[r] = load_bits(premul[r].value.data(), 0, size);
    // NCCL builds the Avg scalar as T(float(1.0 / nranks)).
    if (op == OpKind::Avg) scalar[r] = lp.round_float(static_cast<float>(1.0 / static_cast<double>(n)));
  }
  const bool premultiply = op == OpKind::PreMulSum || op == OpKind::Avg;
  const bool arithmetic = op != OpKind::Max && op != OpKind::Min;
  const bool in_float = arithmetic && controls.low_precision_sum == NcclLowPrecisionSum::FloatAccumulate;
  for (size_t k = 0; k < count; ++k) {
    uint32_t acc = 0;
    float facc = 0.0f;
    for (size_t r = 0; r < n; ++r) {
      uint32_t x = load_bits(in[r], k, size);
      if (premultiply) x = lp.mul(x, scalar[r]);
      if (in_float) {
        const float xf = lp.value(x);
        facc = r == 0 ? xf : (op == OpKind::Prod ? facc * xf : facc + xf);
        continue;
      }
      if (r == 0) {
        acc = x;
        continue;
      }
      switch (op) {
        case OpKind::Prod: acc = lp.mul(acc, x); break;
        case OpKind::Max: acc = lp.select(acc, x, true); break;
        case OpKind::Min: acc = lp.select(acc, x, false); break;
        default: acc = lp.add(acc, x); break;
      }
    }
    if (in_float) acc = lp.round_float(facc);
    if (size == 1) {
      store<uint8_t>(out, k, static_cast<uint8_t>(acc));
    } else {
      store<uint16_t>(out, k, static_cast<uint16_t>(acc));
    }
  }
}

}  // namespace

void reduce_elements(ncclDataType_t dtype, OpKind op, std::span<const std::byte* const> inputs,
                     std::span<const PreMulOp> premul, size_t count, std::byte* out, const Controls& controls) {
  switch (dtype) {
    case ncclInt8: return reduce_integer<int8_t>(op, inputs, premul, count, out);
    case ncclUint8: return reduce_integer<uint8_t>(op, inputs, premul, count, out);
    case ncclInt32: return reduce_integer<int32_t>(op, inputs, premul, count, out);
    case ncclUint32: return reduce_integer<uint32_t>(op, inputs, premul, count, out);
    case ncclInt64: return reduce_integer<int64_t>(op, inputs, premul, count, out);
    case ncclUint64: return reduce_integer<uint64_t>(op, inputs, premul, count, out);
    case ncclFloat32: return reduce_ieee<float>(op, inputs, premul, count, out);
    case ncclFloat64: return reduce_ieee<double>(op, inputs, premul, count, out);
    default: return reduce_low_precision(dtype, op, inputs, premul, count, out, controls);
  }
}

}  // namespace mpt::cuda_emu::nccl
