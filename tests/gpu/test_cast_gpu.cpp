// tests/gpu/test_cast_gpu.cpp: dtype conversions and FP8 quantization (per tensor, current scaling, 1x128 / 128x128 blocks, dequantize) on cuda:0 against the CPU backend (bit-exact under emulation; skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/mpt.h"
#include "op_test.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#endif

namespace mpt {
namespace {

using testing::Match;
using testing::expect_match;
using testing::random_tensor;
using testing::to_cpu;
using testing::to_gpu;

const DType kFloats[] = {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2};
const DType kHigh[] = {DType::F32, DType::F16, DType::BF16};
const DType kFp8[] = {DType::F8E4M3, DType::F8E5M2};

std::string name_of(DType d) { return std::string(dtype_name(d)); }

// A conversion rounds once (nearest even) with the same encoder on both backends: exact on a real GPU too, where
// cvt.rn.* rounds identically; every element must match, so the GPU tolerance is zero as well.
const Match kSameBitsEverywhere = Match::exact(testing::Tolerance{0, 0});

// Values that exercise every rounding branch: normals, ties, subnormals of each format, overflow, Inf, NaN, -0.
Tensor special_values() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65504.0f, 65520.0f,
                          1e6f, -1e6f, inf, -inf, nan, 0x1p-9f, 0x1p-10f, 0x1p-16f, 0x1p-17f, 0x1p-24f, 0x1p-25f,
                          0x1.8p-25f, 1e-40f, 3.0e38f, 1.0f + 0x1p-8f, 1.0f + 0x1p-4f, 1.0f + 0x1.8p-4f, 0.3f};
  const Tensor r = random_tensor({301}, DType::F32, 1, 30.0);
  for (float x : r.to_vector<float>()) v.push_back(x);
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
}

TEST(GpuCast, EveryFloatConversionOnTheDeviceMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const Tensor base = special_values();
  for (DType from : kFloats) {
    const Tensor src = base.to(from, Fp8Saturation::Saturate), gsrc = to_gpu(src);
    for (DType to : kFloats) {
      for (Fp8Saturation sat : {Fp8Saturation::Saturate, Fp8Saturation::NoSaturate}) {
        const std::string name = name_of(from) + " -> " + name_of(to) +
                                 (sat == Fp8Saturation::Saturate ? " saturating" : " not saturating");
        const Tensor want = src.to(to, sat), got = gsrc.to(to, sat);
        ASSERT_TRUE(got.device().is_cuda()) << name;
        expect_match(got, want, kSameBitsEverywhere, name);
      }
    }
  }
}

