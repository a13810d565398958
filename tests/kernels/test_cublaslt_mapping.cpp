// tests/kernels/test_cublaslt_mapping.cpp: the row-major -> cuBLASLt column-major mapping, epilogue and block-scale
// layouts against vendor-semantics.md's worked examples, and the cuBLASLt wrapper's host-side checks (no GPU needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/lib/gemm_layout.h"

namespace {

namespace kc = mpt::kernels::cuda;
using kc::GemmShape;
using kc::LtMatrix;
using kc::LtProblem;

// Element (i, j) of op(X) for a cuBLASLt operand (R1.1, R1.2: ORDER_COL, stored matrix, OP_T transposes it).
double op_at(const LtMatrix& x, const std::vector<double>& buf, int64_t batch_i, int64_t i, int64_t j) {
  const int64_t r = x.op_t ? j : i, c = x.op_t ? i : j;
  return buf[batch_i * x.batch_stride + r + c * x.ld];
}

// R1.1/R1.2: a layout describes the stored matrix (OP_T: rows x cols = op's cols x rows) and ld >= rows.
void expect_layout_of_op(const LtMatrix& x, int64_t op_rows, int64_t op_cols, const char* what) {
  EXPECT_EQ(x.op_t ? x.cols : x.rows, op_rows) << what;
  EXPECT_EQ(x.op_t ? x.rows : x.cols, op_cols) << what;
  EXPECT_GE(x.ld, x.rows) << what;
}

// A column-major cuBLASLt evaluator written from the spec (R1.1, R1.4, R5), in float64:
// D = alpha op(A) op(B) + beta C (C in place in dbuf), then the BIAS epilogue adds bias[i] (per row of D).
void lt_eval(const LtProblem& p, const std::vector<double>& abuf, const std::vector<double>& bbuf,
             std::vector<double>& dbuf, double alpha, double beta, const std::vector<double>* bias = nullptr) {
  expect_layout_of_op(p.a, p.m, p.k, "op(A) must be m x k");
  expect_layout_of_op(p.b, p.k, p.n, "op(B) must be k x n");
  expect_layout_of_op(p.d, p.m, p.n, "D must be m x n");
  for (int64_t e = 0; e < p.batch; ++e)
    for (int64_t j = 0; j < p.n; ++j)
      for (int64_t i = 0; i < p.m; ++i) {
        double acc = 0;
        for (int64_t l = 0; l < p.k; ++l) acc += op_at(p.a, abuf, e, i, l) * op_at(p.b, bbuf, e, l, j);
        double& d = dbuf[e * p.d.batch_stride + i + j * p.d.ld];
        d = alpha * acc + beta * d + (bias ? (*bias)[i] : 0.0);
      }
}

// The independent row-major reference: C_e = alpha op(A_e) op(B_e) + beta C_e (+ bias[j] per column).
void row_major_ref(const GemmShape& s, const std::vector<double>& a, const std::vector<double>& b,
                   std::vector<double>& c, double alpha, double beta, const std::vector<double>* bias = nullptr) {
  for (int64_t e = 0; e < s.batch; ++e)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < s.k; ++l) {
          const double av = s.trans_a ? a[e * s.stride_a + l * s.lda + i] : a[e * s.stride_a + i * s.lda + l];
          const double bv = s.trans_b ? b[e * s.stride_b + j * s.ldb + l] : b[e * s.stride_b + l * s.ldb + j];
          acc += av * bv;
        }
        double& cv = c[e * s.stride_c + i * s.ldc + j];
        cv = alpha * acc + beta * cv + (bias ? (*bias)[j] : 0.0);
      }
}

void expect_matrix(const LtMatrix& got, int64_t rows, int64_t cols, int64_t ld, bool op_t, const char* what) {
  EXPECT_EQ(got.rows, rows) << what;
  EXPECT_EQ(got.cols, cols) << what;
  EXPECT_EQ(got.ld, ld) << what;
  EXPECT_EQ(got.op_t, op_t) << what;
}

