// tests/support/norm_checks.h: bit-exact checks of the fused residual norms shared by the CPU (test_ops) and device
// (test_gpu) suites.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "mpt/autograd/engine.h"
#include "mpt/ops/cast.h"
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
          const ops::NormOutput y_dtype = y_half ? ops::NormOutput(half) : ops::NormOutput();
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
          if (!rms) {
            EXPECT_TRUE(norm_same_bits(lb.grad(), g.dbias)) << "dbias";
          }
        }
      }
    }
  }
}

// The operands of one FP8-output norm case on `device`: x [3, 4, cols] (bf16 for residual == 2, beside an f32
// residual; else f32 with a NaN in row 5, whose norm is NaN and which the amax skips), the residual, weight, bias,
// dy and the sum's gradient.
// A norm (LayerNorm or RMSNorm, plain or with a fused residual) of x (beside r) stored as `o`, then its backward from
// dy (and dsum for the sum): (y, sum), the sum undefined without a residual.
inline std::pair<Tensor, Tensor> run_norm(bool rms, bool residual, const Tensor& x, const Tensor& r, const Tensor& w,
                                          const Tensor& b, const ops::NormOutput& o, const Tensor& dy,
                                          const Tensor& dsum) {
  if (!residual) {
    const Tensor y = rms ? ops::rms_norm(x, w, 1e-6, o).y : ops::layer_norm(x, w, b, 1e-5, o).y;
    autograd::backward({y}, {dy});
    return {y, Tensor()};
  }
  const ops::ResidualLayerNormResult n =
      rms ? ops::residual_rms_norm(x, r, w, 1e-6, o) : ops::residual_layer_norm(x, r, w, b, 1e-5, o);
  autograd::backward({n.y, n.sum}, {dy, dsum});
  return {n.y, n.sum};
}

struct Fp8NormCase {
  Tensor x, r, w, b, dy, dsum;
};
inline Fp8NormCase fp8_norm_case(Device device, int residual, int64_t cols, uint64_t seed) {
  Tensor xc = random_tensor({3, 4, cols}, residual == 2 ? DType::BF16 : DType::F32, seed, 2.0);
  if (residual != 2) xc.data<float>()[5 * cols + 3] = std::numeric_limits<float>::quiet_NaN();
  return {xc.to(device),
          random_tensor({3, 4, cols}, DType::F32, seed + 1, 2.0).to(device),
          random_tensor({cols}, DType::F32, seed + 2, 3.0).to(device),
          random_tensor({cols}, DType::F32, seed + 3).to(device),
          random_tensor({3, 4, cols}, DType::F32, seed + 4).to(device),
          random_tensor({3, 4, cols}, DType::F32, seed + 5).to(device)};
}