TEST(GpuCast, AmaxAndPerTensorQuantizationMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kHigh) {
    const Tensor x = random_tensor({37, 203}, dt, 2, 5.0), gx = to_gpu(x);
    expect_match(ops::amax(gx), ops::amax(x), kSameBitsEverywhere, "amax " + name_of(dt));
    for (DType f8 : kFp8) {
      const std::string n = name_of(dt) + " -> " + name_of(f8);
      // Given scale, with the fused amax output.
      const Tensor scale = Tensor::full({}, 37.5, DType::F32);
      Tensor amax_c = Tensor::zeros({}, DType::F32), amax_g = to_gpu(amax_c);
      const auto qc = ops::quantize_fp8(x, f8, {.scale = scale, .amax = amax_c});
      const auto qg = ops::quantize_fp8(gx, f8, {.scale = to_gpu(scale), .amax = amax_g});
      expect_match(qg.data, qc.data, kSameBitsEverywhere, "quantize_fp8 given scale " + n);
      expect_match(qg.scale_inv, qc.scale_inv, kSameBitsEverywhere, "quantize_fp8 scale_inv " + n);
      expect_match(amax_g, amax_c, kSameBitsEverywhere, "quantize_fp8 fused amax " + n);
      // Folded into a slot that holds a value (delayed scaling's amax_history[0]), below and above max |x|, by the
      // plain and the transposing kernel, with the NaN-skipping amax the fold needs.
      for (float before : {0.5f, 1e6f}) {
        for (bool transpose : {false, true}) {
          Tensor slot_c = Tensor::full({}, before, DType::F32), slot_g = to_gpu(slot_c);
          const ops::QuantizeOptions oc{.scale = scale, .amax = slot_c, .amax_ignore_nan = true, .amax_accumulate = true};
          ops::QuantizeOptions og = oc;
          og.scale = to_gpu(scale), og.amax = slot_g;
          const Tensor dc = transpose ? ops::quantize_fp8_transpose(x, f8, oc).second.data : ops::quantize_fp8(x, f8, oc).data;
          const Tensor dg = transpose ? ops::quantize_fp8_transpose(gx, f8, og).second.data : ops::quantize_fp8(gx, f8, og).data;
          expect_match(dg, dc, kSameBitsEverywhere, "quantize_fp8 amax_accumulate codes " + n);
          expect_match(slot_g, slot_c, kSameBitsEverywhere, "quantize_fp8 amax_accumulate " + n);
          EXPECT_EQ(slot_c.item<float>(), std::max(before, amax_c.item<float>())) << n;
        }
      }
      const auto nc = ops::quantize_fp8(x, f8, {.scale = scale, .amax = {}, .saturation = Fp8Saturation::NoSaturate});
      const auto ng = ops::quantize_fp8(gx, f8, {.scale = to_gpu(scale), .amax = {}, .saturation = Fp8Saturation::NoSaturate});
      expect_match(ng.data, nc.data, kSameBitsEverywhere, "quantize_fp8 not saturating " + n);
      // Current scaling, with margins and power-of-two scales.
      for (int margin : {0, 3}) {
        for (bool pow2 : {false, true}) {
          const std::string m = n + " margin " + std::to_string(margin) + (pow2 ? " pow2" : "");
          const auto cc = ops::quantize_fp8(x, f8, {.scale = {}, .amax = {}, .margin = margin, .power_of_2 = pow2});
          const auto cg = ops::quantize_fp8(gx, f8, {.scale = {}, .amax = {}, .margin = margin, .power_of_2 = pow2});
          expect_match(cg.data, cc.data, kSameBitsEverywhere, "current scaling codes " + m);
          expect_match(cg.scale_inv, cc.scale_inv, kSameBitsEverywhere, "current scaling scale_inv " + m);
          for (DType out : kHigh)
            expect_match(ops::dequantize(cg, out), ops::dequantize(cc, out), kSameBitsEverywhere,
                         "dequantize to " + name_of(out) + " " + m);
        }
      }
      // Fused cast + transpose: both halves, and equal to quantize + transpose on the device.
      const auto [tc, tcT] = ops::quantize_fp8_transpose(x, f8);
      const auto [tg, tgT] = ops::quantize_fp8_transpose(gx, f8);
      expect_match(tg.data, tc.data, kSameBitsEverywhere, "quantize_fp8_transpose rowwise " + n);
      expect_match(tgT.data, tcT.data, kSameBitsEverywhere, "quantize_fp8_transpose columnwise " + n);
      expect_match(tgT.scale_inv, tcT.scale_inv, kSameBitsEverywhere, "quantize_fp8_transpose scale_inv " + n);
      EXPECT_TRUE(testing::same_bits(tgT.data, ops::quantize_fp8(gx, f8).data.t().contiguous())) << n;
    }
  }
}

