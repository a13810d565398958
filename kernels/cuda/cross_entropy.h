// kernels/cuda/cross_entropy.h: fused softmax + cross-entropy forward, reduction and backward on a CUDA stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/cross_entropy.h"

namespace mpt::kernels::cuda {

// Device-pointer versions of kernels/cpu/cross_entropy.h. One block per row (up to 1024 threads) reading
// the row once (an online max and sum), 16-byte vector loads on the aligned middle of each row, so odd
// vocabularies such as 50257 vectorise too. A target out of range cannot throw here: its row's loss and
// gradient are NaN and cross_entropy_reduce reports the first such row in *bad_row, which the caller reads
// after the stream work is done. Padded rows (row_stride > vocab, llm.c's 50304-wide logits of 50257 classes):
// only the vocab columns are read, the backward zeroes the padding unless accumulating; the vector path holds for
// any stride. Asynchronous on `stream`; cudaErrorInvalidValue for rows < 0, vocab < 1, rows > 2^31 - 1,
// 0 < row_stride < vocab (or a negative one) or a missing pointer. T: float, mpt::f16, mpt::bf16; I: int32_t, int64_t.
template <class T, class I>
cudaError_t cross_entropy_forward(const math::CrossEntropyForwardParams<T, I>& p, cudaStream_t stream);

// math::CrossEntropyFusedParams: one block per row, the forward and the gradient for *dloss in one kernel (in place
// when p.dlogits is the logits); the same bits as cross_entropy_forward then cross_entropy_backward.
template <class T, class I>
cudaError_t cross_entropy_forward_backward(const math::CrossEntropyFusedParams<T, I>& p, cudaStream_t stream);

// One block: the count, the reduced loss (fixed order: the same bits on every run) and the first bad row.
template <class T, class I>
cudaError_t cross_entropy_reduce(const math::CrossEntropyReduceParams<T, I>& p, cudaStream_t stream);

// dlogits written (or accumulated) directly; in place over the logits when p.dlogits == p.logits.
template <class T, class I>
cudaError_t cross_entropy_backward(const math::CrossEntropyBackwardParams<T, I>& p, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