// A norm's f8e4m3 output (ops::NormOutput::fp8, delayed scaling's input quantization folded into the norm): the codes
// and the amax folded into the given slot are ops::quantize_fp8's of the f32 norm with the same scale, bit for bit
// (saturation at a large scale, a NaN row skipped by the amax, a slot above the amax kept); the gradients from an f32
// dy are the f32 norm's. Plain and residual norms (x f32 or bf16 beside the residual), LayerNorm and RMSNorm, a
// vectorised (96) and a scalar (37) row.
inline void expect_norm_fp8_output_is_the_quantized_norm(Device device) {
  for (const bool rms : {false, true}) {
    for (const int residual : {0, 1, 2}) {  // none, f32 x, bf16 x beside an f32 residual
      for (const int64_t cols : {96, 37}) {
        for (const float slot : {0.25f, 1e6f}) {
          SCOPED_TRACE(::testing::Message() << "rms " << rms << " residual " << residual << " cols " << cols
                                            << " amax slot " << slot);
          const Fp8NormCase c =
              fp8_norm_case(device, residual, cols, 900 + static_cast<uint64_t>(cols + 10 * residual));
          const Tensor &x = c.x, &r = c.r, &w = c.w, &b = c.b, &dy = c.dy, &dsum = c.dsum;
          const Tensor scale = Tensor::full({1}, 96.0, DType::F32).to(device);  // some |y| * 96 exceed 448: saturated
          const Tensor amax = Tensor::full({1}, slot, DType::F32).to(device);
          const Tensor lx = x.clone().requires_grad_(), lr = r.clone().requires_grad_();
          const Tensor lw = w.clone().requires_grad_(), lb = b.clone().requires_grad_();
          const ops::NormOutput out = ops::NormOutput::fp8(scale, amax);
          const auto [y, sum] = run_norm(rms, residual != 0, lx, lr, lw, lb, out, dy, dsum);
          // The unfused graph: the f32 norm through autograd, then quantize_fp8 of its output.
          const Tensor ux = x.clone().requires_grad_(), ur = r.clone().requires_grad_();
          const Tensor uw = w.clone().requires_grad_(), ub = b.clone().requires_grad_();
          const auto [uy, usum] = run_norm(rms, residual != 0, ux, ur, uw, ub, ops::NormOutput(), dy, dsum);
          ops::QuantizeOptions q;
          q.scale = scale;
          q.amax = Tensor::full({1}, slot, DType::F32).to(device);
          q.amax_accumulate = true;
          q.amax_ignore_nan = true;
          const ops::Quantized ref = ops::quantize_fp8(uy.detach(), DType::F8E4M3, q);
          EXPECT_EQ(y.dtype(), DType::F8E4M3);
          EXPECT_TRUE(norm_same_bits(y, ref.data)) << "codes";
          EXPECT_TRUE(norm_same_bits(amax, q.amax)) << "amax: " << amax.to(Device::cpu()).data<float>()[0] << " vs "
                                                    << q.amax.to(Device::cpu()).data<float>()[0];
          if (slot < 1e6f) {  // the norm's amax is above 0.25, finite (the NaN skipped) and was folded in
            const float a = amax.to(Device::cpu()).data<float>()[0];
            EXPECT_TRUE(std::isfinite(a) && a > slot) << a;
          }
          if (residual != 0) {
            EXPECT_TRUE(norm_same_bits(sum, usum)) << "sum";
          }
          EXPECT_TRUE(norm_same_bits(lx.grad(), ux.grad())) << "dx";
          if (residual != 0) {
            EXPECT_TRUE(norm_same_bits(lr.grad(), ur.grad())) << "dresidual";
          }
          EXPECT_TRUE(norm_same_bits(lw.grad(), uw.grad())) << "dweight";
          if (!rms) {
            EXPECT_TRUE(norm_same_bits(lb.grad(), ub.grad())) << "dbias";
          }
        }
      }
    }
  }
}

// A norm's f8e4m3 output under current scaling (ops::NormOutput::fp8_current: an amax pass, the scale, a codes pass):
// the codes and scale_inv are ops::quantize_fp8's of the f32 norm with current scaling (NaN skipped by the amax), the
// scale is fp8::compute_scale_from_amax's of that norm's amax, the sum and the gradients from an f32 dy the f32
// norm's; power-of-two scales or not; the shapes of expect_norm_fp8_output_is_the_quantized_norm.
inline void expect_norm_fp8_current_output_is_the_quantized_norm(Device device) {
  for (const bool rms : {false, true}) {
    for (const int residual : {0, 1, 2}) {  // none, f32 x, bf16 x beside an f32 residual
      for (const int64_t cols : {96, 37}) {
        for (const bool pow2 : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "rms " << rms << " residual " << residual << " cols " << cols
                                            << " power of 2 " << pow2);
          const Fp8NormCase c =
              fp8_norm_case(device, residual, cols, 950 + static_cast<uint64_t>(cols + 10 * residual));
          const Tensor &x = c.x, &r = c.r, &w = c.w, &b = c.b, &dy = c.dy, &dsum = c.dsum;
          const Tensor scale = Tensor::zeros({}, DType::F32).to(device), scale_inv = scale.clone();
          const ops::NormOutput out = ops::NormOutput::fp8_current(scale, scale_inv, pow2);
          auto norm = [&](const Tensor& lx, const Tensor& lr, const Tensor& lw, const Tensor& lb,
                          const ops::NormOutput& o) {
            return run_norm(rms, residual != 0, lx, lr, lw, lb, o, dy, dsum);
          };
          const Tensor lx = x.clone().requires_grad_(), lr = r.clone().requires_grad_();
          const Tensor lw = w.clone().requires_grad_(), lb = b.clone().requires_grad_();
          const auto [y, sum] = norm(lx, lr, lw, lb, out);
          const Tensor ux = x.clone().requires_grad_(), ur = r.clone().requires_grad_();
          const Tensor uw = w.clone().requires_grad_(), ub = b.clone().requires_grad_();
          const auto [uy, usum] = norm(ux, ur, uw, ub, ops::NormOutput());
          ops::QuantizeOptions q;
          q.power_of_2 = pow2;
          q.amax_ignore_nan = true;
          const ops::Quantized ref = ops::quantize_fp8(uy.detach(), DType::F8E4M3, q);
          float amax = 0.0f;  // max |norm|, NaN skipped, on the host; the scale E4M3's 448 over it
          const Tensor hy = uy.detach().to(Device::cpu());
          for (int64_t i = 0; i < hy.numel(); ++i) {
            if (!std::isnan(hy.data<float>()[i])) amax = std::max(amax, std::fabs(hy.data<float>()[i]));
          }
          const float want_scale = pow2 ? std::exp2(std::floor(std::log2(448.0f / amax))) : 448.0f / amax;
          EXPECT_EQ(y.dtype(), DType::F8E4M3);
          EXPECT_TRUE(norm_same_bits(y, ref.data)) << "codes";
          EXPECT_TRUE(norm_same_bits(scale_inv, ref.scale_inv)) << "scale_inv";
          EXPECT_EQ(scale.to(Device::cpu()).data<float>()[0], want_scale);
          EXPECT_NE(want_scale, 1.0f);
          if (residual != 0) {
            EXPECT_TRUE(norm_same_bits(sum, usum)) << "sum";
            EXPECT_TRUE(norm_same_bits(lr.grad(), ur.grad())) << "dresidual";
          }
          EXPECT_TRUE(norm_same_bits(lx.grad(), ux.grad())) << "dx";
          EXPECT_TRUE(norm_same_bits(lw.grad(), uw.grad())) << "dweight";
          if (!rms) {
            EXPECT_TRUE(norm_same_bits(lb.grad(), ub.grad())) << "dbias";
          }
        }
      }
    }
  }
}