// Inf/NaN and all-zero inputs: amax NaN, scale 1, NaN codes, on both backends alike.
// The bias gradient fused into cast + transpose: the same bits as the CPU's (both sum in kernels/math's tile order),
// for row counts that end mid-tile and every output dtype, with delayed-style given scales and current scaling.
// {304, 72} and {128, 256} take the vectorised kernel (64 x 64 tiles; 304 rows end mid-tile, 72 columns too); 1100
// and 2049 rows have more than 32 tiles, summed in groups of tiles (math::partial_groups) on both backends.
TEST(GpuCast, FusedDbiasMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (const Shape& shape :
       std::vector<Shape>{{1, 7}, {33, 40}, {77, 129}, {300, 64}, {304, 72}, {128, 256}, {1100, 72}, {2049, 40}}) {
    for (DType dt : kHigh) {
      const Tensor x = random_tensor(shape, dt, 5, 3.0), gx = to_gpu(x);
      for (DType out : kHigh) {
        for (bool current : {false, true}) {
          ops::QuantizeOptions oc, og;
          if (!current) oc.scale = Tensor::full({}, 16.0, DType::F32), og.scale = to_gpu(oc.scale);
          oc.dbias = Tensor::empty({shape.back()}, out);
          og.dbias = to_gpu(oc.dbias);
          const auto [qc, qtc] = ops::quantize_fp8_transpose(x, DType::F8E4M3, oc);
          const auto [qg, qtg] = ops::quantize_fp8_transpose(gx, DType::F8E4M3, og);
          const std::string n = shape_str(shape) + " " + name_of(dt) + " -> " + name_of(out);
          expect_match(qtg.data, qtc.data, kSameBitsEverywhere, "fused dbias codes " + n);
          expect_match(og.dbias, oc.dbias, kSameBitsEverywhere, "fused dbias " + n);
        }
      }
    }
  }
}

// gelu(x) quantized in the quantizing pass (the FP8 MLP's hidden codes from its pre-activation): the CPU's bits (gelu
// first, then the quantization) for the rowwise and the transposing kernels, scalar and vectorised ({304, 72} and
// {128, 256}), the amax folded into a slot; the CPU's equal to quantizing ops::gelu(x).
TEST(GpuCast, GeluQuantizationMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (const Shape& shape : std::vector<Shape>{{1, 7}, {33, 40}, {77, 129}, {304, 72}, {128, 256}}) {
    for (DType dt : kHigh) {
      const Tensor x = random_tensor(shape, dt, 11, 4.0), gx = to_gpu(x);
      for (DType f8 : kFp8) {
        for (bool transpose : {false, true}) {
          const std::string n = shape_str(shape) + " " + name_of(dt) + " -> " + name_of(f8) + (transpose ? " T" : "");
          const Tensor scale = Tensor::full({}, 24.0, DType::F32);
          Tensor slot_c = Tensor::full({}, 0.25, DType::F32), slot_g = to_gpu(slot_c), slot_r = slot_c.clone();
          ops::QuantizeOptions oc{.scale = scale, .amax = slot_c, .amax_ignore_nan = true, .amax_accumulate = true};
          oc.gelu = true;
          ops::QuantizeOptions og = oc, ref = oc;
          og.scale = to_gpu(scale), og.amax = slot_g;
          ref.gelu = false, ref.amax = slot_r;
          const Tensor g = ops::gelu(x);
          if (transpose) {
            const auto [qc, qtc] = ops::quantize_fp8_transpose(x, f8, oc);
            const auto [qg, qtg] = ops::quantize_fp8_transpose(gx, f8, og);
            const auto [qr, qtr] = ops::quantize_fp8_transpose(g, f8, ref);
            EXPECT_TRUE(testing::same_bits(qc.data, qr.data) && testing::same_bits(qtc.data, qtr.data)) << n;
            expect_match(qg.data, qc.data, kSameBitsEverywhere, "gelu codes " + n);
            expect_match(qtg.data, qtc.data, kSameBitsEverywhere, "gelu transposed codes " + n);
          } else {
            const auto qc = ops::quantize_fp8(x, f8, oc), qg = ops::quantize_fp8(gx, f8, og);
            EXPECT_TRUE(testing::same_bits(qc.data, ops::quantize_fp8(g, f8, ref).data)) << n;
            expect_match(qg.data, qc.data, kSameBitsEverywhere, "gelu codes " + n);
          }
          EXPECT_EQ(slot_c.item<float>(), slot_r.item<float>()) << n;
          EXPECT_GT(slot_c.item<float>(), 0.25f) << n;  // gelu(x)'s amax, folded
          expect_match(slot_g, slot_c, kSameBitsEverywhere, "gelu amax " + n);
        }
      }
    }
  }
}

