// kernels/cuda/pointwise.h: the general unary, binary, comparison and select kernels, and max/min with indices, on a
// CUDA stream (the CPU twin is kernels/cpu/pointwise.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/elementwise.h"
#include "kernels/math/pointwise.h"
#include "kernels/math/reduce_ops.h"

namespace mpt::kernels::cuda {

using math::BinaryKind;
using math::BinaryShape;
using math::CompareKind;
using math::ReduceShape;
using math::UnaryKind;
using math::UnaryParams;

// Device-pointer versions of kernels/cpu/pointwise.h, asynchronous on `stream`, the same functors in the same order.
// T: float, mpt::f16, mpt::bf16. cudaErrorInvalidValue for negative sizes or null pointers, else the launch error.
template <class T>
cudaError_t unary(UnaryKind kind, const UnaryParams& params, const T* x, T* y, int64_t n, cudaStream_t stream);
template <class T>
cudaError_t unary_backward(UnaryKind kind, const UnaryParams& params, const T* dy, const T* x, T* dx, int64_t n,
                           bool accumulate, cudaStream_t stream);
template <class T>
cudaError_t binary(BinaryKind kind, const T* a, const T* b, T* out, const BinaryShape& shape, cudaStream_t stream);
template <class T>
cudaError_t binary_backward(BinaryKind kind, bool wrt_b, const T* dy, const T* a, const T* b, T* out, int64_t n,
                            bool accumulate, cudaStream_t stream);
template <class T>
cudaError_t binary_backward_both(BinaryKind kind, const T* dy, const T* a, const T* b, T* da, T* db, int64_t n,
                                 cudaStream_t stream);
// SwiGLU over packed rows (a gate | up projection's one output): gu [rows, 2f] holds gate then up in each row;
// y [rows, f] = silu(gate) * up, and backward dgu [rows, 2f] = (dy up silu'(gate) | dy silu(gate)) from one read of dy
// and gu: the bits of binary(SiluMul) and binary_backward on separate gate and up tensors.
template <class T>
cudaError_t swiglu_packed(const T* gu, T* y, int64_t rows, int64_t f, cudaStream_t stream);
template <class T>
cudaError_t swiglu_packed_backward(const T* dy, const T* gu, T* dgu, int64_t rows, int64_t f, cudaStream_t stream);
template <class T>
cudaError_t compare(CompareKind kind, const T* a, const T* b, uint8_t* out, const BinaryShape& shape,
                    cudaStream_t stream);
template <class T>
cudaError_t where(const uint8_t* cond, const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);
// One thread per output scans its len elements in order (the CPU's order: the same index on ties and NaN).
template <class T>
cudaError_t arg_reduce(bool is_max, const T* x, T* values, int64_t* indices, const ReduceShape& shape,
                       cudaStream_t stream);

}  // namespace mpt::kernels::cuda
