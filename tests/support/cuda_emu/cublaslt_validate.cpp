// tests/support/cuda_emu/cublaslt_validate.cpp: the cuBLASLt double's problem rules (vendor-semantics R1-R5): layouts, type table, FP8, int8 (IMMA) and block-scale requirements, epilogues, scale settings.
#include <string>
#include <tuple>

#include "cublaslt_internal.h"

namespace mpt::cuda_emu {
namespace {

Check unsupported(std::string why) { return Check{Verdict::Unsupported, std::move(why)}; }
Check invalid(std::string why) { return Check{Verdict::Invalid, std::move(why)}; }

std::string type_name(int t) {
  switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_8F_E4M3: return "CUDA_R_8F_E4M3";
    case CUDA_R_8F_E5M2: return "CUDA_R_8F_E5M2";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
    default: return "cudaDataType " + std::to_string(t);
  }
}

bool epi_has(uint32_t e, uint32_t bit) { return (e & bit) != 0; }

Check check_layout(const LayoutState& l, const char* name, bool allow_ld0) {
  const std::string n = name;
  if (l.order != CUBLASLT_ORDER_COL && l.order != CUBLASLT_ORDER_ROW)
    return unsupported(n + ": only ORDER_COL and ORDER_ROW are emulated (the others are Turing/Ampere int8 layouts)");
  if (l.plane_offset != 0) return unsupported(n + ": planar complex layouts are not emulated");
  if (l.batch_mode != CUBLASLT_BATCH_MODE_STRIDED) return unsupported(n + ": pointer-array batching is not emulated");
  if (l.rows > INT32_MAX || l.cols > INT32_MAX) return unsupported(n + ": rows and cols must fit in int32");
  if (dtype_size(l.type) == 0) return unsupported(n + ": type " + type_name(l.type) + " is not emulated");
  const int64_t need = static_cast<int64_t>(l.order == CUBLASLT_ORDER_COL ? l.rows : l.cols);
  if (l.ld < 0 || (l.ld < need && !(allow_ld0 && l.ld == 0)))
    return unsupported(n + ": ld " + std::to_string(l.ld) + " is below " + (l.order == CUBLASLT_ORDER_COL ? "rows" : "cols") +
                       " (" + std::to_string(need) + ")");
  if (l.batch_count < 1) return unsupported(n + ": BATCH_COUNT must be >= 1");
  if (l.batch_stride < 0) return unsupported(n + ": negative STRIDED_BATCH_OFFSET is not emulated");
  return {};
}

// R2.1: the non-FP8 rows of the type table.
Check check_plain_types(const Problem& p) {
  const int comp = p.desc.compute, scale = p.desc.scale_type;
  const cudaDataType_t a = p.a.type, d = p.d.type;
  if (p.a.type != p.b.type) return unsupported("A and B types differ (only FP8 pairs may)");
  if (p.c.type != d) return unsupported("C and D types differ (only FP8 GEMMs allow that)");
  const std::string combo = "compute " + std::to_string(comp) + ", scale " + type_name(scale) + ", A/B " +
                            type_name(a) + ", C/D " + type_name(d);
  if (comp == CUBLAS_COMPUTE_64F || comp == CUBLAS_COMPUTE_64F_PEDANTIC)
    return unsupported(combo + ": the FP64 rows of the type table are not emulated");
  if (comp == CUBLAS_COMPUTE_32I || comp == CUBLAS_COMPUTE_32I_PEDANTIC) {
    if (scale == CUDA_R_32I && a == CUDA_R_8I && d == CUDA_R_32I) return {};
    if (scale == CUDA_R_32F && a == CUDA_R_8I && d == CUDA_R_8I)
      return unsupported(combo + ": the 32I / 32F / 8I / 8I row of the type table is not emulated");
    return unsupported(combo + ": COMPUTE_32I takes scale CUDA_R_32I, A/B CUDA_R_8I and C/D CUDA_R_32I (R2.1)");
  }
  if (scale == CUDA_R_32I || d == CUDA_R_32I || d == CUDA_R_8I)
    return unsupported(combo + ": integer scale and C/D types belong to COMPUTE_32I (R2.1)");
  if (a == CUDA_R_8I) {
    if ((comp == CUBLAS_COMPUTE_32F || comp == CUBLAS_COMPUTE_32F_PEDANTIC) && scale == CUDA_R_32F && d == CUDA_R_32F)
      return unsupported(combo + ": the 32F / 32F / 8I / 32F row of the type table is not emulated");
    return unsupported(combo + ": 8I inputs take COMPUTE_32I, scale CUDA_R_32I and C/D CUDA_R_32I (R2.1)");
  }
  if (comp == CUBLAS_COMPUTE_16F || comp == CUBLAS_COMPUTE_16F_PEDANTIC) {
    if (scale == CUDA_R_16F && a == CUDA_R_16F && d == CUDA_R_16F) return {};
    return unsupported(combo + ": COMPUTE_16F takes a 16F scale and 16F matrices only");
  }
  if (comp == CUBLAS_COMPUTE_32F_FAST_16F || comp == CUBLAS_COMPUTE_32F_FAST_16BF ||
      comp == CUBLAS_COMPUTE_32F_FAST_TF32) {
    if (scale == CUDA_R_32F && a == CUDA_R_32F && d == CUDA_R_32F) return {};
    return unsupported(combo + ": the FAST_16F/16BF/TF32 compute types take F32 matrices only");
  }
  if (comp == CUBLAS_COMPUTE_32F || comp == CUBLAS_COMPUTE_32F_PEDANTIC) {
    if (scale != CUDA_R_32F) return unsupported(combo + ": COMPUTE_32F needs scale type CUDA_R_32F");
    if (a == CUDA_R_32F && d == CUDA_R_32F) return {};
    if ((a == CUDA_R_16F || a == CUDA_R_16BF) && (d == a || d == CUDA_R_32F)) return {};
    return unsupported(combo + ": not in the type table (R2.1)");
  }
  return unsupported(combo + ": unknown compute type");
}

// R2.2 (c, d) and R2.3: the FP8 rows.
Check check_fp8_types(const Problem& p) {
  const cudaDataType_t a = p.a.type, b = p.b.type, c = p.c.type, d = p.d.type;
  if (!is_fp8_type(a) || !is_fp8_type(b)) return unsupported("FP8 and non-FP8 operands cannot be mixed");
  if (a == CUDA_R_8F_E5M2 && b == CUDA_R_8F_E5M2) return unsupported("E5M2 x E5M2 is not supported (R2.3)");
  if (p.desc.compute != CUBLAS_COMPUTE_32F) return unsupported("FP8 needs compute type CUBLAS_COMPUTE_32F exactly");
  if (p.desc.scale_type != CUDA_R_32F) return unsupported("FP8 needs scale type CUDA_R_32F");
  const bool mixed = a != b;
  const bool fp8_d = d == CUDA_R_8F_E4M3 || (mixed && d == CUDA_R_8F_E5M2);
  const bool ok = (c == CUDA_R_16BF && (d == CUDA_R_16BF || fp8_d)) || (c == CUDA_R_16F && (d == CUDA_R_16F || fp8_d)) ||
                  (c == CUDA_R_32F && d == CUDA_R_32F);
  if (!ok) return unsupported("FP8 GEMM with C " + type_name(c) + " and D " + type_name(d) + " is not in the table (R2.3)");
  return {};
}

// R2.2 (a, b) and the observed M rule (switch).
Check check_fp8_shape(const Problem& p, const Alignments& al, bool m16) {
  if (p.cc < 89) return unsupported("FP8 needs compute capability 8.9 or later (device is sm_" + std::to_string(p.cc) + ")");
  const bool tn_only = p.cc == 89 || p.cc == 90 || p.cc / 10 == 12;
  if (tn_only && !(p.ta && !p.tb))
    return unsupported("FP8 needs the TN layout (TRANSA=T, TRANSB=N) on sm_" + std::to_string(p.cc));
  const int64_t as = dtype_size(p.a.type), bs = dtype_size(p.b.type), cs = dtype_size(p.c.type);
  if ((static_cast<int64_t>(p.a.rows) * as) % 16 || (static_cast<int64_t>(p.b.rows) * bs) % 16 || (p.m * cs) % 16)
    return unsupported("FP8 needs the stored A and B rows and C's m to span multiples of 16 bytes (R2.2a)");
  if ((p.a.ld * as) % 16 || (p.b.ld * bs) % 16 || (p.c.ld * cs) % 16)
    return unsupported("FP8 needs lda, ldb and ldc in bytes to be multiples of 16 (R2.2a)");
  if (al.abcd[0] < 16 || al.abcd[1] < 16 || al.abcd[2] < 16)
    return unsupported("FP8 needs 16-byte aligned A, B and C (R2.2a)");
  if (m16 && p.m % 16 != 0) return unsupported("FP8: M must be divisible by 16 (observed, R2.4), m = " + std::to_string(p.m));
  return {};
}

// The IMMA rules with the regular data ordering (cuBLAS docs, cublasLtMatmul, "To use IMMA kernels"): TN, every layout
// ORDER_COL, m and k multiples of 4, leading dimensions multiples of 4, 4-byte aligned pointers; no epilogue and no
// scale, amax or aux settings.
Check check_int8_shape(const Problem& p, const Alignments& al) {
  const DescState& d = p.desc;
  if (d.trans_a != CUBLAS_OP_T || d.trans_b != CUBLAS_OP_N)
    return unsupported("int8 GEMMs need the TN format (TRANSA=CUBLAS_OP_T, TRANSB=CUBLAS_OP_N)");
  for (const LayoutState* l : {&p.a, &p.b, &p.c, &p.d})
    if (l->order != CUBLASLT_ORDER_COL)
      return unsupported("int8 GEMMs are emulated with ORDER_COL layouts only (the COL32 / COL4_4R2_8C / "
                         "COL32_2R_4R4 IMMA orders are Turing/Ampere-only and not emulated)");
  if (p.m % 4 != 0 || p.k % 4 != 0)
    return unsupported("int8 GEMMs need m and k multiples of 4 (m = " + std::to_string(p.m) + ", k = " +
                       std::to_string(p.k) + ")");
  if (p.a.ld % 4 != 0 || p.b.ld % 4 != 0 || p.c.ld % 4 != 0 || p.d.ld % 4 != 0)
    return unsupported("int8 GEMMs need lda, ldb, ldc and ldd multiples of 4 (" + std::to_string(p.a.ld) + ", " +
                       std::to_string(p.b.ld) + ", " + std::to_string(p.c.ld) + ", " + std::to_string(p.d.ld) + ")");
  for (int i = 0; i < 4; ++i)
    if (al.abcd[i] < 4)
      return unsupported(std::string("int8 GEMMs need 4-byte aligned A, B, C and D; ") + "ABCD"[i] + " is " +
                         std::to_string(al.abcd[i]) + "-byte aligned (with its batch stride)");
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return unsupported("int8 GEMMs take EPILOGUE_DEFAULT only (epilogue " + std::to_string(d.epilogue) + ")");
  if (d.scale_a || d.scale_b || d.scale_c || d.scale_d || d.amax_d || d.aux_scale || d.aux_amax || d.d_out_scale ||
      d.scale_mode_a || d.scale_mode_b || d.scale_mode_c || d.scale_mode_d || d.scale_mode_aux || d.d_out_scale_mode)
    return unsupported("int8 GEMMs take no scale or amax pointers and no scale modes");
  return {};
}

bool is_block_mode(int32_t m) {
  return m == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F || m == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
         m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

// R4.1-R4.3.
Check check_scale_modes(const Problem& p) {
  const DescState& d = p.desc;
  if (d.scale_mode_c != 0 || d.scale_mode_d != 0 || d.scale_mode_aux != 0 || d.d_out_scale_mode != 0 ||
      d.d_out_scale != nullptr)
    return unsupported("C, D, aux and D-out scale modes other than SCALAR_32F are not emulated");
  const int32_t ma = d.scale_mode_a, mb = d.scale_mode_b;
  if (ma == 0 && mb == 0) return {};
  if (!p.fp8) return unsupported("scale modes apply to FP8 operands only");
  if (ma == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 || ma == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ||
      mb == CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 || mb == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0)
    return unsupported("the Blackwell VEC16_UE4M3 / VEC32_UE8M0 modes are not emulated");
  if (!is_block_mode(ma) || !is_block_mode(mb))
    return unsupported("scale modes " + std::to_string(ma) + " x " + std::to_string(mb) + ": both operands need a block mode");
  if (p.cc != 90) return unsupported("OUTER_VEC, VEC128 and BLK128x128 scaling need sm_90 (device is sm_" + std::to_string(p.cc) + ")");
  const bool outer = ma == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  if (outer != (mb == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F))
    return unsupported("OUTER_VEC scaling needs OUTER_VEC on both operands");
  if (ma == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F && mb == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)
    return unsupported("BLK128x128 x BLK128x128 is not supported (R4.3)");
  if (is_fp8_type(p.d.type)) return unsupported("an FP8 D is not allowed with OUTER_VEC, VEC128 or BLK128x128 (R2.3)");
  if (!outer && (p.m % 4 != 0 || p.n % 4 != 0)) return unsupported("VEC128/BLK128x128 need M and N multiples of 4 (R4.3)");
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return unsupported("block scaling with epilogues other than DEFAULT and BIAS is not emulated");
  return {};
}

Check check_epilogue(Problem& p) {
  const uint32_t e = p.desc.epilogue;
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS: case CUBLASLT_EPILOGUE_GELU: case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: case CUBLASLT_EPILOGUE_BGRADA: case CUBLASLT_EPILOGUE_BGRADB: break;
    case CUBLASLT_EPILOGUE_RELU_AUX: case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DRELU:
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return unsupported("the ReLU bit-mask epilogues are not emulated");
    default: return unsupported("unknown epilogue " + std::to_string(e));
  }
  const bool activation = epi_has(e, 2) || epi_has(e, 32) || epi_has(e, 64);
  if (p.d.order == CUBLASLT_ORDER_ROW && activation && (epi_has(e, 4) || epi_has(e, 16)))
    return unsupported("with D in ORDER_ROW, RELU/GELU/DGELU combined with BIAS or BGRAD is not supported (R1.2)");
  if (e != CUBLASLT_EPILOGUE_DEFAULT && (p.a.order != CUBLASLT_ORDER_COL || p.b.order != CUBLASLT_ORDER_COL) &&
      (e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB))
    return unsupported("BGRADA/BGRADB with ORDER_ROW operands are not emulated");
  const cudaDataType_t default_bias = p.fp8 ? (p.c.type == CUDA_R_32F ? CUDA_R_16BF : p.c.type) : p.d.type;
  p.bias_type = p.desc.bias_type == -1 ? default_bias : static_cast<cudaDataType_t>(p.desc.bias_type);
  if ((epi_has(e, 4) || epi_has(e, 16) || epi_has(e, 256) || epi_has(e, 512)) && p.bias_type != default_bias)
    return unsupported("bias type " + type_name(p.bias_type) + ": this combination takes " + type_name(default_bias) +
                       " (R2.1, R2.3)");
  p.aux_type = p.desc.aux_type == -1 ? p.d.type : static_cast<cudaDataType_t>(p.desc.aux_type);
  if (epi_has(e, 128)) {
    if (dtype_size(p.aux_type) == 0 || p.aux_type == CUDA_R_8I || p.aux_type == CUDA_R_32I)
      return unsupported("aux type " + type_name(p.aux_type) + " is not emulated");
    if (p.desc.aux_ld % 8 != 0 || p.desc.aux_ld < p.m)
      return unsupported("EPILOGUE_AUX_LD " + std::to_string(p.desc.aux_ld) + " must be a multiple of 8 and >= m (" +
                         std::to_string(p.m) + ")");
    if (p.desc.aux_batch_stride % 8 != 0 || p.desc.aux_batch_stride < 0)
      return unsupported("EPILOGUE_AUX_BATCH_STRIDE must be a non-negative multiple of 8");
  }
  return {};
}

// R2.4 / R3.2 / R3.3: scale, amax and aux-type settings (INVALID_VALUE at run time, or refused by the heuristic).
Check check_scale_settings(const Problem& p) {
  const DescState& d = p.desc;
  if (!p.fp8) {
    if (d.scale_a || d.scale_b || d.scale_c || d.scale_d || d.amax_d || d.aux_scale || d.aux_amax)
      return invalid("scale and amax pointers apply to FP8 GEMMs only (one is set on a " + type_name(p.a.type) + " GEMM)");
  } else {
    if (d.scale_d && !is_fp8_type(p.d.type))
      return invalid("D_SCALE_POINTER is set but D is " + type_name(p.d.type) + ": scales apply to FP8 tensors only");
    if (d.aux_scale && !is_fp8_type(p.aux_type)) return invalid("EPILOGUE_AUX_SCALE_POINTER needs an FP8 aux type");
    if (d.aux_amax && !epi_has(d.epilogue, 128)) return invalid("EPILOGUE_AUX_AMAX_POINTER needs an aux epilogue");
  }
  if (epi_has(d.epilogue, 128) && p.aux_type != p.d.type) {
    const bool allowed = p.d.type == CUDA_R_8F_E4M3 && p.a.type == CUDA_R_8F_E4M3 && p.b.type == CUDA_R_8F_E4M3 &&
                         (p.c.type == CUDA_R_16F || p.c.type == CUDA_R_16BF) && p.aux_type == CUDA_R_16F &&
                         (d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    if (!allowed)
      return invalid("EPILOGUE_AUX_DATA_TYPE " + type_name(p.aux_type) + " differs from D's " + type_name(p.d.type) +
                     " outside the FP8 GELU_AUX exception (R3.3)");
  }
  return {};
}

}  // namespace

bool is_fp8_type(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

int64_t dtype_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: case CUDA_R_8I: return 1;
    case CUDA_R_32I: return 4;
    default: return 0;
  }
}