// Under current scaling (no scale given): the amax pass takes max |gelu(x)| on the device (scalar and vectorised), so
// the scale, scale_inv and codes are the CPU's bits (gelu first, then current scaling of it).
TEST(GpuCast, GeluQuantizationUnderCurrentScalingMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (const Shape& shape : std::vector<Shape>{{1, 7}, {33, 40}, {304, 72}, {128, 256}}) {
    for (DType dt : kHigh) {
      const Tensor x = random_tensor(shape, dt, 12, 4.0), gx = to_gpu(x);
      for (DType f8 : kFp8) {
        const std::string n = shape_str(shape) + " " + name_of(dt) + " -> " + name_of(f8);
        ops::QuantizeOptions o{.amax_ignore_nan = true};
        o.gelu = true;
        const auto [qc, qtc] = ops::quantize_fp8_transpose(x, f8, o);
        const auto [qg, qtg] = ops::quantize_fp8_transpose(gx, f8, o);
        ops::QuantizeOptions ref{.amax_ignore_nan = true};
        const auto [qr, qtr] = ops::quantize_fp8_transpose(ops::gelu(x), f8, ref);
        EXPECT_TRUE(testing::same_bits(qc.data, qr.data) && testing::same_bits(qc.scale_inv, qr.scale_inv)) << n;
        expect_match(qg.data, qc.data, kSameBitsEverywhere, "gelu codes " + n);
        expect_match(qtg.data, qtc.data, kSameBitsEverywhere, "gelu transposed codes " + n);
        expect_match(qg.scale_inv, qc.scale_inv, kSameBitsEverywhere, "scale_inv " + n);
        expect_match(ops::quantize_fp8(gx, f8, o).data, qc.data, kSameBitsEverywhere, "gelu rowwise codes " + n);
      }
    }
  }
}

TEST(GpuCast, QuantizationOfSpecialValuesMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const Tensor sv = special_values();
  for (DType f8 : kFp8) {
    for (const Tensor& x : {sv, Tensor::zeros({5, 7}), sv.slice(0, 16, 301)}) {
      const std::string n = name_of(f8) + " of " + shape_str(x.shape());
      expect_match(ops::amax(to_gpu(x)), ops::amax(x), kSameBitsEverywhere, "amax " + n);
      const auto qc = ops::quantize_fp8(x, f8), qg = ops::quantize_fp8(to_gpu(x), f8);
      expect_match(qg.data, qc.data, kSameBitsEverywhere, "current scaling " + n);
      expect_match(qg.scale_inv, qc.scale_inv, kSameBitsEverywhere, "current scaling scale_inv " + n);
    }
  }
}

// W^T's codes of several weights at once (ops::transpose_codes): the CPU's bits; on the emulated GPU the pairs the
// vectorised tile takes share a launch per 99 matrices, the others (rows % 16 != 0, cols % 8 != 0) a copy each.
TEST(GpuCast, TransposeCodesMatchesCpuAndSharesLaunches) {
  MPT_REQUIRE_GPU(8);
  std::vector<Shape> shapes = {{16, 8}, {48, 40}, {64, 64}, {80, 200}, {32, 1000}, {136, 200}, {16, 12}};
  for (int k = 0; k < 120; ++k) shapes.push_back({16, 8});
  std::vector<Tensor> cs, cd, gs, gd;
  for (size_t k = 0; k < shapes.size(); ++k) {
    cs.push_back(random_tensor(shapes[k], DType::F32, 900 + k, 100.0).to(DType::F8E4M3));
    cd.push_back(Tensor::zeros({shapes[k][1], shapes[k][0]}, DType::F8E4M3));
    gs.push_back(to_gpu(cs.back()));
    gd.push_back(to_gpu(cd.back()));
  }
#if defined(MPT_CUDA_EMULATION)
  cuda_emu::reset_counters();
#endif
  ops::transpose_codes(gs, gd);
#if defined(MPT_CUDA_EMULATION)
  EXPECT_EQ(cuda_emu::counters().kernel_launches, 4u) << "125 vectorisable matrices in two launches, two copies";
#endif
  ops::transpose_codes(cs, cd);
  for (size_t k = 0; k < shapes.size(); ++k) {
    EXPECT_TRUE(testing::same_bits(cd[k], cs[k].t().contiguous())) << k;
    EXPECT_TRUE(testing::same_bits(to_cpu(gd[k]), cd[k])) << k;
  }
}