// E1.1 as a row-major problem: our A = [[1,0,1],[0,1,1]] (2x3, the spec's B buffer), our B = [[1,4],[2,5],[3,6]]
// (3x2, the spec's A buffer). The mapping must produce exactly E1.1's descriptors and Dbuf.
TEST(CublasLtMapping, E1_1_RowMajorProblemIsTheSpecsColumnMajorCall) {
  GemmShape s{.m = 2, .n = 2, .k = 3, .lda = 3, .ldb = 2, .ldc = 2};
  const LtProblem p = kc::to_column_major(s);
  EXPECT_EQ(p.m, 2);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.k, 3);
  expect_matrix(p.a, 2, 3, 2, false, "cuBLASLt A = our B");
  expect_matrix(p.b, 3, 2, 3, false, "cuBLASLt B = our A");
  expect_matrix(p.d, 2, 2, 2, false, "D");
  const std::vector<double> a{1, 0, 1, 0, 1, 1}, b{1, 4, 2, 5, 3, 6};
  std::vector<double> d(4, 1.0), ref(4, 1.0);
  lt_eval(p, b, a, d, 2, 3);
  EXPECT_EQ(d, (std::vector<double>{11, 23, 13, 25}));
  row_major_ref(s, a, b, ref, 2, 3);
  EXPECT_EQ(ref, d);
}

// E1.2: the same B stored transposed ([[1,2,3],[4,5,6]], 2x3, trans_b): cuBLASLt's A is 3x2, ld 3, OP_T.
TEST(CublasLtMapping, E1_2_TransposedOperandBecomesOpT) {
  GemmShape s{.m = 2, .n = 2, .k = 3, .trans_b = true, .lda = 3, .ldb = 3, .ldc = 2};
  const LtProblem p = kc::to_column_major(s);
  expect_matrix(p.a, 3, 2, 3, true, "cuBLASLt A");
  const std::vector<double> a{1, 0, 1, 0, 1, 1}, b{1, 2, 3, 4, 5, 6};
  std::vector<double> d(4, 1.0);
  lt_eval(p, b, a, d, 2, 3);
  EXPECT_EQ(d, (std::vector<double>{11, 23, 13, 25}));
}

// E1.3: X (2x3) times W (3x2) row-major is Dbuf = [4,5,10,11].
TEST(CublasLtMapping, E1_3_RowMajorXW) {
  GemmShape s{.m = 2, .n = 2, .k = 3, .lda = 3, .ldb = 2, .ldc = 2};
  const LtProblem p = kc::to_column_major(s);
  const std::vector<double> x{1, 2, 3, 4, 5, 6}, w{1, 0, 0, 1, 1, 1};
  std::vector<double> d(4, -7.0);
  lt_eval(p, w, x, d, 1, 0);
  EXPECT_EQ(d, (std::vector<double>{4, 5, 10, 11}));
}

// E1.4: m = n = k = 1, batch 2. cuBLASLt's B is our A, so the spec's strideB = 0 is our stride_a = 0.
TEST(CublasLtMapping, E1_4_BatchStridesSwapWithTheOperands) {
  GemmShape s{.m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1, .batch = 2, .stride_a = 1, .stride_b = 1,
              .stride_c = 1};
  const std::vector<double> ours_a{5, 7}, ours_b{2, 3};
  std::vector<double> d{1, 1};
  LtProblem p = kc::to_column_major(s);
  EXPECT_EQ(p.a.batch_stride, 1);
  lt_eval(p, ours_b, ours_a, d, 1, 1);
  EXPECT_EQ(d, (std::vector<double>{11, 22}));
  s.stride_a = 0;
  p = kc::to_column_major(s);
  EXPECT_EQ(p.b.batch_stride, 0);
  d = {1, 1};
  lt_eval(p, ours_b, ours_a, d, 1, 1);
  EXPECT_EQ(d, (std::vector<double>{11, 16}));
}

// Every transpose combination, padded leading dimensions, a batch with a broadcast operand, and a bias: the
// column-major call on the mapped problem equals the row-major reference with bias[j] added per column.
TEST(CublasLtMapping, AllLayoutsMatchTheRowMajorReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> val(-4, 4);
  for (int t = 0; t < 4; ++t) {
    GemmShape s;
    s.m = 5, s.n = 3, s.k = 4, s.trans_a = t & 1, s.trans_b = t & 2;
    s.lda = (s.trans_a ? s.m : s.k) + 2, s.ldb = (s.trans_b ? s.k : s.n) + 1, s.ldc = s.n + 3;
    s.batch = 3;
    s.stride_a = (s.trans_a ? s.k : s.m) * s.lda, s.stride_b = 0, s.stride_c = s.m * s.ldc + 1;
    std::vector<double> a(s.stride_a * s.batch), b((s.trans_b ? s.n : s.k) * s.ldb), c(s.stride_c * s.batch),
        bias(s.n);
    for (auto* v : {&a, &b, &c, &bias})
      for (double& x : *v) x = val(rng);
    std::vector<double> d = c, ref = c;
    lt_eval(kc::to_column_major(s), b, a, d, 0.5, -2, &bias);
    row_major_ref(s, a, b, ref, 0.5, -2, &bias);
    EXPECT_EQ(d, ref) << "trans_a " << s.trans_a << " trans_b " << s.trans_b;
    EXPECT_EQ(kc::epilogue_bias_length(kc::GemmEpilogue::Bias, s), s.n);
  }
}

