// kernels/cuda/fp8_wire.h: the FP8 gradient all-reduce's per-parameter amax fix-up and scales on the device (math from kernels/math/fp8_wire.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/fp8_wire.h"

namespace mpt::kernels::cuda {

// amax[i] = math::Fp8WireAmax{}(amax[i]) in place, i < n. Asynchronous.
cudaError_t fp8_wire_amax(float* amax, int64_t n, cudaStream_t stream);
// f(amax[i], &scale[i], &inv[i]), i < n. Asynchronous.
cudaError_t fp8_wire_scales(const float* amax, float* scale, float* inv, int64_t n, const math::Fp8WireScale& f,
                            cudaStream_t stream);

}  // namespace mpt::kernels::cuda