Check validate(Problem& p, const Alignments& al) {
  const CublasLtSwitches sw = cublaslt_switches();
  const DescState& d = p.desc;
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST && d.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return unsupported("pointer mode " + std::to_string(d.pointer_mode) + " is not emulated (HOST and DEVICE are)");
  if (d.trans_c != CUBLAS_OP_N) return unsupported("TRANSC must be CUBLAS_OP_N");
  for (int32_t t : {d.trans_a, d.trans_b})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C) return unsupported("unknown cublasOperation_t " + std::to_string(t));
  if (d.emulation_desc != nullptr) return unsupported("EMULATION_DESCRIPTOR is not emulated");
  for (auto [l, name, ld0] : {std::tuple{&p.a, "Adesc", false}, {&p.b, "Bdesc", false}, {&p.c, "Cdesc", true},
                              {&p.d, "Ddesc", false}})
    if (Check c = check_layout(*l, name, ld0); c.verdict != Verdict::Ok) return c;
  p.ta = d.trans_a != CUBLAS_OP_N;
  p.tb = d.trans_b != CUBLAS_OP_N;
  p.m = static_cast<int64_t>(p.d.rows);
  p.n = static_cast<int64_t>(p.d.cols);
  const auto a_rows = static_cast<int64_t>(p.ta ? p.a.cols : p.a.rows), a_cols = static_cast<int64_t>(p.ta ? p.a.rows : p.a.cols);
  const auto b_rows = static_cast<int64_t>(p.tb ? p.b.cols : p.b.rows), b_cols = static_cast<int64_t>(p.tb ? p.b.rows : p.b.cols);
  p.k = a_cols;
  const auto dims = [](int64_t r, int64_t c) { return std::to_string(r) + "x" + std::to_string(c); };
  if (a_rows != p.m || b_rows != p.k || b_cols != p.n)
    return unsupported("op(A) is " + dims(a_rows, a_cols) + ", op(B) " + dims(b_rows, b_cols) + ", D " + dims(p.m, p.n) +
                       ": need op(A) m x k, op(B) k x n (R1.1)");
  if (p.c.rows != p.d.rows || p.c.cols != p.d.cols || p.c.order != p.d.order)
    return unsupported("C needs D's rows, cols and order (R1.3)");
  if (p.m == 0 || p.n == 0 || p.k == 0) return unsupported("empty problems (m, n or k = 0) are not emulated");
  p.batch = p.d.batch_count;
  if (sw.equal_batch_counts && (p.a.batch_count != p.batch || p.b.batch_count != p.batch || p.c.batch_count != p.batch))
    return unsupported("every layout needs D's BATCH_COUNT (" + std::to_string(p.batch) + ") (R1.4)");
  p.fp8 = is_fp8_type(p.a.type) || is_fp8_type(p.b.type);
  if (Check c = p.fp8 ? check_fp8_types(p) : check_plain_types(p); c.verdict != Verdict::Ok) return c;
  const cudaDataType_t types[4] = {p.a.type, p.b.type, p.c.type, p.d.type};
  for (int i = 0; i < 4; ++i)
    if (al.abcd[i] < dtype_size(types[i]))
      return unsupported(std::string("the alignment of ") + "ABCD"[i] + " (" + std::to_string(al.abcd[i]) +
                         " bytes) is below its element size");
  p.int8 = p.a.type == CUDA_R_8I;  // the only 8I row that passed the type table
  if (p.fp8)
    if (Check c = check_fp8_shape(p, al, sw.fp8_m_multiple_of_16); c.verdict != Verdict::Ok) return c;
  if (p.int8)
    if (Check c = check_int8_shape(p, al); c.verdict != Verdict::Ok) return c;
  if (Check c = check_epilogue(p); c.verdict != Verdict::Ok) return c;
  if (Check c = check_scale_modes(p); c.verdict != Verdict::Ok) return c;
  if (sw.scale_errors_in_heuristic)
    if (Check c = check_scale_settings(p); c.verdict != Verdict::Ok) return unsupported(c.why);
  return {};
}

Check validate_at_run(const Problem& p) {
  if (!cublaslt_switches().scale_errors_in_heuristic)
    if (Check c = check_scale_settings(p); c.verdict != Verdict::Ok) return c;
  const uint32_t e = p.desc.epilogue;
  if ((epi_has(e, 4) || epi_has(e, 16) || epi_has(e, 256) || epi_has(e, 512)) && p.desc.bias == nullptr)
    return invalid("the epilogue needs BIAS_POINTER");
  if (epi_has(e, 128) && p.desc.aux == nullptr) return invalid("the epilogue needs EPILOGUE_AUX_POINTER");
  if (is_block_mode(p.desc.scale_mode_a)) {
    const auto a = reinterpret_cast<uintptr_t>(p.desc.scale_a), b = reinterpret_cast<uintptr_t>(p.desc.scale_b);
    if (a == 0 || b == 0) return invalid("block scaling needs A_SCALE_POINTER and B_SCALE_POINTER");
    if (a % 16 != 0 || b % 16 != 0) return invalid("block scale arrays must be 16-byte aligned (R4.3)");
  }
  return {};
}

}  // namespace mpt::cuda_emu