TEST(GpuCast, BlockQuantizationMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kHigh) {
    for (const Shape& shape : {Shape{130, 257}, Shape{3, 45, 128}, Shape{1, 129}}) {
      const Tensor x = random_tensor(shape, dt, 3, 4.0), gx = to_gpu(x);
      for (DType f8 : kFp8) {
        for (auto layout : {ops::ScaleLayout::Block1x128, ops::ScaleLayout::Block128x128}) {
          for (bool pow2 : {false, true}) {
            const std::string n = name_of(dt) + " " + shape_str(shape) + " -> " + name_of(f8) +
                                  (layout == ops::ScaleLayout::Block1x128 ? " 1x128" : " 128x128") +
                                  (pow2 ? " pow2" : "");
            const auto qc = ops::quantize_blockwise(x, f8, layout, {.power_of_2 = pow2});
            const auto qg = ops::quantize_blockwise(gx, f8, layout, {.power_of_2 = pow2});
            EXPECT_EQ(qg.layout, layout) << n;
            expect_match(qg.data, qc.data, kSameBitsEverywhere, "block codes " + n);
            expect_match(qg.scale_inv, qc.scale_inv, kSameBitsEverywhere, "block scale_inv " + n);
            expect_match(ops::dequantize(qg, dt), ops::dequantize(qc, dt), kSameBitsEverywhere, "block dequantize " + n);
          }
        }
      }
    }
  }
}

// 1x128 quantization of a 2-d x's transpose (an FP8-block recipe's columnwise operand): the device's fused kernel
// gives the CPU's bits, for row counts that end mid-block and column counts that end mid-tile.
TEST(GpuCast, TransposedBlockQuantizationMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kHigh) {
    for (const Shape& shape : {Shape{130, 257}, Shape{256, 40}, Shape{1, 129}, Shape{300, 1}}) {
      const Tensor x = random_tensor(shape, dt, 6, 4.0), gx = to_gpu(x);
      for (DType f8 : kFp8) {
        for (bool pow2 : {false, true}) {
          const std::string n = name_of(dt) + " " + shape_str(shape) + " -> " + name_of(f8) + (pow2 ? " pow2" : "");
          // With the fused bias gradient (the columnwise pass over a gradient dy).
          const ops::BlockQuantizeOptions oc{.power_of_2 = pow2, .transpose = true,
                                             .dbias = Tensor::empty({shape[1]}, DType::F32)};
          ops::BlockQuantizeOptions og = oc;
          og.dbias = to_gpu(oc.dbias);
          const auto qc = ops::quantize_blockwise(x, f8, ops::ScaleLayout::Block1x128, oc);
          const auto qg = ops::quantize_blockwise(gx, f8, ops::ScaleLayout::Block1x128, og);
          expect_match(qg.data, qc.data, kSameBitsEverywhere, "transposed block codes " + n);
          expect_match(qg.scale_inv, qc.scale_inv, kSameBitsEverywhere, "transposed block scale_inv " + n);
          expect_match(og.dbias, oc.dbias, kSameBitsEverywhere, "transposed block dbias " + n);
        }
      }
    }
  }
}

