// kernels/cpu/convert.h: element-type conversion of contiguous arrays on the CPU (scalar, F16C and AVX512-BF16 paths).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/math/numerics.h"

namespace mpt::kernels::cpu {

// dst[i] = scalar_cast<Dst>(src[i], sat) for i < n (rules in kernels/math/numerics_cast.h):
// round to nearest even into f16/bf16/fp8, `sat` for fp8 destinations; floating -> integer
// truncates and saturates, NaN -> 0; integer -> integer wraps like static_cast.
// Instantiated for every pair of {float, double, f16, bf16, f8e4m3, f8e5m2, int32_t, int64_t,
// uint8_t, uint16_t, int8_t}. src and dst must not overlap. Large arrays are split across OpenMP threads; float<->f16 use F16C,
// float->bf16 uses AVX512-BF16 and float/bf16/f16->fp8 use AVX-512 when the CPU has them, and fp8 sources decode
// through 256-entry tables, all with identical results to the scalar path.
template <class Dst, class Src>
void convert(const Src* src, Dst* dst, size_t n, Fp8Saturation sat = Fp8Saturation::Saturate);

// Enables or disables the vector paths (enabled by default unless the environment variable
// MPT_SCALAR_CONVERSIONS is set to a non-empty value other than "0"). For tests and debugging. It also
// selects between the baseline and AVX-512 clones of the elementwise loops (kernels/cpu/map.h).
void set_vector_conversions(bool enabled);
bool vector_conversions_enabled();

// Which vector paths this CPU supports (independent of set_vector_conversions).
struct ConvertIsa {
  bool f16c = false;        // float <-> f16 with F16C (and AVX)
  bool avx512_bf16 = false; // float -> bf16 with AVX512-BF16 (plus AVX512F/BW/VL)
  bool avx2 = false;        // bf16 -> float by shift
  bool avx512 = false;      // float/bf16/f16 -> e4m3/e5m2 and e4m3/e5m2 -> float with AVX-512F/BW/VL
};
ConvertIsa convert_isa();

}  // namespace mpt::kernels::cpu