// E4M3 codes a and b equal, or one step apart (|ordinal difference| <= 1, +0 and -0 both 0; NaNs equal): the codes of
// two f32 values that differ by a few f32 ulps.
inline bool fp8_codes_within_one_step(const Tensor& a_in, const Tensor& b_in, int64_t* different = nullptr) {
  const Tensor a = a_in.to(Device::cpu()).contiguous(), b = b_in.to(Device::cpu()).contiguous();
  if (a.dtype() != DType::F8E4M3 || b.dtype() != DType::F8E4M3 || a.shape() != b.shape()) return false;
  const auto* pa = static_cast<const uint8_t*>(a.data_ptr());
  const auto* pb = static_cast<const uint8_t*>(b.data_ptr());
  auto ordinal = [](uint8_t c) { return (c & 0x80) != 0 ? -int(c & 0x7f) : int(c & 0x7f); };
  auto nan = [](uint8_t c) { return (c & 0x7f) == 0x7f; };
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (nan(pa[i]) || nan(pb[i])) {
      if (nan(pa[i]) != nan(pb[i])) return false;
      continue;
    }
    const int d = std::abs(ordinal(pa[i]) - ordinal(pb[i]));
    if (d > 1) return false;
    n += d;
  }
  if (different != nullptr) *different = n;
  return true;
}

