// tests/core/test_error.cpp: mpt::Error messages from MPT_CHECK / MPT_THROW and the CUDA-library status translation.
#include <gtest/gtest.h>

#include "test_util.h"

#include <stdexcept>
#include <string>

#include "mpt/core/device.h"
#include "mpt/core/error.h"

#if defined(MPT_WITH_CUDA)
#include "../../src/backend/cuda/check.h"
#endif

namespace {

using mpt::testing::contains;
using mpt::testing::error_message;

static_assert(mpt::detail::is_string_literal_v<decltype(("[op] oops"))>);
static_assert(!mpt::detail::is_string_literal_v<decltype((true))>);
static_assert(!mpt::detail::is_string_literal_v<const char*>);  // a pointer is a legitimate null check
static_assert(!mpt::detail::is_string_literal_v<int (&)[4]>);
static_assert(std::is_base_of_v<std::runtime_error, mpt::Error>);

TEST(Error, CheckMessageNamesOpLocationAndExpression) {
  int x = -3;
  int line = 0;
  std::string msg = error_message([&] {
    line = __LINE__ + 1;
    MPT_CHECK(x > 0, "[gelu] expected a positive size, got {}", x);
  });
  EXPECT_TRUE(msg.starts_with("[gelu] expected a positive size, got -3")) << msg;
  EXPECT_TRUE(contains(msg, "`x > 0`")) << msg;
  EXPECT_TRUE(contains(msg, "test_error.cpp:" + std::to_string(line))) << msg;
  EXPECT_FALSE(contains(msg, "/tests/")) << "only the file name, not its directory: " << msg;
}

TEST(Error, CheckThatHoldsDoesNotThrowAndEvaluatesOnce) {
  int calls = 0;
  auto positive = [&] { return ++calls > 0; };
  EXPECT_NO_THROW(MPT_CHECK(positive(), "[op] never"));
  EXPECT_EQ(calls, 1);
}

TEST(Error, ThrowHasLocationButNoExpression) {
  int line = 0;
  std::string msg = error_message([&] {
    line = __LINE__ + 1;
    MPT_THROW("[io] cannot open {}", "weights.safetensors");
  });
  EXPECT_EQ(msg, "[io] cannot open weights.safetensors (test_error.cpp:" + std::to_string(line) + ")");
}

TEST(Error, IsCatchableAsRuntimeError) {
  EXPECT_THROW(MPT_THROW("[op] x"), std::runtime_error);
}

#if defined(MPT_WITH_CUDA)
// The translators are table lookups in cudart / cuBLASLt / cuDNN / NCCL: no driver or GPU needed.
cudaError_t fake_cuda_failure() { return cudaErrorInvalidValue; }

TEST(CudaCheck, FakeStatusNamesExpressionAndStatus) {
  std::string msg = error_message([] { MPT_CUDA_CHECK(fake_cuda_failure()); });
  EXPECT_TRUE(msg.starts_with("[cuda] cudaErrorInvalidValue (1): invalid argument")) << msg;
  EXPECT_TRUE(contains(msg, "`fake_cuda_failure()`")) << msg;
  EXPECT_TRUE(contains(msg, "test_error.cpp:")) << msg;
}

TEST(CudaCheck, RealFailingCallIsTranslated) {
  std::string msg = error_message([] { MPT_CUDA_CHECK(cudaDriverGetVersion(nullptr)); });
  EXPECT_TRUE(msg.starts_with("[cuda] cudaErrorInvalidValue (1): invalid argument")) << msg;
  EXPECT_TRUE(contains(msg, "`cudaDriverGetVersion(nullptr)`")) << msg;
  // Without a driver the runtime's last error stays cudaErrorInsufficientDriver whatever we do; with
  // one, the check must have cleared the non-sticky error it reported.
  if (mpt::cuda_status().usable) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(CudaCheck, SuccessDoesNotThrow) {
  int version = -1;
  EXPECT_NO_THROW(MPT_CUDA_CHECK(cudaRuntimeGetVersion(&version)));
  EXPECT_GT(version, 0);
}

TEST(CudaCheck, NoDriverStatusText) {
  using mpt::cuda_backend::cuda_status_text;
  EXPECT_TRUE(cuda_status_text(cudaErrorInsufficientDriver).starts_with("cudaErrorInsufficientDriver (35): "));
  EXPECT_TRUE(cuda_status_text(cudaErrorStubLibrary).starts_with("cudaErrorStubLibrary (34): "));
}

TEST(CudaCheck, CublasStatus) {
  EXPECT_EQ(mpt::cuda_backend::cublas_status_text(CUBLAS_STATUS_NOT_INITIALIZED),
            "CUBLAS_STATUS_NOT_INITIALIZED (1): the library was not initialized");
  auto fail = [] { return CUBLAS_STATUS_INVALID_VALUE; };
  std::string msg = error_message([&] { MPT_CUBLAS_CHECK(fail()); });
  EXPECT_TRUE(msg.starts_with("[cublas] CUBLAS_STATUS_INVALID_VALUE (7): ")) << msg;
  EXPECT_TRUE(contains(msg, "`fail()`")) << msg;
}

TEST(CudaCheck, CudnnStatus) {
  EXPECT_EQ(mpt::cuda_backend::cudnn_status_text(CUDNN_STATUS_NOT_INITIALIZED), "CUDNN_STATUS_NOT_INITIALIZED (1001)");
  auto fail = [] { return CUDNN_STATUS_BAD_PARAM; };
  std::string msg = error_message([&] { MPT_CUDNN_CHECK(fail()); });
  EXPECT_TRUE(msg.starts_with("[cudnn] CUDNN_STATUS_BAD_PARAM (2000)")) << msg;
  EXPECT_TRUE(contains(msg, "`fail()`")) << msg;
}

TEST(CudaCheck, NcclStatus) {
  EXPECT_EQ(mpt::cuda_backend::nccl_status_text(ncclInvalidArgument),
            "ncclInvalidArgument (4): invalid argument (run with NCCL_DEBUG=WARN for details)");
  auto fail = [] { return ncclUnhandledCudaError; };
  std::string msg = error_message([&] { MPT_NCCL_CHECK(fail()); });
  EXPECT_TRUE(msg.starts_with("[nccl] ncclUnhandledCudaError (1): ")) << msg;
  EXPECT_TRUE(contains(msg, "`fail()`")) << msg;
}
#endif

}  // namespace
