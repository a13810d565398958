// src/ops/attention_select.h: which CUDA causal-attention path runs, cuDNN's fused flash attention or the cuBLASLt
// GEMM fallback: the MPT_ATTENTION variable and a pure selection rule (no GPU needed, tested on the CPU).
#pragma once

#include <cstdint>
#include <string>

#include "mpt/core/dtype.h"

namespace mpt::ops::detail {

enum class AttentionMode : uint8_t { Auto, Cudnn, Gemm };
enum class AttentionPath : uint8_t { Cudnn, Gemm };

// MPT_ATTENTION's value: null or "" is Auto; "auto", "cudnn", "gemm"; anything else throws mpt::Error naming the
// variable, the value and the accepted ones ("[op] MPT_ATTENTION must be ...").
AttentionMode parse_attention_mode(const char* value, const char* op);
AttentionMode attention_mode_from_env(const char* op);  // reads MPT_ATTENTION on every call

// One attention call on a CUDA device: q's dtype and (B, H, T, D), the scale, the device's compute capability.
struct AttentionQuery {
  DType dtype = DType::BF16;
  int64_t batch = 1, heads = 1, seq = 1, head_dim = 64;
  double scale = 0.125;
  int sm_major = 0, sm_minor = 0;
  bool backward = false;
  std::string cudnn_unavailable;  // why no cuDNN handle could be made ("" when one exists or was not asked for)
  bool deterministic = false;     // mpt::deterministic(): the GEMM path (cuDNN's backward order may vary)
  bool key_padding = false;       // AttentionOptions::lengths pads some sample: cuDNN's graph adds its padding mask
};

// Why cuDNN cannot run the query, "" when it can: not f16/bf16, the static rules of kernels/cuda/lib/attention_cudnn.h
// (head dim, compute capability; key padding adds none), a build without CUDA, or cudnn_unavailable.
std::string cudnn_attention_rejection(const AttentionQuery& q);

// Gemm when MPT_ATTENTION=gemm, or (auto) when cuDNN rejects the query or deterministic mode is on; Cudnn otherwise.
// MPT_ATTENTION=cudnn in deterministic mode throws. MPT_ATTENTION=cudnn with a
// rejection throws mpt::Error "[op] MPT_ATTENTION=cudnn, but cuDNN cannot run this attention: <why> (...)".
AttentionPath select_attention_path(AttentionMode mode, const AttentionQuery& q, const char* op);

// The note printed once per process when auto mode leaves an f16/bf16 attention on the GEMM path only because the
// cuDNN loaded (cudnnGetVersion(), e.g. 91400) is older than the 9.16 fused attention needs; "" otherwise.
std::string old_cudnn_note(AttentionMode mode, const AttentionQuery& q, int64_t cudnn_version);

}  // namespace mpt::ops::detail