// A norm of a half residual stream (amp::Policy::residual: bf16 activations, f32 weights) writing f8e4m3 codes, under
// delayed (a given scale, the amax folded into a slot) and current scaling (an amax pass, the scale, a codes pass):
// - the sum, the statistics and every gradient (from a bf16 dy) are the bf16-output norm's, bit for bit: the same
//   kernel types but Y, whose backward reads only dy and the statistics;
// - the codes are the quantization, with the norm's own scale, of the f32 norm of the bf16 values (the residual
//   sum's rounded values) widened: the two f32 norms come from differently ordered reductions (the kernels' vector
//   widths follow the activation dtype), so they differ by a few f32 ulps and a code may land one E4M3 step away
//   where a value sits at a rounding boundary, never further;
// - current scaling's scale is E4M3's 448 over that f32 norm's max |value| (NaN skipped), within f32 rounding (2^-20
//   relative), and the delayed amax slot holds max(slot, max |norm|) likewise.
inline void expect_half_stream_norm_fp8_output(Device device) {
  for (const bool rms : {false, true}) {
    for (const bool residual : {false, true}) {
      for (const bool current : {false, true}) {
        for (const int64_t cols : {96, 37}) {
          SCOPED_TRACE(::testing::Message() << "rms " << rms << " residual " << residual << " current " << current
                                            << " cols " << cols);
          const uint64_t seed = 970 + static_cast<uint64_t>(cols) + (residual ? 10 : 0);
          Tensor xf = random_tensor({3, 4, cols}, DType::F32, seed, 2.0);
          xf.data<float>()[5 * cols + 3] = std::numeric_limits<float>::quiet_NaN();
          const Tensor x = xf.to(DType::BF16).to(device);
          const Tensor r = random_tensor({3, 4, cols}, DType::BF16, seed + 1, 2.0).to(device);
          const Tensor w = random_tensor({cols}, DType::F32, seed + 2, 3.0).to(device);
          const Tensor b = random_tensor({cols}, DType::F32, seed + 3).to(device);
          const Tensor dy = random_tensor({3, 4, cols}, DType::BF16, seed + 4).to(device);
          const Tensor dsum = random_tensor({3, 4, cols}, DType::BF16, seed + 5).to(device);
          auto norm = [&](const Tensor& lx, const Tensor& lr, const Tensor& lw, const Tensor& lb,
                          const ops::NormOutput& o) {
            return run_norm(rms, residual, lx, lr, lw, lb, o, dy, dsum);
          };
          const Tensor scale = current ? Tensor::zeros({}, DType::F32).to(device)
                                       : Tensor::full({1}, 96.0, DType::F32).to(device);
          const Tensor scale_inv = Tensor::zeros({}, DType::F32).to(device);
          const Tensor amax = Tensor::full({1}, 0.25, DType::F32).to(device);
          const ops::NormOutput out = current ? ops::NormOutput::fp8_current(scale, scale_inv, false)
                                              : ops::NormOutput::fp8(scale, amax);
          const Tensor lx = x.clone().requires_grad_(), lr = r.clone().requires_grad_();
          const Tensor lw = w.clone().requires_grad_(), lb = b.clone().requires_grad_();
          const auto [y, sum] = norm(lx, lr, lw, lb, out);
          const Tensor hx = x.clone().requires_grad_(), hr = r.clone().requires_grad_();
          const Tensor hw = w.clone().requires_grad_(), hb = b.clone().requires_grad_();
          const auto [hy, hsum] = norm(hx, hr, hw, hb, ops::NormOutput());  // bf16 out
          ASSERT_EQ(y.dtype(), DType::F8E4M3);
          ASSERT_EQ(hy.dtype(), DType::BF16);
          if (residual) {
            EXPECT_TRUE(norm_same_bits(sum, hsum)) << "sum";
            EXPECT_TRUE(norm_same_bits(lr.grad(), hr.grad())) << "dresidual";
          }
          EXPECT_TRUE(norm_same_bits(lx.grad(), hx.grad())) << "dx";
          EXPECT_TRUE(norm_same_bits(lw.grad(), hw.grad())) << "dweight";
          if (!rms) {
            EXPECT_TRUE(norm_same_bits(lb.grad(), hb.grad())) << "dbias";
          }
          // The f32 norm of the widened bf16 values (the rounded sum's for a residual norm), quantized with the
          // norm's own scale.
          const Tensor s32 = (residual ? hsum : x).detach().to(DType::F32);
          const Tensor f = rms ? ops::rms_norm(s32, w, 1e-6).y : ops::layer_norm(s32, w, b, 1e-5).y;
          float m = 0.0f;
          const Tensor hf = f.to(Device::cpu());
          for (int64_t i = 0; i < hf.numel(); ++i) {
            if (!std::isnan(hf.data<float>()[i])) m = std::max(m, std::fabs(hf.data<float>()[i]));
          }
          ops::QuantizeOptions q;
          q.scale = scale;
          const ops::Quantized ref = ops::quantize_fp8(f, DType::F8E4M3, q);
          int64_t different = 0;
          EXPECT_TRUE(fp8_codes_within_one_step(y, ref.data, &different)) << "codes";
          std::printf("codes one step apart: %lld of %lld\n", static_cast<long long>(different),
                      static_cast<long long>(y.numel()));
          const double got = (current ? scale : amax).to(Device::cpu()).data<float>()[0];
          const double want = current ? 448.0 / m : std::max(0.25, double(m));
          EXPECT_NEAR(got, want, 0x1p-20 * want) << (current ? "scale" : "amax");
          if (current) {
            EXPECT_EQ(scale_inv.to(Device::cpu()).data<float>()[0], 1.0f / scale.to(Device::cpu()).data<float>()[0]);
          }
        }
      }
    }
  }
}

}  // namespace mpt::testing
