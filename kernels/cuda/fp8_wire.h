// kernels/cuda/fp8_wire.h: the FP8 gradient all-reduce on the device: per-parameter amax fix-up and scales, and the per-parameter amax, quantize and dequantize passes over a whole bucket (math from kernels/math/fp8_wire.h and quantize.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/fp8_wire.h"
#include "kernels/math/numerics.h"

namespace mpt::kernels::cuda {

// amax[i] = math::Fp8WireAmax{}(amax[i]) in place, i < n. Asynchronous.
cudaError_t fp8_wire_amax(float* amax, int64_t n, cudaStream_t stream);
// f(amax[i], &scale[i], &inv[i]), i < n. Asynchronous.
cudaError_t fp8_wire_scales(const float* amax, float* scale, float* inv, int64_t n, const math::Fp8WireScale& f,
                            cudaStream_t stream);

// A bucket's passes, one launch each over all of its parameters (however many) instead of one per parameter.
// `bounds` (host memory, segments + 1 non-decreasing offsets from 0) splits the flat buffer into parameters:
// parameter i is elements [bounds[i], bounds[i + 1]). Device pointers otherwise; T and Out in {float, f16, bf16}.
// Launches carry the bounds as kernel arguments (a launch per kWireSegmentsPerLaunch parameters); asynchronous.
inline constexpr int kWireSegmentsPerLaunch = 160;

// amax[i] = max |x| over parameter i, a NaN anywhere in it giving +inf (math::Fp8WireAmax of ops::amax's value),
// 0 for an empty one: amax is zeroed by a first launch, then max-ed into by atomics (order-independent bits).
template <class T>
cudaError_t fp8_wire_amaxes(const T* x, const int64_t* bounds, int64_t segments, float* amax, cudaStream_t stream);
// codes[j] = saturate(x[j] * scale[i]) in E4M3 for j in parameter i (math::quantize_value).
template <class T>
cudaError_t fp8_wire_quantize(const T* x, const int64_t* bounds, int64_t segments, const float* scale, f8e4m3* codes,
                              cudaStream_t stream);
// out[j] = Out(float(codes[j]) * inv[i]) for j in parameter i (math::dequantize_value).
template <class Out>
cudaError_t fp8_wire_dequantize(const f8e4m3* codes, const int64_t* bounds, int64_t segments, const float* inv,
                                Out* out, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
