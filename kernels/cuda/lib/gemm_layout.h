// kernels/cuda/lib/gemm_layout.h: pure functions mapping a row-major GEMM onto cuBLASLt's column-major call, and
// our FP8 block-scale layouts onto cuBLASLt's; no CUDA header, so they are testable in every build.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"

namespace mpt::kernels::cuda {

// A row-major problem, with the meaning of kernels/cpu/gemm.h's GemmParams (same field names):
//   C_i = alpha * op(A_i) op(B_i) + beta * C_i      op(A_i): m x k, op(B_i): k x n, C_i: m x n, all row-major.
// A_i is stored m x k (row stride lda) or, with trans_a, k x m; B_i is stored k x n or, with trans_b, n x k.
// X_i starts at x + i * stride_x elements; stride 0 broadcasts A or B over the batch.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// One matrix as a cuBLASLt layout describes it: the STORED matrix, column-major (ORDER_COL), and whether the
// matmul descriptor applies CUBLAS_OP_T to it.
struct LtMatrix {
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  bool op_t = false;
};

// The column-major call computing C^T = op(B)^T op(A)^T (vendor-semantics R1.5): a row-major X (r x c, row
// stride ld) is the column-major X^T (c x r) with the same ld, so cuBLASLt's A is OUR B's buffer and cuBLASLt's
// B is OUR A's buffer, and cuBLASLt's (m, n) is our (n, m). Everything attached to an operand swaps with it
// (scale pointers and scale modes: our A's go to cuBLASLt's B).
struct LtProblem {
  int64_t m = 0, n = 0, k = 0;  // cuBLASLt's: D is m x n = our n x m
  LtMatrix a, b, d;             // a: our B's buffer; b: our A's buffer; d: our C's buffer (C and D alike)
  int64_t batch = 1;
};

inline LtProblem to_column_major(const GemmShape& s) {
  LtProblem p;
  p.m = s.n, p.n = s.m, p.k = s.k, p.batch = s.batch;
  // Our B stored k x n (row-major) is the column-major n x k = op(B)^T: no transpose. Stored n x k (trans_b) it
  // is the column-major k x n whose transpose is op(B)^T: OP_T.
  p.a = s.trans_b ? LtMatrix{s.k, s.n, s.ldb, s.stride_b, true} : LtMatrix{s.n, s.k, s.ldb, s.stride_b, false};
  // Our A stored m x k is the column-major k x m = op(A)^T; stored k x m (trans_a) it needs OP_T.
  p.b = s.trans_a ? LtMatrix{s.m, s.k, s.lda, s.stride_a, true} : LtMatrix{s.k, s.m, s.lda, s.stride_a, false};
  p.d = LtMatrix{s.n, s.m, s.ldc, s.stride_c, false};
  return p;
}

// FP8 on Hopper/Ada/Blackwell-consumer needs cuBLASLt's "TN" (A transposed, B not: R2.2b). In row-major terms:
// C = A B^T with A stored m x k and B stored n x k (both K-contiguous): trans_a == false, trans_b == true.
// A Linear forward y = x W^T (W stored [N, K]) has it naturally; dgrad and wgrad need transposed copies.
inline bool is_fp8_tn(const GemmShape& s) { return !s.trans_a && s.trans_b; }

// INT8 x INT8 -> INT32 (IMMA kernels with the regular column-major ordering, the only one Hopper has; cuBLAS docs,
// cublasLtMatmul): the TN layout as for FP8, cuBLASLt's m and k multiples of 4 (our n and k) and every leading
// dimension a multiple of 4 elements (pointers 4-byte aligned: checked with the call's pointers).
inline bool int8_gemm_shape_ok(const GemmShape& s) {
  return is_fp8_tn(s) && s.n % 4 == 0 && s.k % 4 == 0 && s.lda % 4 == 0 && s.ldb % 4 == 0 && s.ldc % 4 == 0;
}

// Epilogues, named in ROW-MAJOR terms (C is m x n; "per column" = one value per j < n).
//   Bias         C[i,j] = matmul[i,j] + bias[j]            bias length n (cuBLASLt: per row of its D, R5 BIAS)
//   Gelu         C = gelu(matmul)                          tanh approximation (R5)
//   GeluBias     C = gelu(matmul + bias[j])
//   GeluAux      C = gelu(matmul), aux = matmul            aux: row-major m x n, row stride aux_ld
//   GeluAuxBias  C = gelu(matmul + bias[j]), aux = matmul + bias[j]
//   DGelu        C = matmul * gelu'(aux)                   aux: the forward's GeluAux(Bias) output
//   DGeluBGrad   DGelu, plus bias[j] = sum_i C[i,j]        bias gradient, length n (sum over rows of C)
//   BGradA       plus bias[i] = sum_l op(A)[i,l]           length m (cuBLASLt's BGRADB: our A is its B)
//   BGradB       plus bias[j] = sum_l op(B)[l,j]           length n (cuBLASLt's BGRADA)
// The bias-gradient epilogues WRITE `bias` (overwrite, no accumulation).
enum class GemmEpilogue : uint8_t { None, Bias, Gelu, GeluBias, GeluAux, GeluAuxBias, DGelu, DGeluBGrad, BGradA, BGradB };

// cublasLtEpilogue_t values (gemm_cublaslt.cpp static_asserts them against cublasLt.h).
inline uint32_t lt_epilogue_value(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::Bias: return 4;           // CUBLASLT_EPILOGUE_BIAS
    case GemmEpilogue::Gelu: return 32;          // CUBLASLT_EPILOGUE_GELU
    case GemmEpilogue::GeluBias: return 36;      // CUBLASLT_EPILOGUE_GELU_BIAS
    case GemmEpilogue::GeluAux: return 160;      // CUBLASLT_EPILOGUE_GELU_AUX
    case GemmEpilogue::GeluAuxBias: return 164;  // CUBLASLT_EPILOGUE_GELU_AUX_BIAS
    case GemmEpilogue::DGelu: return 192;        // CUBLASLT_EPILOGUE_DGELU
    case GemmEpilogue::DGeluBGrad: return 208;   // CUBLASLT_EPILOGUE_DGELU_BGRAD
    case GemmEpilogue::BGradA: return 512;       // CUBLASLT_EPILOGUE_BGRADB (swap)
    case GemmEpilogue::BGradB: return 256;       // CUBLASLT_EPILOGUE_BGRADA (swap)
    case GemmEpilogue::None: break;
  }
  return 1;  // CUBLASLT_EPILOGUE_DEFAULT
}