// x's 1x128 codes and x^T's from the device's one pass over each 128 x 128 tile (ops::quantize_blockwise_transpose):
// the CPU's two passes' bits, with the bias gradient from the same pass or the GELU prologue, for shapes that end
// mid-tile along either axis.
TEST(GpuCast, BlockQuantizationBothWaysMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kHigh) {
    for (const Shape& shape : {Shape{130, 257}, Shape{256, 40}, Shape{1, 129}, Shape{300, 1}, Shape{128, 384}}) {
      const Tensor x = random_tensor(shape, dt, 21, 4.0), gx = to_gpu(x);
      for (DType f8 : kFp8) {
        for (int mode = 0; mode < 4; ++mode) {  // plain (pow2), with dbias, gelu, dgelu with dbias
          const std::string n = name_of(dt) + " " + shape_str(shape) + " -> " + name_of(f8) +
                                (mode == 0 ? " pow2" : mode == 1 ? " dbias" : mode == 2 ? " gelu" : " dgelu");
          const bool dbias = mode == 1 || mode == 3;
          ops::BlockQuantizeOptions oc{.power_of_2 = mode == 0};
          if (dbias) oc.dbias = Tensor::empty({shape[1]}, DType::F32);
          oc.gelu = mode == 2;
          if (mode == 3) oc.dgelu_aux = random_tensor(shape, dt, 22, 3.0);
          ops::BlockQuantizeOptions og = oc;
          if (dbias) og.dbias = to_gpu(oc.dbias);
          if (mode == 3) og.dgelu_aux = to_gpu(oc.dgelu_aux);
          const auto [qc, qtc] = ops::quantize_blockwise_transpose(x, f8, oc);
          const auto [qg, qtg] = ops::quantize_blockwise_transpose(gx, f8, og);
          // The CPU's pair is its two quantizations' (checked here once more against the plain calls), of
          // gelu_backward(x, aux) under dgelu.
          ops::BlockQuantizeOptions plain = oc, transposed = oc;
          plain.dbias = plain.dgelu_aux = transposed.dgelu_aux = Tensor(), transposed.transpose = true;
          if (dbias) transposed.dbias = Tensor::empty({shape[1]}, DType::F32);
          const Tensor xs = mode == 3 ? ops::gelu_backward(x, oc.dgelu_aux) : x;
          expect_match(qc.data, ops::quantize_blockwise(xs, f8, ops::ScaleLayout::Block1x128, plain).data,
                       kSameBitsEverywhere, "cpu rowwise codes " + n);
          expect_match(qtc.data, ops::quantize_blockwise(xs, f8, ops::ScaleLayout::Block1x128, transposed).data,
                       kSameBitsEverywhere, "cpu columnwise codes " + n);
          ASSERT_EQ(qg.layout, ops::ScaleLayout::Block1x128) << n;
          ASSERT_EQ(qtg.data.shape(), (Shape{shape[1], shape[0]})) << n;
          expect_match(qg.data, qc.data, kSameBitsEverywhere, "rowwise codes " + n);
          expect_match(qg.scale_inv, qc.scale_inv, kSameBitsEverywhere, "rowwise scale_inv " + n);
          expect_match(qtg.data, qtc.data, kSameBitsEverywhere, "columnwise codes " + n);
          expect_match(qtg.scale_inv, qtc.scale_inv, kSameBitsEverywhere, "columnwise scale_inv " + n);
          if (dbias) {
            expect_match(og.dbias, oc.dbias, kSameBitsEverywhere, "dbias " + n);
            expect_match(oc.dbias, transposed.dbias, kSameBitsEverywhere, "cpu dbias " + n);
          }
        }
        // 128 x 128 tiles (a weight and W^T, which share the tile scales): the CPU's codes and their transposes.
        const std::string n = name_of(dt) + " " + shape_str(shape) + " -> " + name_of(f8) + " 128x128";
        const ops::Quantized want = ops::quantize_blockwise(x, f8, ops::ScaleLayout::Block128x128);
        const auto [wg, wtg] = ops::quantize_blockwise_transpose(gx, f8, {}, ops::ScaleLayout::Block128x128);
        const auto [wc, wtc] = ops::quantize_blockwise_transpose(x, f8, {}, ops::ScaleLayout::Block128x128);
        EXPECT_EQ(wtg.layout, ops::ScaleLayout::Block128x128) << n;
        expect_match(wg.data, want.data, kSameBitsEverywhere, "tile codes " + n);
        expect_match(wg.scale_inv, want.scale_inv, kSameBitsEverywhere, "tile scale_inv " + n);
        expect_match(wtg.data, want.data.t().contiguous(), kSameBitsEverywhere, "transposed tile codes " + n);
        expect_match(wtg.scale_inv, want.scale_inv.t().contiguous(), kSameBitsEverywhere, "transposed scales " + n);
        expect_match(wtc.data, wtg.data, kSameBitsEverywhere, "cpu transposed tile codes " + n);
      }
    }
  }
}

