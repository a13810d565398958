// kernels/cpu/gemm.h: CPU GEMM with FP32 accumulation: f32 and bf16 on oneDNN, f16 and FP8 through exact
// conversions, and a float64 reference loop.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/math/numerics.h"

namespace mpt::kernels::cpu {

// For each batch index i < batch:
//   C_i = alpha * op(A_i) op(B_i) + beta * C_i        op(A_i): m x k, op(B_i): k x n, C_i: m x n
// Every matrix is row-major with unit column stride. A_i is stored m x k (row stride lda) or, with trans_a,
// k x m and used transposed; B_i is stored k x n or, with trans_b, n x k. X_i starts at x + i * stride_x;
// stride 0 broadcasts one A or B over the batch (C needs its own matrix per batch entry).
// beta == 0 never reads C, so C may hold garbage (NaN) on entry.
struct GemmParams {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1, beta = 0;
  // Optional [n] f32 bias added to every row of the product in FP32, before beta * C and the one rounding to C's
  // type: C_i = op(A_i) op(B_i) + bias + beta * C_i (a Linear layer's epilogue; oneDNN's bias argument). Needs
  // alpha == 1 (FP8: added after the per-tensor or block dequantization scales).
  const float* bias = nullptr;
};

// The typed GEMMs. Supported (T, TC):
//   (float, float)                  oneDNN f32
//   (bf16, bf16), (bf16, float)     oneDNN bf16 (AVX512-BF16 or AMX where present), FP32 accumulation; on a CPU
//                                   without AVX-512 (oneDNN 2.6 has no bf16 matmul there) as f16 below
//   (f16, f16), (f16, float)        f16 -> f32 exactly, then oneDNN f32 (oneDNN 2.6 has no f16 matmul here)
//   (double, double)                blocked OpenMP loop in float64 (the reference dtype; slow)
// oneDNN primitives are cached by (dtypes, shape, transposes, leading dimensions, batch strides, whether alpha is
// 1, beta): see gemm_cache_stats. Throws std::invalid_argument on inconsistent parameters and lets dnnl::error
// through; the op layer (src/ops/matmul.cpp) validates first and names shapes and dtypes.
template <class T, class TC>
void gemm(const GemmParams& p, const T* a, const T* b, TC* c);

// The float64 reference behind gemm<double, double>: op(B) is packed to k x n, then rows of C split across OpenMP
// threads, each accumulating over k in float64 (every product and sum rounded to double).
void gemm_reference(const GemmParams& p, const double* a, const double* b, double* c);

// Throws std::invalid_argument unless the sizes, leading dimensions and strides describe valid matrices.
void check_gemm_params(const GemmParams& p);

// How an FP8 operand is dequantized: value = code * scale_inv. "Rows" are the operand's non-K dimension
// (m for A, n for B, whatever the transposition) and KB = ceil(k / 128):
//   PerTensor     scale_inv[0], shared by the whole batch
//   Block1x128    row-major [rows, KB]: one scale per row and 128-long K block (activations, gradients)
//   Block128x128  row-major [ceil(rows / 128), KB]: one scale per 128 x 128 tile (weights)
// A batched operand (stride != 0) with block scales has one such array per batch entry, consecutive.
enum class ScaleMode : uint8_t { PerTensor, Block1x128, Block128x128 };

struct OperandScale {
  ScaleMode mode = ScaleMode::PerTensor;
  const float* scale_inv = nullptr;
};

// How a block-scaled GEMM is computed. Both model a tensor core's FP32 accumulation of exact products:
//   Fold: when every block scale is a power of two in [2^-64, 2^64] (TE's default), scaling a code is exact in
//         bf16, so the scales are folded into the bf16 operands and one full-K oneDNN GEMM runs; otherwise
//         PerKBlock.
//   PerKBlock: D = sum_kb sA(i,kb) sB(j,kb) (A_kb B_kb): each 128-long K block's products accumulate in FP32,
//         then the partial is scaled and added in FP32 (what DeepGEMM and cuBLASLt's VEC128/BLK128x128 modes do).
//         With AVX512-BF16 one register-tiled kernel does it (kernels/cpu/gemm_fp8_block.h); otherwise one oneDNN
//         bf16 GEMM per K slice.
//   Auto: PerKBlock on the AVX512-BF16 kernel when this CPU has it (faster than folding there), else Fold.
// Per-tensor scales also run on the AVX512-BF16 kernel when the CPU has it (uniform block scales), else one oneDNN
// bf16 GEMM with the scales applied in the epilogue.
enum class BlockScaleAlgo : uint8_t { Auto, Fold, PerKBlock };

struct Fp8GemmArgs {
  OperandScale a, b;
  const float* out_scale = nullptr;  // FP8 C only (required): C = saturate(D * out_scale[0])
  float* out_amax = nullptr;         // FP8 C only (optional): receives max |D| over all batches (NaN ignored)
  BlockScaleAlgo algo = BlockScaleAlgo::Auto;
};

// FP8 GEMM: A and B are E4M3 or E5M2 codes (any combination), converted exactly to bf16 (every FP8 value is a
// bf16 value) and multiplied on the bf16 path with FP32 accumulation; per-tensor scales fold into alpha
// (alpha * sA * sB, rounded once in f32). D = alpha * dequant(A) dequant(B) + beta * C in f32, then rounded once
// to TC: float, bf16, f16, or f8e4m3 / f8e5m2 (saturating, with out_scale; beta must be 0 for FP8 C).
template <class TA, class TB, class TC>
void gemm_fp8(const GemmParams& p, const TA* a, const TB* b, TC* c, const Fp8GemmArgs& args);

// The oneDNN primitive cache: least recently used entries are evicted beyond `capacity` (default 256).
struct GemmCacheStats {
  int64_t hits = 0, misses = 0, size = 0, capacity = 0;
};
GemmCacheStats gemm_cache_stats();
void set_gemm_cache_capacity(size_t capacity);  // also evicts down to it; 0 clears and disables caching

}  // namespace mpt::kernels::cpu
