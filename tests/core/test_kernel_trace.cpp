// tests/core/test_kernel_trace.cpp: profile::KernelTrace where there is no device to trace (a clear error), and the kernel-name shortening its table uses.
#include <gtest/gtest.h>

#include <string>

#include "mpt/core/device.h"
#include "mpt/core/error.h"
#include "mpt/core/kernel_trace.h"
#include "test_util.h"

namespace mpt {
namespace {

using profile::detail::short_kernel_name;

TEST(KernelTrace, ShortNamesDropTheReturnTypeNamespacesAndParameters) {
  EXPECT_EQ(short_kernel_name("void mpt::kernels::cuda::(anonymous namespace)::quantize_transpose_vec_kernel<mpt::"
                              "f8e4m3, mpt::bf16, false>(mpt::kernels::cuda::(anonymous namespace)::TransposeParams<"
                              "mpt::f8e4m3, mpt::bf16>)"),
            "quantize_transpose_vec_kernel<f8e4m3, bf16, false>");
  // Namespaces inside template arguments go too; a nested class's scope is dropped with the rest.
  EXPECT_EQ(short_kernel_name("void mpt::kernels::cuda::map_kernel<mpt::kernels::math::GeluOp, float>(float const*, "
                              "float*, long)"),
            "map_kernel<GeluOp, float>");
  EXPECT_EQ(short_kernel_name("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>(Params)"),
            "Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>");
  // A library's plain names (cuBLASLt, cuDNN) are kept, and long ones are cut with "...".
  EXPECT_EQ(short_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"),
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1");
  EXPECT_EQ(short_kernel_name(std::string(120, 'k'), 20), std::string(17, 'k') + "...");
  EXPECT_EQ(short_kernel_name("void f<(anonymous namespace)::Op>(int)"), "f<Op>");
}

// This suite runs without a GPU (the CPU build, or no device visible): a trace says why it cannot run.
TEST(KernelTrace, WithoutADeviceATraceExplainsWhyNot) {
  if (profile::kernel_trace_unavailable_reason().empty()) {
    GTEST_SKIP() << "kernel tracing works here (a GPU with CUPTI): tests/gpu/test_kernel_trace_gpu.cpp covers it";
  }
  const std::string why = profile::kernel_trace_unavailable_reason();
  const std::string message = testing::error_message([] { profile::KernelTrace trace; });
  EXPECT_NE(message.find("[KernelTrace] unavailable: " + why), std::string::npos) << message;
}

}  // namespace
}  // namespace mpt