// Block scaling's GELU prologue (the FP8 MLP's hidden codes from its pre-activation): rowwise and transposed 1x128
// blocks of gelu(x) on the device have the CPU's bits (gelu first, then the blocks).
TEST(GpuCast, GeluBlockQuantizationMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kHigh) {
    for (const Shape& shape : {Shape{130, 257}, Shape{256, 40}, Shape{1, 129}}) {
      const Tensor x = random_tensor(shape, dt, 16, 4.0), gx = to_gpu(x);
      for (bool transpose : {false, true}) {
        const std::string n = name_of(dt) + " " + shape_str(shape) + (transpose ? " T" : "");
        ops::BlockQuantizeOptions o{.power_of_2 = true, .transpose = transpose};
        o.gelu = true;
        const auto qc = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, o);
        const auto qg = ops::quantize_blockwise(gx, DType::F8E4M3, ops::ScaleLayout::Block1x128, o);
        expect_match(qg.data, qc.data, kSameBitsEverywhere, "gelu block codes " + n);
        expect_match(qg.scale_inv, qc.scale_inv, kSameBitsEverywhere, "gelu block scale_inv " + n);
      }
    }
  }
}

// Copies that convert while crossing devices (staged) and strided conversions on the device agree with the CPU.
TEST(GpuCast, ConversionsAcrossDevicesAndLayoutsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const Tensor x = random_tensor({6, 9, 11}, DType::F32, 4, 100.0);
  for (DType to : kFloats) {
    const std::string n = "f32 -> " + name_of(to);
    expect_match(x.to(Device::cuda(0), to), x.to(to), kSameBitsEverywhere, n + " host to device");
    expect_match(to_gpu(x).to(Device::cpu(), to), x.to(to), kSameBitsEverywhere, n + " device to host");
    const Tensor xt = x.transpose(0, 2);
    expect_match(to_gpu(x).transpose(0, 2).to(to), xt.to(to), kSameBitsEverywhere, n + " transposed on the device");
    expect_match(to_gpu(x).slice(1, 1, 9, 3).to(to), x.slice(1, 1, 9, 3).to(to), kSameBitsEverywhere,
                 n + " sliced on the device");
  }
}

// The FP8 gradient all-reduce's scales on the device: the CPU's bits (one functor), special amaxes included.
TEST(GpuCast, Fp8WireScalesMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> amax{0.0f, 1.0f, 448.0f, 3.3e-7f, 1e-44f, 6.5e4f, inf, nan, 2.0f, 0.75f};
  const Tensor cpu = Tensor::from_vector(amax, {static_cast<int64_t>(amax.size())});
  Tensor dev = cpu.to(Device::cuda(0)), host = cpu.clone();
  ops::fp8_wire_amax_(dev);
  ops::fp8_wire_amax_(host);
  EXPECT_TRUE(testing::same_bits(to_cpu(dev), host));
  for (const int world : {1, 3, 8}) {
    const ops::Fp8WireScales d = ops::fp8_wire_scales(dev, world), c = ops::fp8_wire_scales(host, world);
    EXPECT_TRUE(testing::same_bits(to_cpu(d.scale), c.scale)) << world;
    EXPECT_TRUE(testing::same_bits(to_cpu(d.inv), c.inv)) << world;
  }
}

