// src/nn/residual_stream.h: a sublayer's output entering a transformer's residual stream (GPT and Llama blocks).
#pragma once

#include <optional>
#include <string_view>
#include <utility>

#include "mpt/amp/policy.h"
#include "mpt/core/tensor.h"
#include "mpt/ops/layernorm.h"

namespace mpt::nn::detail {

// t in the residual stream's dtype (under Autocast the stream keeps the FP32 masters' dtype while GEMMs produce
// FP16/BF16, as in PyTorch's autocast): a recorded cast when the dtypes differ.
inline Tensor like(const Tensor& t, const Tensor& stream) {
  return t.dtype() == stream.dtype() ? t : t.to(stream.dtype());
}

// The embeddings `e` entering the residual stream: cast to the current policy's residual dtype when it sets one
// (amp::Policy::residual, e.g. BF16 as llm.c keeps the stream), else as they are.
inline Tensor into_stream(const Tensor& e, std::string_view model) {
  const DType d = amp::residual_dtype(e.dtype(), model);
  return d == e.dtype() ? e : e.to(d);
}

// t as a fused residual norm (ops::residual_layer_norm / residual_rms_norm, x beside the stream) takes it: as it is
// when it has the stream's dtype or is FP16/BF16 beside an FP32 stream (widened exactly inside the norm, its
// gradient rounded by the norm's backward: bit for bit the cast like() records), else like(t, stream).
inline Tensor into_residual_norm(const Tensor& t, const Tensor& stream) {
  const bool widened = stream.dtype() == DType::F32 && (t.dtype() == DType::BF16 || t.dtype() == DType::F16);
  return widened ? t : like(t, stream);
}

// The stream x + pending and its norm (stored as `out` says: ops::NormOutput), for a block that leaves its last
// residual add to the next norm (Block::forward_pending): norm's fused residual form when an addition is pending, else
// the norm of x. Norm: nn::LayerNorm or nn::RMSNorm.
template <class Norm>
std::pair<Tensor, Tensor> add_and_norm(const Norm& norm, const Tensor& x, const Tensor& pending,
                                       const ops::NormOutput& out = {}) {
  if (!pending.defined()) return {x, norm.forward(x, out)};
  return norm.forward_residual(into_residual_norm(pending, x), x, out);
}

}  // namespace mpt::nn::detail
