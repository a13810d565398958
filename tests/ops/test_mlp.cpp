// tests/ops/test_mlp.cpp: ops::mlp (the GELU in the GEMMs' epilogues) against the unfused linear -> gelu -> linear it
// replaces: the same bits on the CPU in f32 and f64, and in bf16 with FP32 masters up to b1's gradient, which the fused
// op rounds to bf16 (as the GEMM epilogue produces it) before it reaches the master.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/ops/activation.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/mlp.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

struct MlpRun {
  Tensor y, dx, dw1, db1, dw2, db2;
};

// dt: the compute dtype; the weights are FP32 masters read through compute copies when dt is low.
MlpRun run(DType dt, bool fused) {
  const int64_t n = 37, c = 24, h = 96;
  const DType wdt = dt == DType::F64 ? DType::F64 : DType::F32;
  Tensor x = random_tensor({n, c}, dt, 1).requires_grad_();
  Tensor w1 = random_tensor({h, c}, wdt, 2, 0.3).requires_grad_(), b1 = random_tensor({h}, wdt, 3).requires_grad_();
  Tensor w2 = random_tensor({c, h}, wdt, 4, 0.2).requires_grad_(), b2 = random_tensor({c}, wdt, 5).requires_grad_();
  const Tensor dy = random_tensor({n, c}, dt, 6);
  const Tensor c1 = w1.detach().to(dt), c2 = w2.detach().to(dt);
  const bool copies = dt != wdt;
  Tensor y;
  if (fused) {
    y = ops::mlp(x, w1, b1, w2, b2, {.compute_w1 = copies ? c1 : Tensor{}, .compute_w2 = copies ? c2 : Tensor{}});
  } else {
    const Tensor a = ops::gelu(ops::linear(x, w1, b1, {.compute_weight = copies ? c1 : Tensor{}}));
    y = ops::linear(a, w2, b2, {.compute_weight = copies ? c2 : Tensor{}});
  }
  y.backward(dy);
  return {y.detach(), x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()};
}

TEST(Mlp, SameBitsAsTheUnfusedOpsInF32AndF64) {
  for (DType dt : {DType::F32, DType::F64}) {
    const MlpRun f = run(dt, true), u = run(dt, false);
    const std::string n(dtype_name(dt));
    EXPECT_TRUE(mpt::testing::same_bits(f.y, u.y)) << n;
    EXPECT_TRUE(mpt::testing::same_bits(f.dx, u.dx)) << n;
    EXPECT_TRUE(mpt::testing::same_bits(f.dw1, u.dw1)) << n;
    EXPECT_TRUE(mpt::testing::same_bits(f.db1, u.db1)) << n;
    EXPECT_TRUE(mpt::testing::same_bits(f.dw2, u.dw2)) << n;
    EXPECT_TRUE(mpt::testing::same_bits(f.db2, u.db2)) << n;
  }
}

TEST(Mlp, Bf16WithMastersMatchesTheUnfusedOpsExceptB1sRounding) {
  const MlpRun f = run(DType::BF16, true), u = run(DType::BF16, false);
  EXPECT_TRUE(mpt::testing::same_bits(f.y, u.y));
  EXPECT_TRUE(mpt::testing::same_bits(f.dx, u.dx));
  EXPECT_TRUE(mpt::testing::same_bits(f.dw1, u.dw1));
  EXPECT_TRUE(mpt::testing::same_bits(f.dw2, u.dw2));
  EXPECT_TRUE(mpt::testing::same_bits(f.db2, u.db2));
  ASSERT_EQ(f.db1.dtype(), DType::F32);
  EXPECT_TRUE(mpt::testing::same_bits(f.db1, u.db1.to(DType::BF16).to(DType::F32)));
}

TEST(Mlp, BadShapesAndDtypesAreClearErrors) {
  const Tensor x = random_tensor({4, 8}, DType::F32, 1), w1 = random_tensor({16, 8}, DType::F32, 2);
  const Tensor w2 = random_tensor({8, 16}, DType::F32, 3);
  EXPECT_MPT_ERROR(ops::mlp(x, w1, {}, random_tensor({8, 15}, DType::F32, 4), {}), "[mlp] w2 must be [out, 16]");
  EXPECT_MPT_ERROR(ops::mlp(x.reshape({2, 2, 8}), w1, {}, w2, {}), "[mlp] expected x [N, C]");
  EXPECT_MPT_ERROR(ops::mlp(x, w1, random_tensor({15}, DType::F32, 5), w2, {}), "[mlp] b1 must be a float [16]");
  EXPECT_MPT_ERROR(ops::mlp(x.to(DType::BF16), w1, {}, w2, {}), "[mlp] the GEMMs need x and the copy of w1");
}

}  // namespace