// A Linear forward y = x W^T (W stored [N, K]) is trans_b: cuBLASLt's A = W with OP_T, B = x with OP_N ("TN").
TEST(CublasLtMapping, LinearForwardIsFp8TN) {
  const GemmShape fwd{.m = 32, .n = 48, .k = 64, .trans_b = true, .lda = 64, .ldb = 64, .ldc = 48};
  EXPECT_TRUE(kc::is_fp8_tn(fwd));
  const LtProblem p = kc::to_column_major(fwd);
  EXPECT_TRUE(p.a.op_t);
  EXPECT_FALSE(p.b.op_t);
  const GemmShape dgrad{.m = 32, .n = 64, .k = 48, .lda = 48, .ldb = 64, .ldc = 64};  // dx = dy W
  EXPECT_FALSE(kc::is_fp8_tn(dgrad));
  EXPECT_FALSE(kc::is_fp8_tn(GemmShape{.m = 8, .n = 8, .k = 8, .trans_a = true, .trans_b = true}));
}

// E5.5 in row-major terms: our BGradA sums op(A) over k (length m) and is cuBLASLt's BGRADB on the swapped call.
TEST(CublasLtMapping, E5_5_BiasGradientEpiloguesSwap) {
  EXPECT_EQ(kc::lt_epilogue_value(kc::GemmEpilogue::BGradA), 512u);
  EXPECT_EQ(kc::lt_epilogue_value(kc::GemmEpilogue::BGradB), 256u);
  EXPECT_EQ(kc::lt_epilogue_value(kc::GemmEpilogue::None), 1u);
  EXPECT_EQ(kc::lt_epilogue_value(kc::GemmEpilogue::GeluAuxBias), 164u);
  EXPECT_EQ(kc::lt_epilogue_value(kc::GemmEpilogue::DGeluBGrad), 208u);
  const GemmShape s{.m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2};
  const LtProblem p = kc::to_column_major(s);
  const std::vector<double> ours_a{1, 2, 3, 4};  // op(A) = [[1,2],[3,4]]
  std::vector<double> bgradb(p.n);                // R5 BGRADB: bgrad[j] = sum_l op(B)[l, j], length n
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t l = 0; l < p.k; ++l) bgradb[j] += op_at(p.b, ours_a, 0, l, j);
  EXPECT_EQ(bgradb, (std::vector<double>{3, 7}));
  EXPECT_EQ(kc::epilogue_bias_length(kc::GemmEpilogue::BGradA, s), 2);
  EXPECT_TRUE(kc::epilogue_writes_bias(kc::GemmEpilogue::DGeluBGrad));
  EXPECT_FALSE(kc::epilogue_writes_bias(kc::GemmEpilogue::GeluAuxBias));
  EXPECT_TRUE(kc::epilogue_uses_aux(kc::GemmEpilogue::DGelu));
}

// R4.3's block-scaled product read through cuBLASLt's layout: D[i,j] = sum_b sA(i,b) sB(j,b) * partial(b), with
// every op(A), op(B) entry 1 so partial(b) is the K block's length.
double block_scaled_entry(kc::GemmScaleMode ma, const std::vector<float>& sa, int64_t rows_a, kc::GemmScaleMode mb,
                          const std::vector<float>& sb, int64_t rows_b, int64_t k, int64_t i, int64_t j) {
  double d = 0;
  for (int64_t b = 0; b < kc::scale_k_blocks(k); ++b) {
    const int64_t ra = ma == kc::GemmScaleMode::Block128x128 ? i / 128 : i;
    const int64_t rb = mb == kc::GemmScaleMode::Block128x128 ? j / 128 : j;
    const double len = std::min<int64_t>(128, k - b * 128);
    d += double(sa[kc::lt_scale_index(ma, ra, b, rows_a, k)]) * sb[kc::lt_scale_index(mb, rb, b, rows_b, k)] * len;
  }
  return d;
}

