// tests/gpu/test_ops_gpu.cpp: every op family on a real CUDA device against the CPU backend (skipped, and reported as skipped, without a GPU).
#include <gtest/gtest.h>

#include <string>

#include "mpt/mpt.h"
#include "op_test.h"

namespace mpt {
namespace {

using testing::random_tensor;
using testing::tolerance;

// Skips the test unless a usable GPU is present (at least compute capability `min_major`).
#define MPT_REQUIRE_GPU(min_major)                                                                  \
  do {                                                                                              \
    if (!cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;           \
    const CudaDeviceInfo& device0 = cuda_status().devices.at(0);                                    \
    if (device0.major < (min_major))                                                                \
      GTEST_SKIP() << "needs compute capability " << (min_major) << ".x, device 0 is " << device0.major \
                   << "." << device0.minor;                                                         \
  } while (0)

Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
Tensor cpu(const Tensor& t) { return t.to(Device::cpu()); }

// The GPU result next to the CPU one, both compared in float64 with the dtype's tolerance scaled by `slack`
// (the GPU may round differently: FMA contraction, libdevice's transcendental functions, cuBLASLt's order).
void expect_same(const Tensor& got_gpu, const Tensor& want_cpu, DType dtype, double slack, const std::string& what) {
  ASSERT_TRUE(got_gpu.device().is_cuda()) << what;
  testing::Tolerance tol = tolerance(dtype);
  tol.rtol *= slack;
  tol.atol *= slack;
  testing::expect_close(cpu(got_gpu).to(DType::F64), want_cpu.to(DType::F64), tol, what);
}

TEST(GpuOps, ElementwiseGeluLayerNormSoftmaxMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor x = random_tensor({37, 1000}, dt, 1), y = random_tensor({37, 1000}, dt, 2);
    expect_same(ops::add(gpu(x), gpu(y)), ops::add(x, y), dt, 1, "add");
    expect_same(ops::gelu(gpu(x)), ops::gelu(x), dt, 2, "gelu");
    expect_same(ops::gelu_backward(gpu(y), gpu(x)), ops::gelu_backward(y, x), dt, 2, "gelu_backward");
    expect_same(ops::softmax(gpu(x)), ops::softmax(x), dt, 2, "softmax");
    const Tensor w = random_tensor({1000}, DType::F32, 3), b = random_tensor({1000}, DType::F32, 4);
    expect_same(ops::layer_norm(gpu(x), gpu(w), gpu(b)).y, ops::layer_norm(x, w, b).y, dt, 2, "layer_norm");
  }
}

TEST(GpuOps, SoftmaxCrossEntropyMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const Tensor logits = random_tensor({19, 50257}, DType::BF16, 5, 3.0);
  const Tensor targets = Tensor::arange(19, DType::I64);
  const auto want = ops::softmax_cross_entropy(logits, targets);
  const auto got = ops::softmax_cross_entropy(gpu(logits), gpu(targets));
  expect_same(got.loss, want.loss, DType::F32, 10, "cross-entropy loss");
  const Tensor dloss = Tensor::full({}, 1.0, DType::F32);
  expect_same(ops::softmax_cross_entropy_backward(gpu(dloss), gpu(logits), gpu(targets), got.saved),
              ops::softmax_cross_entropy_backward(dloss, logits, targets, want.saved), DType::BF16, 1,
              "cross-entropy dlogits");
}

TEST(GpuOps, MatmulMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor a = random_tensor({3, 67, 130}, dt, 6), b = random_tensor({3, 91, 130}, dt, 7);
    const ops::MatmulOptions opt{.trans_b = true};
    expect_same(ops::matmul(gpu(a), gpu(b), opt), ops::matmul(a, b, opt), dt, 2, "batched matmul");
  }
}

TEST(GpuOps, Fp8BlockScaledMatmulMatchesCpu) {
  MPT_REQUIRE_GPU(9);  // cuBLASLt's VEC128 / BLK128x128 scale modes need Hopper
  const Tensor x = random_tensor({256, 384}, DType::F32, 8), w = random_tensor({512, 384}, DType::F32, 9);
  const auto qx = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128);
  const auto qw = ops::quantize_blockwise(w, DType::F8E4M3, ops::ScaleLayout::Block128x128);
  const ops::MatmulOptions cpu_opt{.trans_b = true, .out_dtype = DType::BF16,
                                   .scale_a = ops::Fp8Scaling::block_1x128(qx.scale_inv),
                                   .scale_b = ops::Fp8Scaling::block_128x128(qw.scale_inv)};
  const ops::MatmulOptions gpu_opt{.trans_b = true, .out_dtype = DType::BF16,
                                   .scale_a = ops::Fp8Scaling::block_1x128(gpu(qx.scale_inv)),
                                   .scale_b = ops::Fp8Scaling::block_128x128(gpu(qw.scale_inv))};
  expect_same(ops::matmul(gpu(qx.data), gpu(qw.data), gpu_opt), ops::matmul(qx.data, qw.data, cpu_opt), DType::BF16,
              2, "FP8 block-scaled matmul");
}

TEST(GpuOps, CausalAttentionForwardAndBackwardMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor q = random_tensor({2, 3, 77, 64}, dt, 10), k = random_tensor({2, 3, 77, 64}, dt, 11);
    const Tensor v = random_tensor({2, 3, 77, 64}, dt, 12), dout = random_tensor({2, 3, 77, 64}, dt, 13);
    const auto want = ops::causal_attention(q, k, v);
    const auto got = ops::causal_attention(gpu(q), gpu(k), gpu(v));
    // The GPU rounds the probabilities to dt for the P V GEMM; the CPU's flash kernel keeps them in f32.
    expect_same(got.out, want.out, dt, 2, "attention out");
    expect_same(got.lse, want.lse, DType::F32, 10, "attention lse");
    const auto gw = ops::causal_attention_backward(dout, q, k, v, want.out, want.lse);
    const auto gg = ops::causal_attention_backward(gpu(dout), gpu(q), gpu(k), gpu(v), got.out, got.lse);
    expect_same(gg.dq, gw.dq, dt, 4, "attention dq");
    expect_same(gg.dk, gw.dk, dt, 4, "attention dk");
    expect_same(gg.dv, gw.dv, dt, 4, "attention dv");
  }
}

}  // namespace
}  // namespace mpt
