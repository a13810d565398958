// src/ops/attention_select.cpp: MPT_ATTENTION parsing and the choice between cuDNN and the GEMM fallback.
#include "ops/attention_select.h"

#include <cstdlib>
#include <string_view>

#include "mpt/core/error.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/lib/attention_cudnn.h"
#endif

namespace mpt::ops::detail {

AttentionMode parse_attention_mode(const char* value, const char* op) {
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "auto") return AttentionMode::Auto;
  if (v == "cudnn") return AttentionMode::Cudnn;
  if (v == "gemm") return AttentionMode::Gemm;
  MPT_THROW("[{}] MPT_ATTENTION must be auto, cudnn or gemm (or unset), got '{}'", op, v);
}

AttentionMode attention_mode_from_env(const char* op) { return parse_attention_mode(std::getenv("MPT_ATTENTION"), op); }

std::string cudnn_attention_rejection(const AttentionQuery& q) {
  if (q.dtype != DType::F16 && q.dtype != DType::BF16)
    return fmt::format("cuDNN's fused attention takes f16 or bf16, got {}", q.dtype);
#if defined(MPT_WITH_CUDA)
  namespace kcu = kernels::cuda;
  const kcu::CudnnAttentionProblem p{q.batch, q.heads, q.seq, q.head_dim, q.dtype == DType::BF16,
                                     static_cast<float>(q.scale), q.key_padding};
  const kcu::AttentionPass pass = q.backward ? kcu::AttentionPass::Backward : kcu::AttentionPass::Forward;
  if (const char* why = kcu::cudnn_attention_unsupported(p, pass, q.sm_major, q.sm_minor); why[0] != '\0')
    return why;
  return q.cudnn_unavailable;
#else
  return "mptrain was built without CUDA";
#endif
}

AttentionPath select_attention_path(AttentionMode mode, const AttentionQuery& q, const char* op) {
  if (mode == AttentionMode::Gemm) return AttentionPath::Gemm;
  MPT_CHECK(!(q.deterministic && mode == AttentionMode::Cudnn),
            "[{}] MPT_ATTENTION=cudnn, but deterministic mode is on (mpt::set_deterministic, MPT_DETERMINISTIC): "
            "cuDNN's fused attention backward does not promise the same bits on every run; unset MPT_ATTENTION for "
            "the GEMM path", op);
  if (q.deterministic) return AttentionPath::Gemm;
  const std::string why = cudnn_attention_rejection(q);
  if (why.empty()) return AttentionPath::Cudnn;
  MPT_CHECK(mode != AttentionMode::Cudnn,
            "[{}] MPT_ATTENTION=cudnn, but cuDNN cannot run this attention: {} ({} (B={}, H={}, T={}, D={}) {} on "
            "sm_{}{}); unset MPT_ATTENTION or set it to auto or gemm for the GEMM path",
            op, why, q.backward ? "backward" : "forward", q.batch, q.heads, q.seq, q.head_dim, q.dtype, q.sm_major,
            q.sm_minor);
  return AttentionPath::Gemm;
}

std::string old_cudnn_note(AttentionMode mode, const AttentionQuery& q, int64_t cudnn_version) {
  if (mode != AttentionMode::Auto || q.deterministic || (q.dtype != DType::F16 && q.dtype != DType::BF16) ||
      cudnn_version <= 0 || cudnn_version >= 91600 || q.sm_major < 8) {
    return "";
  }
  return fmt::format("[causal_attention] cuDNN {}.{} is older than 9.16, which fused attention needs: attention runs "
                     "on the GEMM path (GPT-2 124M's step took 1.5x longer on an H200). Put a newer libcudnn.so.9 "
                     "first on LD_LIBRARY_PATH (the nvidia-cudnn-cu13 wheel has one), or set MPT_ATTENTION=gemm to "
                     "choose that path without this note.",
                     cudnn_version / 10000, cudnn_version % 10000 / 100);
}

}  // namespace mpt::ops::detail