// A bucket's amax, quantize and dequantize passes on the device: the CPU's bits (the same functors) over 401
// parameters (three kernel-argument tables), empty ones, one spanning several 8192-element chunks, a NaN, an inf, and
// a buffer one element off its allocation's alignment (the scalar paths); a launch per table, not per parameter.
TEST(GpuCast, Fp8WireBucketPassesMatchCpu) {
  MPT_REQUIRE_GPU(8);
  std::vector<int64_t> bounds{0};
  std::mt19937 rng(5);
  for (int i = 0; i < 400; ++i) bounds.push_back(bounds.back() + (i % 37 == 0 ? 0 : static_cast<int64_t>(rng() % 700)));
  bounds.push_back(bounds.back() + 20000);
  const int64_t n = bounds.back(), segments = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<float> v = random_tensor({n + 1}, DType::F32, 9, 200.0).to_vector<float>();
  v[static_cast<size_t>(bounds[7] + 1)] = std::numeric_limits<float>::quiet_NaN();
  v[static_cast<size_t>(bounds[300] + 1)] = std::numeric_limits<float>::infinity();
  std::vector<float> inv(static_cast<size_t>(segments));
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = std::ldexp(1.0f + static_cast<float>(i % 5) / 8, static_cast<int>(i % 9) - 4);
  const Tensor inv_cpu = Tensor::from_vector(inv, {segments});
  for (const DType dt : kHigh) {
    for (const int64_t shift : {0, 1}) {
      SCOPED_TRACE(name_of(dt) + (shift ? " unaligned" : " aligned"));
      const Tensor flat = Tensor::from_vector(v, {n + 1}).to(dt).slice(0, shift, shift + n);
      const Tensor flat_dev = to_gpu(Tensor::from_vector(v, {n + 1}).to(dt)).slice(0, shift, shift + n);
      Tensor amax = Tensor::empty({segments}, DType::F32, Device::cpu());
      Tensor amax_dev = Tensor::full({segments}, 5.0f, DType::F32, Device::cuda(0));
      ops::fp8_wire_amaxes(flat, bounds, amax);
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::reset_counters();
#endif
      ops::fp8_wire_amaxes(flat_dev, bounds, amax_dev);
#if defined(MPT_CUDA_EMULATION)
      EXPECT_EQ(cuda_emu::counters().kernel_launches, 4u) << "one zeroing launch, then one per 160 parameters";
#endif
      EXPECT_TRUE(testing::same_bits(to_cpu(amax_dev), amax));
      const Tensor scale = ops::fp8_wire_scales(amax, 2).scale;
      Tensor codes = Tensor::empty({n}, DType::F8E4M3, Device::cpu());
      Tensor codes_dev = Tensor::empty({n + 1}, DType::F8E4M3, Device::cuda(0)).slice(0, shift, shift + n);
      ops::fp8_wire_quantize(flat, bounds, scale, codes);
      ops::fp8_wire_quantize(flat_dev, bounds, to_gpu(scale), codes_dev);
      EXPECT_TRUE(testing::same_bits(to_cpu(codes_dev), codes));
      Tensor out = Tensor::empty({n}, dt, Device::cpu());
      Tensor out_dev = Tensor::empty({n + 1}, dt, Device::cuda(0)).slice(0, shift, shift + n);
      ops::fp8_wire_dequantize(codes, bounds, inv_cpu, out);
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::reset_counters();
#endif
      ops::fp8_wire_dequantize(codes_dev, bounds, to_gpu(inv_cpu), out_dev);
#if defined(MPT_CUDA_EMULATION)
      EXPECT_EQ(cuda_emu::counters().kernel_launches, 3u) << "one launch per 160 parameters";
#endif
      EXPECT_TRUE(testing::same_bits(to_cpu(out_dev), out));
    }
  }
}

}  // namespace
}  // namespace mpt