inline bool epilogue_uses_bias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::GeluBias || e == GemmEpilogue::GeluAuxBias ||
         e == GemmEpilogue::DGeluBGrad || e == GemmEpilogue::BGradA || e == GemmEpilogue::BGradB;
}
inline bool epilogue_writes_bias(GemmEpilogue e) {
  return e == GemmEpilogue::DGeluBGrad || e == GemmEpilogue::BGradA || e == GemmEpilogue::BGradB;
}
inline bool epilogue_uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::GeluAux || e == GemmEpilogue::GeluAuxBias || e == GemmEpilogue::DGelu ||
         e == GemmEpilogue::DGeluBGrad;
}
// Length of the bias (or bias gradient) vector in row-major terms.
inline int64_t epilogue_bias_length(GemmEpilogue e, const GemmShape& s) { return e == GemmEpilogue::BGradA ? s.m : s.n; }

// How an FP8 operand's scale_inv is read (value = code * scale_inv), in OUR layouts (kernels/cpu/gemm.h,
// mpt/ops/matmul.h). rows = the operand's non-K dimension (m for A, n for B), KB = ceil(k / 128):
//   PerTensor     one float (cuBLASLt SCALAR_32F, mode 0): passed as is
//   Block1x128    row-major [rows, KB]               -> cuBLASLt VEC128_32F (mode 4): M-major, s[r + b * rows]
//   Block128x128  row-major [ceil(rows / 128), KB]   -> cuBLASLt BLK128x128_32F (mode 5): K-major with the
//                 stride padded to L4 = roundup(KB, 4): s[b + t * L4], entries KB..L4-1 are padding (R4.4)
// The two block layouts need a conversion on the device (kernels/cuda/gemm_scales.h); cuBLASLt is handed the
// converted arrays.
enum class GemmScaleMode : uint8_t { PerTensor, Block1x128, Block128x128 };

