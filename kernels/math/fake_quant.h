// kernels/math/fake_quant.h: the quantization grid of QAT, PTQ and quantized export (INT8, INT4, FP8 E4M3 with absmax scales), shared by the CPU and CUDA kernels.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"
#include "kernels/math/numerics.h"
#include "kernels/math/numerics_cast.h"
#include "kernels/math/rounded.h"

namespace mpt::kernels::math {

// The code formats: symmetric integers on the restricted range [-qmax, qmax] (INT8 127, INT4 7: the grid llama.cpp's
// q8_0 and, with codes in [-8, 7], q4_0 hold exactly) and FP8 E4M3 (qmax 448).
enum class QuantFormat : uint8_t { Int8, Int4, E4M3 };

MPT_HD MPT_INLINE float quant_qmax(QuantFormat f) {
  return f == QuantFormat::Int8 ? 127.0f : (f == QuantFormat::Int4 ? 7.0f : kE4M3Max);
}

// One group's quantizer: the scale from the group's absolute maximum, then each element's code and value.
//   s = amax / qmax (one IEEE division), rounded to FP16 when f16_scale (the scale a GGUF block or an FP16 scale
//       tensor stores: the exported model is then exactly the one trained and evaluated); a scale of 0 (amax 0, or an
//       FP16 underflow) becomes 1, so an all-zero group has zero codes; NaN or Inf amax propagate (NaN outputs).
//   integer code = clamp(rint(x / s), -qmax, qmax), round half to even on the float quotient; NaN stays NaN.
//   E4M3 code    = e4m3(x / s) with saturation (round to nearest even).
//   value        = code * s (exact for integer codes and FP16 scales; one rounding otherwise).
// With absmax scales no element lies beyond the grid: |x / s| <= qmax (1 + 2^-11) for FP16 scales, which rounds to
// qmax, so the clamp never discards information and the straight-through estimator passes every gradient.
struct FakeQuant {
  QuantFormat format = QuantFormat::Int8;
  bool f16_scale = false;

  MPT_HD MPT_INLINE float scale(float amax) const {
    float s = amax / quant_qmax(format);
    if (f16_scale) s = f16_bits_to_float(float_to_f16_bits(s));
    return s == 0.0f ? 1.0f : s;
  }
  // The code as a float (an integer in [-qmax, qmax], or an E4M3 value).
  MPT_HD MPT_INLINE float code(float x, float s) const {
    const float v = x / s;
    if (format == QuantFormat::E4M3) return e4m3_bits_to_float(float_to_e4m3_bits(v, Fp8Saturation::Saturate));
    const float r = rintf(v), qmax = quant_qmax(format);
    return r > qmax ? qmax : (r < -qmax ? -qmax : r);
  }
  MPT_HD MPT_INLINE float value(float x, float s) const { return code(x, s) * s; }
  // The byte a code is stored as: the integer (two's complement), or the E4M3 bit pattern.
  MPT_HD MPT_INLINE int8_t code_byte(float x, float s) const {
    if (format == QuantFormat::E4M3) {
      return static_cast<int8_t>(float_to_e4m3_bits(x / s, Fp8Saturation::Saturate));
    }
    const float c = code(x, s);
    return c != c ? int8_t{0} : static_cast<int8_t>(c);
  }
};

// LSQ (Esser et al., "Learned Step Size Quantization", ICLR 2020): a learned scale s > 0 per group on the integer
// grid [-qmax, qmax], v = x / s (one IEEE division):
//   value     = clamp(rint(v), -qmax, qmax) * s                        (the forward: FakeQuant's grid, s given)
//   d value/dx = 1 where -qmax <= v <= qmax, else 0                    (straight through inside the grid)
//   d value/ds = clamp(rint(v), -qmax, qmax) - v inside, -qmax / qmax below / above  (the paper's equation 3)
struct LearnedQuant {
  float qmax = 127.0f;

  MPT_HD MPT_INLINE float code(float x, float s) const {
    const float r = rintf(x / s);
    return r > qmax ? qmax : (r < -qmax ? -qmax : r);
  }
  MPT_HD MPT_INLINE float value(float x, float s) const { return code(x, s) * s; }
  MPT_HD MPT_INLINE int8_t code_byte(float x, float s) const {
    const float c = code(x, s);
    return c != c ? int8_t{0} : static_cast<int8_t>(c);
  }
  MPT_HD MPT_INLINE float grad_x(float x, float s) const {
    const float v = x / s;
    return v >= -qmax && v <= qmax ? 1.0f : 0.0f;
  }
  MPT_HD MPT_INLINE float grad_s(float x, float s) const {
    const float v = x / s;
    if (v < -qmax) return -qmax;
    if (v > qmax) return qmax;
    return code(x, s) - v;
  }
};

// Weights as codes with per-group scales (ops::GroupQuantized's layout): codes [n, k] (a Linear's [out, in]) as int8
// (INT8 / INT4 integers; E4M3 bit patterns for FP8), scales [n, k / group] f32; value = code * scale.
struct GroupWeights {
  const int8_t* codes = nullptr;
  const float* scales = nullptr;
  int64_t n = 0, k = 0, group = 0;
  QuantFormat format = QuantFormat::Int8;
};

// A code's value: the integer, or the E4M3 bit pattern's value.
MPT_HD MPT_INLINE float code_value(int8_t c, QuantFormat f) {
  return f == QuantFormat::E4M3 ? e4m3_bits_to_float(static_cast<uint8_t>(c)) : static_cast<float>(c);
}

// The dequantizing epilogue of a codes x codes GEMM (W8A8: exact INT32 sums; FP8: the FP32 sum of E4M3 products):
// y = acc * s_row * s_col + bias[j], multiplied in that order in float (bias optional), for output (row, j). One
// formula for the CPU (kernels/cpu/quantized_gemm.h) and CUDA (kernels/cuda/quantized_gemm.h).
// Each operation rounded on its own (rounded.h): nvcc would contract the last product and the bias into an FMA.
MPT_HD MPT_INLINE float dequantize_accumulator(float acc, float s_row, float s_col, const float* bias, int64_t j) {
  const float v = mul_rn(mul_rn(acc, s_row), s_col);
  return bias != nullptr ? add_rn(v, bias[j]) : v;
}

}  // namespace mpt::kernels::math
