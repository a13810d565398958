// tests/support/norm_checks.h: bit-exact checks of the fused residual norms shared by the CPU (test_ops) and device
// (test_gpu) suites.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "mpt/autograd/engine.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/layernorm.h"
#include "op_test.h"

namespace mpt::testing {

// Same dtype, shape and bytes (both copied to the CPU).
inline bool norm_same_bits(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = a_in.to(Device::cpu()).contiguous(), b = b_in.to(Device::cpu()).contiguous();
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

// A residual norm's x in f16/bf16 beside an f32 residual (a sublayer's GEMM output entering the f32 stream): the sum,
// y and every gradient have the bits of the unfused graph, x widened by a cast, the norm's backward, then the sum's
// own gradient added and x's gradient rounded back. The norm's output in f32 or in x's dtype.
inline void expect_residual_norm_folds_half_x(Device device) {
  for (const DType half : {DType::BF16, DType::F16}) {
    for (const bool rms : {false, true}) {
      for (const bool y_half : {false, true}) {
        for (const int64_t cols : {96, 37}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(half) << " rms " << rms << " y_half " << y_half << " cols "
                                            << cols);
          const uint64_t seed = 400 + static_cast<uint64_t>(cols);
          const Tensor xh = random_tensor({4, 5, cols}, half, seed, 2.0).to(device);
          const Tensor r = random_tensor({4, 5, cols}, DType::F32, seed + 1, 2.0).to(device);
          const Tensor w = random_tensor({cols}, DType::F32, seed + 2).to(device);
          const Tensor b = random_tensor({cols}, DType::F32, seed + 3).to(device);
          const Tensor dy = random_tensor({4, 5, cols}, y_half ? half : DType::F32, seed + 4).to(device);
          const Tensor dsum = random_tensor({4, 5, cols}, DType::F32, seed + 5).to(device);
          const std::optional<DType> y_dtype = y_half ? std::optional<DType>(half) : std::nullopt;
          // The fused op through autograd.
          const Tensor lx = xh.clone().requires_grad_(), lr = r.clone().requires_grad_();
          const Tensor lw = w.clone().requires_grad_(), lb = b.clone().requires_grad_();
          const ops::ResidualLayerNormResult o = rms ? ops::residual_rms_norm(lx, lr, lw, 1e-6, y_dtype)
                                                     : ops::residual_layer_norm(lx, lr, lw, lb, 1e-5, y_dtype);
          autograd::backward({o.y, o.sum}, {dy, dsum});
          // The unfused graph by hand.
          const Tensor xf = xh.to(DType::F32);
          const ops::ResidualLayerNormResult u =
              rms ? ops::residual_rms_norm(xf, r, w, 1e-6) : ops::residual_layer_norm(xf, r, w, b, 1e-5);
          const ops::LayerNormGrads g =
              ops::layer_norm_backward(dy.to(DType::F32), u.sum, w, u.saved, /*has_bias=*/!rms);
          const Tensor ds = ops::add(dsum, g.dx);
          EXPECT_TRUE(norm_same_bits(o.sum, u.sum)) << "sum";
          EXPECT_TRUE(norm_same_bits(o.y, y_half ? u.y.to(half) : u.y)) << "y";
          EXPECT_TRUE(norm_same_bits(lx.grad(), ds.to(half))) << "dx (half)";
          EXPECT_TRUE(norm_same_bits(lr.grad(), ds)) << "dresidual";
          EXPECT_TRUE(norm_same_bits(lw.grad(), g.dweight)) << "dweight";
          if (!rms) EXPECT_TRUE(norm_same_bits(lb.grad(), g.dbias)) << "dbias";
        }
      }
    }
  }
}

}  // namespace mpt::testing