inline int32_t lt_scale_mode_value(GemmScaleMode m) {
  return m == GemmScaleMode::Block1x128 ? 4 : m == GemmScaleMode::Block128x128 ? 5 : 0;
}

MPT_HD inline int64_t scale_k_blocks(int64_t k) { return (k + 127) / 128; }
MPT_HD inline int64_t scale_row_blocks(int64_t rows) { return (rows + 127) / 128; }
MPT_HD inline int64_t padded_k_blocks(int64_t k) { return (scale_k_blocks(k) + 3) / 4 * 4; }

// Floats per batch entry in our layout and in cuBLASLt's.
MPT_HD inline int64_t our_scale_count(GemmScaleMode mode, int64_t rows, int64_t k) {
  if (mode == GemmScaleMode::PerTensor) return 1;
  return (mode == GemmScaleMode::Block1x128 ? rows : scale_row_blocks(rows)) * scale_k_blocks(k);
}
MPT_HD inline int64_t lt_scale_count(GemmScaleMode mode, int64_t rows, int64_t k) {
  if (mode == GemmScaleMode::Block128x128) return scale_row_blocks(rows) * padded_k_blocks(k);
  return our_scale_count(mode, rows, k);
}

// Where cuBLASLt reads the scale of (row r, K block b) of one batch entry: r is the row itself for Block1x128
// and the row's 128-row tile for Block128x128 (callers pass r / 128 there).
MPT_HD inline int64_t lt_scale_index(GemmScaleMode mode, int64_t r, int64_t b, int64_t rows, int64_t k) {
  if (mode == GemmScaleMode::Block1x128) return r + b * rows;
  if (mode == GemmScaleMode::Block128x128) return b + r * padded_k_blocks(k);
  return 0;
}

// The inverse, for the conversion kernel (one thread per cuBLASLt entry): the index into OUR layout of the scale
// cuBLASLt reads at `lt_index` of one batch entry, or -1 for BLK padding (written as 0).
MPT_HD inline int64_t our_index_of_lt(GemmScaleMode mode, int64_t lt_index, int64_t rows, int64_t k) {
  const int64_t kb = scale_k_blocks(k);
  if (mode == GemmScaleMode::Block1x128) return (lt_index % rows) * kb + lt_index / rows;
  if (mode == GemmScaleMode::Block128x128) {
    const int64_t l4 = padded_k_blocks(k), b = lt_index % l4;
    return b < kb ? (lt_index / l4) * kb + b : -1;
  }
  return 0;
}

// Host reference of the conversion (the CPU double and the tests use it): batch entries are consecutive in both.
inline void block_scales_to_lt_host(GemmScaleMode mode, const float* ours, float* lt, int64_t rows, int64_t k,
                                    int64_t batch) {
  const int64_t n_ours = our_scale_count(mode, rows, k), n_lt = lt_scale_count(mode, rows, k);
  for (int64_t e = 0; e < batch; ++e)
    for (int64_t i = 0; i < n_lt; ++i) {
      const int64_t j = our_index_of_lt(mode, i, rows, k);
      lt[e * n_lt + i] = j < 0 ? 0.0f : ours[e * n_ours + j];
    }
}

}  // namespace mpt::kernels::cuda
