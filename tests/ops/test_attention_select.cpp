// tests/ops/test_attention_select.cpp: the CUDA attention path choice (cuDNN or GEMM) and MPT_ATTENTION, no GPU.
#include <gtest/gtest.h>

#include <string>

#include "../../src/ops/attention_select.h"  // internal header: the selection rule has no public API
#include "mpt/core/error.h"

using namespace mpt;
using namespace mpt::ops::detail;

namespace {

constexpr const char* kOp = "causal_attention";

AttentionQuery gpt(DType dtype = DType::BF16, int64_t head_dim = 64, int sm_major = 9, int sm_minor = 0,
                   bool backward = false) {
  return {dtype, 4, 12, 1024, head_dim, 0.125, sm_major, sm_minor, backward, {}};
}

std::string error_of(AttentionMode mode, const AttentionQuery& q) {
  try {
    select_attention_path(mode, q, kOp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AttentionSelect, ParsesMptAttention) {
  EXPECT_EQ(parse_attention_mode(nullptr, kOp), AttentionMode::Auto);
  EXPECT_EQ(parse_attention_mode("", kOp), AttentionMode::Auto);
  EXPECT_EQ(parse_attention_mode("auto", kOp), AttentionMode::Auto);
  EXPECT_EQ(parse_attention_mode("cudnn", kOp), AttentionMode::Cudnn);
  EXPECT_EQ(parse_attention_mode("gemm", kOp), AttentionMode::Gemm);
}

TEST(AttentionSelect, BadValueNamesTheVariable) {
  for (const char* bad : {"CUDNN", "flash", "gemm "}) {
    try {
      parse_attention_mode(bad, kOp);
      FAIL() << "accepted " << bad;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("[causal_attention] MPT_ATTENTION must be auto, cudnn or gemm"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    }
  }
}

#if defined(MPT_WITH_CUDA)
TEST(AttentionSelect, AutoPicksCudnnWhereItRuns) {
  EXPECT_EQ(select_attention_path(AttentionMode::Auto, gpt(), kOp), AttentionPath::Cudnn);
  EXPECT_EQ(select_attention_path(AttentionMode::Auto, gpt(DType::F16, 128, 8, 0, true), kOp), AttentionPath::Cudnn);
  EXPECT_EQ(select_attention_path(AttentionMode::Auto, gpt(DType::BF16, 256, 9, 0, true), kOp), AttentionPath::Cudnn);
}
#endif

TEST(AttentionSelect, AutoFallsBackToGemm) {
  const auto pick = [](const AttentionQuery& q) { return select_attention_path(AttentionMode::Auto, q, kOp); };
  EXPECT_EQ(pick(gpt(DType::BF16, 100)), AttentionPath::Gemm);  // head dim not a multiple of 8
  EXPECT_EQ(pick(gpt(DType::F32)), AttentionPath::Gemm);        // cuDNN's fused engine is f16/bf16 only
  EXPECT_EQ(pick(gpt(DType::BF16, 64, 7, 5)), AttentionPath::Gemm);             // before sm_80
  EXPECT_EQ(pick(gpt(DType::BF16, 256, 8, 0, true)), AttentionPath::Gemm);      // sm_80 backward d <= 128
  AttentionQuery no_handle = gpt();
  no_handle.cudnn_unavailable = "cuDNN handle: CUDNN_STATUS_NOT_INITIALIZED (1001)";
  EXPECT_EQ(pick(no_handle), AttentionPath::Gemm);
}

TEST(AttentionSelect, ForcedGemmAlwaysGemm) {
  EXPECT_EQ(select_attention_path(AttentionMode::Gemm, gpt(), kOp), AttentionPath::Gemm);
  EXPECT_EQ(select_attention_path(AttentionMode::Gemm, gpt(DType::F32, 100), kOp), AttentionPath::Gemm);
}

TEST(AttentionSelect, ForcedCudnnExplainsARefusal) {
  const std::string d100 = error_of(AttentionMode::Cudnn, gpt(DType::BF16, 100));
  EXPECT_NE(d100.find("[causal_attention] MPT_ATTENTION=cudnn, but cuDNN cannot run this attention"),
            std::string::npos)
      << d100;
#if defined(MPT_WITH_CUDA)
  EXPECT_NE(d100.find("multiple of 8"), std::string::npos) << d100;
  EXPECT_NE(d100.find("D=100"), std::string::npos) << d100;
#endif
  EXPECT_NE(error_of(AttentionMode::Cudnn, gpt(DType::F32)).find("f16 or bf16, got f32"), std::string::npos);
#if defined(MPT_WITH_CUDA)
  AttentionQuery no_handle = gpt();
  no_handle.cudnn_unavailable = "cuDNN handle: CUDNN_STATUS_NOT_INITIALIZED (1001)";
  EXPECT_NE(error_of(AttentionMode::Cudnn, no_handle).find("NOT_INITIALIZED"), std::string::npos);
  EXPECT_EQ(select_attention_path(AttentionMode::Cudnn, gpt(), kOp), AttentionPath::Cudnn);
#else
  EXPECT_NE(error_of(AttentionMode::Cudnn, gpt()).find("built without CUDA"), std::string::npos);
#endif
}

// Deterministic mode: the GEMM path, whatever cuDNN could do (its fused backward's order may vary from run to run);
// forcing cuDNN is refused with the reason.
TEST(AttentionSelect, DeterministicModeTakesTheGemmPath) {
  for (bool backward : {false, true}) {
    AttentionQuery q = gpt(DType::BF16, 64, 9, 0, backward);
    q.deterministic = true;
    EXPECT_EQ(select_attention_path(AttentionMode::Auto, q, kOp), AttentionPath::Gemm);
    EXPECT_EQ(select_attention_path(AttentionMode::Gemm, q, kOp), AttentionPath::Gemm);
    const std::string why = error_of(AttentionMode::Cudnn, q);
    EXPECT_NE(why.find("[causal_attention] MPT_ATTENTION=cudnn, but deterministic mode is on"), std::string::npos)
        << why;
  }
}

// Key padding: cuDNN's graph carries the padding mask, so auto picks cuDNN wherever it picks it without padding (and
// falls back where the static rules refuse the shape); MPT_ATTENTION=gemm still forces the GEMM path.
#if defined(MPT_WITH_CUDA)
TEST(AttentionSelect, KeyPaddingRunsOnCudnn) {
  for (bool backward : {false, true}) {
    AttentionQuery q = gpt(DType::BF16, 64, 9, 0, backward);
    q.key_padding = true;
    EXPECT_EQ(cudnn_attention_rejection(q), "");
    EXPECT_EQ(select_attention_path(AttentionMode::Auto, q, kOp), AttentionPath::Cudnn);
    EXPECT_EQ(select_attention_path(AttentionMode::Cudnn, q, kOp), AttentionPath::Cudnn);
    EXPECT_EQ(select_attention_path(AttentionMode::Gemm, q, kOp), AttentionPath::Gemm);
  }
  AttentionQuery d256 = gpt(DType::BF16, 256, 8, 0, true);  // sm_80 backward needs d <= 128, padded or not
  d256.key_padding = true;
  EXPECT_EQ(select_attention_path(AttentionMode::Auto, d256, kOp), AttentionPath::Gemm);
}
#endif

// Auto mode with a cuDNN too old for fused attention (the H200 image's system cuDNN 9.14) names the version, the cost
// and the fix, once per process (attention.cpp); nothing when cuDNN is new enough, the user chose the path, the dtype
// or the GPU rule cuDNN out anyway, or deterministic mode picks the GEMM path.
TEST(AttentionSelect, TooOldCudnnIsNotedInAutoModeOnly) {
  const std::string note = old_cudnn_note(AttentionMode::Auto, gpt(), 91400);
  EXPECT_NE(note.find("cuDNN 9.14 is older than 9.16"), std::string::npos) << note;
  EXPECT_NE(note.find("LD_LIBRARY_PATH"), std::string::npos) << note;
  EXPECT_NE(note.find("MPT_ATTENTION=gemm"), std::string::npos) << note;
  EXPECT_EQ(old_cudnn_note(AttentionMode::Auto, gpt(), 91600), "");
  EXPECT_EQ(old_cudnn_note(AttentionMode::Auto, gpt(), 91900), "");
  EXPECT_EQ(old_cudnn_note(AttentionMode::Gemm, gpt(), 91400), "");
  EXPECT_EQ(old_cudnn_note(AttentionMode::Auto, gpt(DType::F32), 91400), "");
  EXPECT_EQ(old_cudnn_note(AttentionMode::Auto, gpt(DType::BF16, 64, 7, 5), 91400), "");
  AttentionQuery deterministic = gpt();
  deterministic.deterministic = true;
  EXPECT_EQ(old_cudnn_note(AttentionMode::Auto, deterministic, 91400), "");
}

}  // namespace
