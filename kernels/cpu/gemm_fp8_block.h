// kernels/cpu/gemm_fp8_block.h: block-scaled FP8 GEMM core on AVX512-BF16 (per-128-K partial sums promoted in registers).
#pragma once

#include <cstdint>
#include <functional>

namespace mpt::kernels::cpu {

// Whether block_scaled_gemm can run here (AVX512-BF16 with AVX512F/BW/VL, and the vector paths enabled:
// kernels/cpu/convert.h's set_vector_conversions(false) selects the oneDNN-per-K-slice fallback instead).
bool block_scaled_gemm_available();

// One block-scaled product D = sum_kb sa(i, kb) sb(j, kb) (A_kb B_kb) for 128-long K blocks kb, the model of a
// tensor core's block-scaled GEMM (DeepGEMM, cuBLASLt VEC128/BLK128x128): each block's products of FP8 values
// (exact in bf16) accumulate in FP32 (VDPBF16PS, which flushes FP32 subnormals, as tensor cores do), then the
// partial is scaled by (sa * sb) and added to the FP32 accumulator. A is m x k: element (i, kk) at
// a[trans_a ? kk * lda + i : i * lda + kk]; B is k x n: element (kk, j) at b[trans_b ? j * ldb + kk : kk * ldb + j].
// TA and TB: f8e4m3 or f8e5m2 codes. sa: (m, KB) row-major; sbt: (KB, n) row-major (B's scale per K block and
// column); k >= 1. Finished tiles are handed to `sink(i0, rows, j0, cols, d)` (D's rows [i0, i0 + rows) and columns
// [j0, j0 + cols) as rows x cols floats, row-major), possibly from several threads at once; block_scaled_gemm
// returns the largest value any sink call returned (the output amax; NaN ignored).
using BlockRowsSink = std::function<float(int64_t i0, int64_t rows, int64_t j0, int64_t cols, const float* d)>;

template <class TA, class TB>
float block_scaled_gemm(int64_t m, int64_t n, int64_t k, const TA* a, int64_t lda, bool trans_a, const TB* b,
                        int64_t ldb, bool trans_b, const float* sa, const float* sbt, const BlockRowsSink& sink);

}  // namespace mpt::kernels::cpu
