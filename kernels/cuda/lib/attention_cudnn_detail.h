// kernels/cuda/lib/attention_cudnn_detail.h: what the cuDNN attention graph builder and its plans share (status checks, tensor ids).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kernels/cuda/lib/attention_cudnn.h"

namespace mpt::kernels::cuda::cudnn_detail {

// Throws CudnnError: "<call> failed: <status name> (<number>): <cuDNN's last error text>".
[[noreturn]] void fail(cudnnStatus_t status, const std::string& call);

// Our name for a descriptor type in messages ("TENSOR", "OPERATION_MATMUL", ...).
const char* type_name(cudnnBackendDescriptorType_t type);

// Throws unless status is success, naming the call, the descriptor and the attribute:
// "cudnnBackendSetAttribute(TENSOR 'K^T', CUDNN_ATTR_TENSOR_STRIDES) failed: ...".
void check(cudnnStatus_t status, const char* call, const CudnnDescriptor& d, const char* attr = nullptr);

#define MPT_CUDNN_SET(desc, attr, type, count, values)                                                     \
  ::mpt::kernels::cuda::cudnn_detail::check(cudnnBackendSetAttribute((desc).get(), attr, type, count, values), \
                                            "cudnnBackendSetAttribute", desc, #attr)

inline void finalize(const CudnnDescriptor& d) { check(cudnnBackendFinalize(d.get()), "cudnnBackendFinalize", d); }

using Dims = std::array<int64_t, 4>;
using Desc = cudnnBackendDescriptor_t;

// Unique ids of the tensors the caller binds (variant pack); virtual tensors get ids from kFirstVirtual on.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kMaskValue, kDout, kDq, kDk, kDv, kSoftmaxSum, kDqAccum, kOne,
  kSeqLenQ, kSeqLenKv, kPaddingMaskValue  // padded graphs only
};
constexpr int64_t kFirstVirtual = 100;

}  // namespace mpt::kernels::cuda::cudnn_detail
