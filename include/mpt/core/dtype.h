// mpt/core/dtype.h: the element types a Tensor can hold, their sizes and names, and the type<->enum mapping.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/math/numerics.h"

namespace mpt {

enum class DType : uint8_t { F32, F16, BF16, F8E4M3, F8E5M2, F64, I32, I64, U8, U16, I8 };

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2,
                                       DType::F64, DType::I32, DType::I64,  DType::U8,     DType::U16, DType::I8};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::U16: return 2;
    case DType::F8E4M3: case DType::F8E5M2: case DType::U8: case DType::I8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F8E4M3: return "f8e4m3";
    case DType::F8E5M2: return "f8e5m2";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::U16: return "u16";
    case DType::I8: return "i8";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F8E4M3 ||
         t == DType::F8E5M2 || t == DType::F64;
}
constexpr bool is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }
constexpr bool is_integral(DType t) { return !is_floating(t); }

// C++ storage type of each dtype, and back.
template <DType T> struct dtype_traits;
template <> struct dtype_traits<DType::F32> { using type = float; };
template <> struct dtype_traits<DType::F16> { using type = f16; };
template <> struct dtype_traits<DType::BF16> { using type = bf16; };
template <> struct dtype_traits<DType::F8E4M3> { using type = f8e4m3; };
template <> struct dtype_traits<DType::F8E5M2> { using type = f8e5m2; };
template <> struct dtype_traits<DType::F64> { using type = double; };
template <> struct dtype_traits<DType::I32> { using type = int32_t; };
template <> struct dtype_traits<DType::I64> { using type = int64_t; };
template <> struct dtype_traits<DType::U8> { using type = uint8_t; };
template <> struct dtype_traits<DType::U16> { using type = uint16_t; };
template <> struct dtype_traits<DType::I8> { using type = int8_t; };
template <DType T> using scalar_t = typename dtype_traits<T>::type;

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<f16>() { return DType::F16; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }
template <> constexpr DType dtype_of<f8e4m3>() { return DType::F8E4M3; }
template <> constexpr DType dtype_of<f8e5m2>() { return DType::F8E5M2; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::I8; }

// The one dtype switch: calls f(scalar_t<T>{}) tag-style with a value of the dtype's C++ type.
// Usage: visit_dtype(t, [&](auto tag) { using T = decltype(tag); ... });
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    case DType::F8E4M3: return f(f8e4m3{});
    case DType::F8E5M2: return f(f8e5m2{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::U8: return f(uint8_t{});
    case DType::U16: return f(uint16_t{});
    case DType::I8: return f(int8_t{});
  }
  return f(float{});
}

}  // namespace mpt

template <>
struct fmt::formatter<mpt::DType> : fmt::formatter<std::string_view> {
  auto format(mpt::DType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(mpt::dtype_name(t), ctx);
  }
};
