// kernels/cuda/optim.h: multi-tensor AdamW, SGD, the fused AMP unscale + inf/NaN check and the gradient add on a
// CUDA stream (the CPU twins are in kernels/cpu/optim.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/optim.h"

namespace mpt::kernels::cuda {

// The descriptor arrays live in host memory and name device pointers. One kernel launch covers up to a table's
// worth of tensors (kernels/cuda/optim.cu: the tensor table travels as a kernel argument, every tensor gets
// ceil(n / chunk) thread blocks), so small parameters do not cost a launch each; longer lists take several
// launches. `guards` point to device memory. Asynchronous on `stream`; returns cudaErrorInvalidValue for bad
// arguments (null arrays, n < 0, more than 2^31 - 1 blocks for one tensor), else the first launch error.

// Tensor k takes step math::step_of(tensors[k], step), its coefficients computed on the device from h; tensors
// with a step count get it advanced by a second launch unless the guards skip the step (nothing is read back).
// P = float; G in {float, bf16, f16}; M in {float, bf16, uint8_t} (uint8_t: bitsandbytes 8-bit states).
template <class G, class M>
cudaError_t adamw_step(const math::AdamWTensor<float, G, M>* tensors, int64_t count, const math::AdamWHyper& h,
                       int64_t step, math::StepGuards guards, cudaStream_t stream);

// G in {float, bf16, f16}.
template <class G>
cudaError_t sgd_step(const math::SgdTensor<float, G>* tensors, int64_t count, const math::SgdCoefficients<double>& c,
                     math::StepGuards guards, cudaStream_t stream);

// G in {float, bf16, f16}; inv_scale and found_inf are device pointers (found_inf is set, never cleared).
template <class G>
cudaError_t unscale_check(G* const* grads, const int64_t* sizes, int64_t count, const float* inv_scale,
                          float* found_inf, cudaStream_t stream);

// dst[k][i] += src[k][i] for each of `count` pairs of device arrays of sizes[k] elements: kernels/cpu/optim.h's
// add_multi, bit for bit, in one launch per table (backward's small gradient adds: src/autograd/leaf_adds.h).
// G in {float, bf16, f16}.
template <class G>
cudaError_t add_multi(G* const* dst, const G* const* src, const int64_t* sizes, int64_t count, cudaStream_t stream);

// Gradient clipping's norm without a launch per tensor: partials[b] = the sum of squares (f32) of the b-th chunk of
// 2048 elements, tensor by tensor in order, sum_squares_partials(sizes, count) of them; then sqrt_of_sum
// (kernels/cuda/reduction.h) over the partials. G in {float, bf16, f16}.
// (Inline: a host function without a CUDA type in its signature would otherwise have the same symbol in the
// emulated kernels that test_emu links beside the real ones.)
inline constexpr int64_t kSumSquaresChunk = 2048;
inline int64_t sum_squares_partials(const int64_t* sizes, int64_t count) {
  int64_t blocks = 0;
  for (int64_t k = 0; k < count; ++k) {
    blocks += ((sizes[k] > 0 ? sizes[k] : 0) + kSumSquaresChunk - 1) / kSumSquaresChunk;
  }
  return blocks;
}
template <class G>
cudaError_t sum_squares_multi(const G* const* xs, const int64_t* sizes, int64_t count, float* partials,
                              cudaStream_t stream);

// math::grad_scaler_update on the device (one thread) from the sum of up to kMaxFoundInf found_inf flags
// (device pointers, summed in order); cudaErrorInvalidValue for more.
inline constexpr int kMaxFoundInf = 8;
cudaError_t grad_scaler_update(const math::ScalerUpdate& u, const float* const* found_inf, int64_t count,
                               float* scale, float* inv, int32_t* trackers, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
