// tests/emu_backend/test_cudnn_fallback.cpp: with cuDNN missing (the emulation default), CUDA attention takes the
// cuBLASLt fallback, and a forced cuDNN says why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mpt/mpt.h"
#include "op_test.h"

namespace mpt {
namespace {

// Sets MPT_ATTENTION for one scope (the op reads it on every call).
class AttentionMode {
 public:
  explicit AttentionMode(const char* value) { setenv("MPT_ATTENTION", value, 1); }
  ~AttentionMode() { unsetenv("MPT_ATTENTION"); }
  AttentionMode(const AttentionMode&) = delete;
  AttentionMode& operator=(const AttentionMode&) = delete;
};

TEST(CudnnFallback, AutoAndGemmRunTheFallbackAndAgree) {
  const Device gpu = Device::cuda(0);
  const Tensor q = testing::random_tensor({1, 2, 40, 64}, DType::BF16, 1).to(gpu);
  const Tensor k = testing::random_tensor({1, 2, 40, 64}, DType::BF16, 2).to(gpu);
  const Tensor v = testing::random_tensor({1, 2, 40, 64}, DType::BF16, 3).to(gpu);
  ops::AttentionResult automatic, gemm;
  {
    const AttentionMode mode("auto");
    automatic = ops::causal_attention(q, k, v);
  }
  {
    const AttentionMode mode("gemm");
    gemm = ops::causal_attention(q, k, v);
  }
  // The same path (cuBLASLt GEMMs around the softmax kernels) gives the same bits.
  EXPECT_EQ(automatic.out.to(Device::cpu()).to_vector<double>(), gemm.out.to(Device::cpu()).to_vector<double>());
  EXPECT_EQ(automatic.lse.to(Device::cpu()).to_vector<double>(), gemm.lse.to(Device::cpu()).to_vector<double>());
}

TEST(CudnnFallback, ForcedCudnnFailsWithTheReason) {
  const Device gpu = Device::cuda(0);
  const Tensor q = testing::random_tensor({1, 2, 40, 64}, DType::BF16, 1).to(gpu);
  const AttentionMode mode("cudnn");
  try {
    (void)ops::causal_attention(q, q, q);
    ADD_FAILURE() << "MPT_ATTENTION=cudnn ran without cuDNN";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MPT_ATTENTION=cudnn, but cuDNN cannot run this attention"), std::string::npos) << what;
    EXPECT_NE(what.find("cuDNN is not emulated"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace mpt