// E4.1: VEC x VEC, M = N = 16, K = 256. Our 1x128 scales [rows, KB] convert to the spec's M-major sA and sB.
TEST(CublasLtMapping, E4_1_Vec128ScalesAreMMajor) {
  const auto vec = kc::GemmScaleMode::Block1x128;
  std::vector<float> ours_a(16 * 2), ours_b(16 * 2);
  for (int r = 0; r < 16; ++r) {
    ours_a[r * 2] = r == 1 ? 2.0f : 1.0f, ours_a[r * 2 + 1] = 0.5f;
    ours_b[r * 2] = 1.0f, ours_b[r * 2 + 1] = 2.0f;
  }
  ASSERT_EQ(kc::lt_scale_count(vec, 16, 256), 32);
  std::vector<float> sa(32), sb(32);
  kc::block_scales_to_lt_host(vec, ours_a.data(), sa.data(), 16, 256, 1);
  kc::block_scales_to_lt_host(vec, ours_b.data(), sb.data(), 16, 256, 1);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(sa[i], i == 1 ? 2.0f : 1.0f);
    EXPECT_EQ(sa[16 + i], 0.5f);
    EXPECT_EQ(sb[i], 1.0f);
    EXPECT_EQ(sb[16 + i], 2.0f);
  }
  EXPECT_EQ(block_scaled_entry(vec, sa, 16, vec, sb, 16, 256, 0, 3), 256.0);
  EXPECT_EQ(block_scaled_entry(vec, sa, 16, vec, sb, 16, 256, 1, 3), 384.0);
}

// E4.2: BLK A (M = 256, K = 384, L4 = 4) x VEC B (N = 16): our [2, 3] tile scales gain one padding column.
TEST(CublasLtMapping, E4_2_Blk128x128ScalesAreKMajorPadded) {
  const auto blk = kc::GemmScaleMode::Block128x128, vec = kc::GemmScaleMode::Block1x128;
  const std::vector<float> ours_a{1, 2, 4, 8, 16, 32};
  ASSERT_EQ(kc::our_scale_count(blk, 256, 384), 6);
  ASSERT_EQ(kc::lt_scale_count(blk, 256, 384), 8);
  std::vector<float> sa(8, -1.0f);
  kc::block_scales_to_lt_host(blk, ours_a.data(), sa.data(), 256, 384, 1);
  EXPECT_EQ(sa, (std::vector<float>{1, 2, 4, 0, 8, 16, 32, 0}));
  const std::vector<float> sb(kc::lt_scale_count(vec, 16, 384), 1.0f);
  ASSERT_EQ(sb.size(), 48u);
  for (int i : {0, 127})
    EXPECT_EQ(block_scaled_entry(blk, sa, 256, vec, sb, 16, 384, i, 5), 896.0) << "row " << i;
  for (int i : {128, 255})
    EXPECT_EQ(block_scaled_entry(blk, sa, 256, vec, sb, 16, 384, i, 5), 7168.0) << "row " << i;
}

// Batched scales: entry e of our arrays lands in entry e of cuBLASLt's, for ragged rows and K.
TEST(CublasLtMapping, BatchedScaleConversionKeepsEntriesApart) {
  for (auto mode : {kc::GemmScaleMode::Block1x128, kc::GemmScaleMode::Block128x128}) {
    const int64_t rows = 260, k = 300, batch = 3, kb = kc::scale_k_blocks(k);
    const int64_t n_ours = kc::our_scale_count(mode, rows, k), n_lt = kc::lt_scale_count(mode, rows, k);
    std::vector<float> ours(n_ours * batch), lt(n_lt * batch, -1.0f);
    for (size_t i = 0; i < ours.size(); ++i) ours[i] = float(i + 1);
    kc::block_scales_to_lt_host(mode, ours.data(), lt.data(), rows, k, batch);
    const int64_t row_units = mode == kc::GemmScaleMode::Block1x128 ? rows : kc::scale_row_blocks(rows);
    for (int64_t e = 0; e < batch; ++e)
      for (int64_t r = 0; r < row_units; ++r)
        for (int64_t b = 0; b < kb; ++b)
          ASSERT_EQ(lt[e * n_lt + kc::lt_scale_index(mode, r, b, rows, k)], ours[e * n_ours + r * kb + b])
              << "entry " << e << " row " << r << " block " << b;
    if (mode == kc::GemmScaleMode::Block128x128) {
      EXPECT_EQ(lt[n_lt + 3], 0.0f);  // KB = 3 padded to 4: entry 1, tile 0, padding column
    }
  }
}

}  // namespace
