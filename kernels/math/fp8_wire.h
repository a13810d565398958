// kernels/math/fp8_wire.h: MS-AMP's FP8 gradient all-reduce scales (scaling-spec.md), shared by the CPU loop and the CUDA kernel.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"
#include "kernels/math/quantize.h"

namespace mpt::kernels::math {

// Before the MAX all-reduce of the ranks' amaxes: a NaN amax travels as +inf (a MAX over ranks keeps an inf on every
// rank; what it does with a NaN is not defined), so every rank sees the parameter as non-finite.
struct Fp8WireAmax {
  MPT_HD MPT_INLINE float operator()(float amax) const {
    return amax != amax ? numerics_detail::bit_cast<float>(0x7F800000u) : amax;  // +inf
  }
};

// After it, per parameter: scale = float(pow2(fp_max / amax) * pre), the codes are saturate(g * scale) and their sum
// over `world` ranks times inv = float(1 / (pow2(fp_max / amax) * pre * world)) is the average. pre = 1 / sqrt(world)
// keeps the sum of world codes in range; the products are formed in double, as MS-AMP's host code does. An amax that
// is not finite (some rank's gradient held an inf or NaN) gives inv = NaN: the average is NaN everywhere.
struct Fp8WireScale {
  float fp_max = kE4M3Max;
  double pre = 1.0;
  int32_t world = 1;

  MPT_HD MPT_INLINE void operator()(float amax, float* scale, float* inv) const {
    const double s = static_cast<double>(ScaleFromAmax{fp_max, 0, /*power_of_2=*/true}(amax)) * pre;
    *scale = static_cast<float>(s);
    const bool finite = (numerics_detail::bit_cast<uint32_t>(amax) & kInfBits) != kInfBits;
    *inv = finite ? static_cast<float>(1.0 / (s * static_cast<double>(world)))
                  : numerics_detail::bit_cast<float>(0x7FC00000u);
  }
};

}  // namespace mpt::kernels::math
