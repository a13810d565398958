// src/ops/lt_workspace.h: the cuBLASLt workspace of a stream, shared by the ops that call cuBLASLt (matmul, quantized_linear).
#pragma once

#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/lib/gemm_cublaslt.h"
#include "mpt/core/stream.h"

namespace mpt::ops::detail {

// One workspace per (device, stream) (vendor-semantics R6.4: one per concurrent stream), allocated on first use and
// kept until the stream ends (its last Stream let go, or its CudaGraph destroyed: core/stream_resources.h);
// its size is cuBLAS's recommendation for the device.
kernels::cuda::LtWorkspace lt_workspace(const Stream& stream);

}  // namespace mpt::ops::detail
#endif
