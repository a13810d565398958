// kernels/cuda/lib/attention_cudnn_graph.cpp: the cuDNN composite SDPA graphs for causal attention, with or without
// key padding, as cudnn-frontend emits them, built with the backend C API; descriptor ownership and errors.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cuda/lib/attention_cudnn.h"
#include "kernels/cuda/lib/attention_cudnn_detail.h"

namespace mpt::kernels::cuda {

namespace cudnn_detail {

[[noreturn]] void fail(cudnnStatus_t status, const std::string& call) {
  char detail[1024] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string what = call + " failed: " + cudnnGetErrorString(status) + " (" + std::to_string(int(status)) + ")";
  if (detail[0] != '\0') what += std::string(": ") + detail;
  throw CudnnError(status, what);
}

const char* type_name(cudnnBackendDescriptorType_t type) {
  switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return "TENSOR";
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: return "POINTWISE";
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return "OPERATION_POINTWISE";
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR: return "MATMUL";
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return "OPERATION_MATMUL";
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: return "REDUCTION";
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return "OPERATION_REDUCTION";
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return "OPERATION_RESHAPE";
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return "OPERATIONGRAPH";
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return "ENGINEHEUR";
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return "ENGINECFG";
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return "EXECUTION_PLAN";
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return "VARIANT_PACK";
    case CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR: return "DEVICEPROP";
    default: return "descriptor";
  }
}

// "cudnnBackendSetAttribute(TENSOR 'K^T', CUDNN_ATTR_TENSOR_STRIDES)".
void check(cudnnStatus_t status, const char* call, const CudnnDescriptor& d, const char* attr) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  fail(status, std::string(call) + "(" + type_name(d.type()) + " '" + d.name() + "'" +
                   (attr ? std::string(", ") + attr : std::string()) + ")");
}

}  // namespace cudnn_detail

namespace {

using namespace cudnn_detail;

// A GEMM's M, N, K taken per sample from int32 (B,1,1,1) tensors (cudnn-frontend's set_{m,n,k}_override); null:
// the operands' extent.
struct GemmExtents {
  Desc m = nullptr, n = nullptr, k = nullptr;
};

// Appends tensors and operations to a graph; every descriptor is finalized as it is made.
class GraphBuilder {
 public:
  explicit GraphBuilder(CudnnAttentionGraph& g) : g_(g) {}

  Desc tensor(const char* name, int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides,
              bool is_virtual = false, bool by_value = false) {
    const CudnnDescriptor& t = add(CUDNN_BACKEND_TENSOR_DESCRIPTOR, name);
    const int64_t alignment = 16;
    MPT_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    MPT_CUDNN_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    MPT_CUDNN_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    MPT_CUDNN_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    MPT_CUDNN_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    MPT_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) MPT_CUDNN_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(t);
    return t.get();
  }
  Desc virt(const char* name, cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return tensor(name, next_virtual_++, type, dims, strides, true);
  }
  // An f32 scalar passed by value (the variant pack points at a host float).
  Desc scalar(const char* name, int64_t uid) {
    return tensor(name, uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  void matmul(const char* name, Desc a, Desc b, Desc c, const GemmExtents& extents = {}) {
    const CudnnDescriptor& m = add(CUDNN_BACKEND_MATMUL_DESCRIPTOR, name);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    MPT_CUDNN_SET(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    finalize(m);
    const Desc md = m.get();
    const CudnnDescriptor& op = add(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &md);
    if (extents.m)
      MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &extents.m);
    if (extents.n)
      MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &extents.n);
    if (extents.k)
      MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &extents.k);
    push_op(op);
  }

  // y = mode(x, b, t): b is the second operand (null for unary modes), t the BINARY_SELECT condition. `axis` is
  // GEN_INDEX's dimension.
  void pointwise(const char* name, cudnnPointwiseMode_t mode, cudnnDataType_t math, Desc x, Desc b, Desc t, Desc y,
                 int64_t axis = -1) {
    const CudnnDescriptor& pw = add(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name);
    MPT_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    MPT_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (axis >= 0) MPT_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw);
    const Desc pwd = pw.get();
    const CudnnDescriptor& op = add(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    push_op(op);
  }

  // y = reduce(x) over the dimensions where y has extent 1.
  void reduction(const char* name, cudnnReduceTensorOp_t reduce, Desc x, Desc y) {
    const CudnnDescriptor& r = add(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    MPT_CUDNN_SET(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
    MPT_CUDNN_SET(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    finalize(r);
    const Desc rd = r.get();
    const CudnnDescriptor& op = add(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    push_op(op);
  }

  // y views x's elements with other dimensions/strides (here: a transpose of the last two dimensions).
  void reshape(const char* name, Desc x, Desc y) {
    const CudnnDescriptor& op = add(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    MPT_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    push_op(op);
  }

  void finish(const CudnnTarget& target) {
    CudnnDescriptor& graph = g_.graph = CudnnDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "causal attention");
    MPT_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()),
                  ops_.data());
    if (target.handle) MPT_CUDNN_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
    finalize(graph);
    g_.op_count = int(ops_.size());
  }

 private:
  const CudnnDescriptor& add(cudnnBackendDescriptorType_t type, const char* name) {
    g_.parts.emplace_back(type, name);
    return g_.parts.back();
  }
  void push_op(const CudnnDescriptor& op) {
    finalize(op);
    ops_.push_back(op.get());
  }

  CudnnAttentionGraph& g_;
  std::vector<Desc> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

// The layouts of one problem (dims, then strides). K and V enter the score GEMMs transposed, as the views
// K^T, V^T (B,H_kv,D,T); P^T and dS^T are the (B,H,T,T) scores read transposed.
struct Layouts {
  Dims bhtd, bhtt, bht1, b111, kv_td, kv_dt;  // kv_*: K, V (dK, dV) and K^T, V^T, with H_kv heads
  Dims s_bhtd, s_bhtt, s_bhtt_t, s_bht1, s_b111;
  Dims s_q, s_kv, s_kv_t, s_out;  // the stored Q (dQ), K, V (dK, dV), K^T, V^T, and O, dO
  cudnnDataType_t io;
  bool grouped;  // H_kv < H
};

// A stored (B, heads, T, D) tensor's strides, and those of its (B, heads, D, T) transposed view.
Dims stored_strides(const CudnnAttentionProblem& p, int64_t heads, bool transposed) {
  const int64_t t = p.t, d = p.d;
  const int64_t packed_row = (p.h + 2 * p.kv_heads()) * d;  // q's, k's and v's heads of one position
  const int64_t row = p.packed ? packed_row : p.token_major ? heads * d : d;  // between positions
  const int64_t head = p.packed || p.token_major ? d : t * d;
  const int64_t batch = p.packed ? t * packed_row : t * heads * d;
  return transposed ? Dims{batch, head, 1, row} : Dims{batch, head, row, 1};
}

Layouts layouts_of(const CudnnAttentionProblem& p) {
  const int64_t b = p.b, h = p.h, t = p.t, d = p.d, hk = p.kv_heads();
  return {.bhtd = {b, h, t, d},
          .bhtt = {b, h, t, t},
          .bht1 = {b, h, t, 1},
          .b111 = {b, 1, 1, 1},
          .kv_td = {b, hk, t, d},
          .kv_dt = {b, hk, d, t},
          .s_bhtd = {h * t * d, t * d, d, 1},
          .s_bhtt = {h * t * t, t * t, t, 1},
          .s_bhtt_t = {h * t * t, t * t, 1, t},
          .s_bht1 = {h * t, t, 1, 1},
          .s_b111 = {1, 1, 1, 1},
          .s_q = stored_strides(p, h, false),
          .s_kv = stored_strides(p, hk, false),
          .s_kv_t = stored_strides(p, hk, true),
          .s_out = p.packed || p.token_major ? Dims{t * h * d, d, h * d, 1} : Dims{h * t * d, t * d, d, 1},
          .io = p.bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF,
          .grouped = hk != h};
}

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// A padded graph's tensors: the int32 (B,1,1,1) lengths and the padding mask's own by-value scalar (cudnn-frontend
// makes one per mask; ours holds the causal mask's value). Null members in an unpadded graph.
struct Padding {
  Desc seq_len_q = nullptr, seq_len_kv = nullptr, mask_value = nullptr;
  explicit operator bool() const { return seq_len_q != nullptr; }
};

Padding padding_tensors(GraphBuilder& gb, const Layouts& l, const CudnnAttentionProblem& p) {
  if (!p.padded) return {};
  return {gb.tensor("seq_len_q", kSeqLenQ, CUDNN_DATA_INT32, l.b111, l.s_b111),
          gb.tensor("seq_len_kv", kSeqLenKv, CUDNN_DATA_INT32, l.b111, l.s_b111),
          gb.scalar("padding mask value", kPaddingMaskValue)};
}

// The GEMM extents a padded graph takes from the lengths (null members: the operands' extents; all null unpadded).
GemmExtents extents(const Padding& pad, Desc m, Desc n, Desc k) {
  if (!pad) return {};
  return {m, n, k};
}

// Score (i, j) of sample b kept when i < seq_len_q[b] and j < seq_len_kv[b], else the mask value: GEN_INDEX on the
// row and column axes, CMP_LT against each length, LOGICAL_AND, BINARY_SELECT; 6 operations, as cudnn-frontend's
// attn::score_modifiers::padding_mask emits them (include/cudnn_frontend/utils/attn_score_modifiers.h, v1.23.0).
Desc padding_masked(GraphBuilder& gb, const Layouts& l, Desc scores, const Padding& pad, const CudnnGraphOptions& opt) {
  const cudnnPointwiseMode_t below = opt.padding_compare_ge ? CUDNN_POINTWISE_CMP_GE : CUDNN_POINTWISE_CMP_LT;
  const Desc row = gb.virt("padding row index", CUDNN_DATA_INT32, l.bhtt, l.s_bhtt);
  gb.pointwise("padding row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scores, nullptr, nullptr, row, 2);
  const Desc col = gb.virt("padding column index", CUDNN_DATA_INT32, l.bhtt, l.s_bhtt);
  gb.pointwise("padding column index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scores, nullptr, nullptr, col, 3);
  const Desc row_in = gb.virt("row < seq_len_q", CUDNN_DATA_BOOLEAN, l.bhtt, l.s_bhtt);
  gb.pointwise("row < seq_len_q", below, CUDNN_DATA_BOOLEAN, row, pad.seq_len_q, nullptr, row_in);
  const Desc col_in = gb.virt("column < seq_len_kv", CUDNN_DATA_BOOLEAN, l.bhtt, l.s_bhtt);
  gb.pointwise("column < seq_len_kv", below, CUDNN_DATA_BOOLEAN, col, pad.seq_len_kv, nullptr, col_in);
  const Desc keep = gb.virt("inside both lengths", CUDNN_DATA_BOOLEAN, l.bhtt, l.s_bhtt);
  gb.pointwise("inside both lengths", CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, row_in, col_in, nullptr, keep);
  const Desc masked = gb.virt("padded S", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("padding mask", CUDNN_POINTWISE_BINARY_SELECT, kF32, scores, pad.mask_value, keep, masked);
  return masked;
}

// Score (i, j) kept when i >= j, else the mask value: GEN_INDEX on the row and column axes, CMP_GE, BINARY_SELECT,
// the pattern cuDNN's engine recognises as causal (cudnn-frontend's top-left diagonal band with right bound 0).
Desc causal_masked(GraphBuilder& gb, const Layouts& l, Desc scores, Desc mask_value) {
  const Desc row = gb.virt("row index", CUDNN_DATA_INT32, l.bhtt, l.s_bhtt);
  gb.pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scores, nullptr, nullptr, row, 2);
  const Desc col = gb.virt("column index", CUDNN_DATA_INT32, l.bhtt, l.s_bhtt);
  gb.pointwise("column index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, scores, nullptr, nullptr, col, 3);
  const Desc keep = gb.virt("row >= column", CUDNN_DATA_BOOLEAN, l.bhtt, l.s_bhtt);
  gb.pointwise("row >= column", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep);
  const Desc masked = gb.virt("causal S", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("causal mask", CUDNN_POINTWISE_BINARY_SELECT, kF32, scores, mask_value, keep, masked);
  return masked;
}

// scale * Q K^T, then (padded) the padding mask, then the causal mask: cudnn-frontend's order (bmm1, attn_scale,
// padding_mask, diagonal band). Padded, the GEMM's M and N come from seq_len_q and seq_len_kv.
Desc scaled_causal_scores(GraphBuilder& gb, const Layouts& l, Desc q, Desc kt, Desc scale, Desc mask_value,
                          const Padding& pad, const CudnnGraphOptions& opt) {
  const Desc s = gb.virt("S", kF32, l.bhtt, l.s_bhtt);
  gb.matmul("S = Q K^T", q, kt, s, extents(pad, pad.seq_len_q, pad.seq_len_kv, nullptr));
  const Desc scaled = gb.virt("scale * S", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("scale * S", CUDNN_POINTWISE_MUL, kF32, s, scale, nullptr, scaled);
  return causal_masked(gb, l, pad ? padding_masked(gb, l, scaled, pad, opt) : scaled, mask_value);
}

// O = softmax(causal(scale Q K^T)) V and Stats = max + log(sum exp): 14 operations, 20 padded.
void build_forward(GraphBuilder& gb, const Layouts& l, const CudnnAttentionProblem& prob,
                   const CudnnGraphOptions& opt) {
  const Desc q = gb.tensor("Q", kQ, l.io, l.bhtd, l.s_q);
  const Desc kt = gb.tensor("K^T", kK, l.io, l.kv_dt, l.s_kv_t);
  const Desc v = gb.tensor("V", kV, l.io, l.kv_td, l.s_kv);
  const Desc o = gb.tensor("O", kO, l.io, l.bhtd, l.s_out);
  const Desc stats = gb.tensor("Stats", kStats, kF32, l.bht1, l.s_bht1);
  const Desc scale = gb.scalar("scale", kScale);
  const Desc mask_value = gb.scalar("mask value", kMaskValue);
  const Padding pad = padding_tensors(gb, l, prob);

  const Desc s = scaled_causal_scores(gb, l, q, kt, scale, mask_value, pad, opt);
  const Desc max = gb.virt("row max", kF32, l.bht1, l.s_bht1);
  gb.reduction("row max", CUDNN_REDUCE_TENSOR_MAX, s, max);
  const Desc shifted = gb.virt("S - max", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("S - max", CUDNN_POINTWISE_SUB, kF32, s, max, nullptr, shifted);
  const Desc e = gb.virt("exp(S - max)", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("exp", CUDNN_POINTWISE_EXP, kF32, shifted, nullptr, nullptr, e);
  const Desc sum = gb.virt("row sum", kF32, l.bht1, l.s_bht1);
  gb.reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const Desc log_sum = gb.virt("log(sum)", kF32, l.bht1, l.s_bht1);
  gb.pointwise("log", CUDNN_POINTWISE_LOG, kF32, sum, nullptr, nullptr, log_sum);
  gb.pointwise("Stats = max + log(sum)", CUDNN_POINTWISE_ADD, kF32, max, log_sum, nullptr, stats);
  // P in the I/O dtype: cuDNN requires the second GEMM's A operand in it (an f32 P finds no engine).
  const Desc p = gb.virt("P", opt.probs_f32 ? kF32 : l.io, l.bhtt, l.s_bhtt);
  gb.pointwise("P = e / sum", CUDNN_POINTWISE_DIV, kF32, e, sum, nullptr, p);
  gb.matmul("O = P V", p, v, o, extents(pad, pad.seq_len_q, nullptr, pad.seq_len_kv));
}

// dQ, dK, dV from Q, K, V, O, dO and Stats, recomputing P = exp(S - Stats): 22 operations, 28 padded, 2 more with
// grouped-query attention. softmax_sum (rowsum(dO * O)) and dQ_accum (f32 dQ, accumulated by the engine) are
// caller-provided dense f32 buffers. Padded, every GEMM takes its extents over queries from seq_len_q and over keys
// from seq_len_kv, as cudnn-frontend sets them. Grouped, dV and dK are each query head's (virtual, dense, in the I/O
// dtype) summed over its group by a reduction, cudnn-frontend's "dV_fullhead"/"dK_fullhead" (v1.23.0).
void build_backward(GraphBuilder& gb, const Layouts& l, const CudnnAttentionProblem& prob,
                    const CudnnGraphOptions& opt) {
  const cudnnDataType_t low = l.io;
  const Desc q = gb.tensor("Q", kQ, l.io, l.bhtd, l.s_q);
  const Desc kt = gb.tensor("K^T", kK, l.io, l.kv_dt, l.s_kv_t);
  const Desc vt = gb.tensor("V^T", kV, l.io, l.kv_dt, l.s_kv_t);
  const Desc o = gb.tensor("O", kO, l.io, l.bhtd, l.s_out);
  const Desc dout = gb.tensor("dO", kDout, l.io, l.bhtd, l.s_out);
  const Desc stats = gb.tensor("Stats", kStats, kF32, l.bht1, l.s_bht1);
  const Desc dq = gb.tensor("dQ", kDq, l.io, l.bhtd, l.s_q);
  const Desc dk = gb.tensor("dK", kDk, l.io, l.kv_td, l.s_kv);
  const Desc dv = gb.tensor("dV", kDv, l.io, l.kv_td, l.s_kv);
  // Grouped: each query head's dK and dV, summed over the group into dK and dV.
  const Desc dk_heads = l.grouped ? gb.virt("dK per query head", l.io, l.bhtd, l.s_bhtd) : dk;
  const Desc dv_heads = l.grouped ? gb.virt("dV per query head", l.io, l.bhtd, l.s_bhtd) : dv;
  const Desc softmax_sum = gb.tensor("softmax_sum", kSoftmaxSum, kF32, l.bht1, l.s_bht1);
  const Desc dq_accum = gb.tensor("dQ_accum", kDqAccum, kF32, l.bhtd, l.s_bhtd);
  const Desc scale = gb.scalar("scale", kScale);
  const Desc mask_value = gb.scalar("mask value", kMaskValue);
  const Desc one = gb.scalar("one", kOne);  // cudnn-frontend's dropout-scale slot (1 without dropout)
  const Padding pad = padding_tensors(gb, l, prob);
  const Desc sq = pad.seq_len_q, skv = pad.seq_len_kv;

  const Desc do_o = gb.virt("dO * O", kF32, l.bhtd, l.s_bhtd);
  gb.pointwise("dO * O", CUDNN_POINTWISE_MUL, kF32, dout, o, nullptr, do_o);
  const Desc row_dot = gb.virt("rowsum(dO * O)", kF32, l.bht1, l.s_bht1);
  gb.reduction("rowsum(dO * O)", CUDNN_REDUCE_TENSOR_ADD, do_o, row_dot);
  gb.pointwise("softmax_sum", CUDNN_POINTWISE_MUL, kF32, row_dot, one, nullptr, softmax_sum);

  const Desc s = scaled_causal_scores(gb, l, q, kt, scale, mask_value, pad, opt);
  const Desc shifted = gb.virt("S - Stats", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("S - Stats", CUDNN_POINTWISE_SUB, kF32, s, stats, nullptr, shifted);
  const Desc p = gb.virt("P", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("P = exp(S - Stats)", CUDNN_POINTWISE_EXP, kF32, shifted, nullptr, nullptr, p);
  const Desc pt = gb.virt("P^T", low, l.bhtt, l.s_bhtt_t);
  gb.reshape("P^T", p, pt);
  gb.matmul("dV = P^T dO", pt, dout, dv_heads, extents(pad, skv, nullptr, sq));
  if (l.grouped) gb.reduction("dV = group sum", CUDNN_REDUCE_TENSOR_ADD, dv_heads, dv);

  const Desc dp = gb.virt("dP", kF32, l.bhtt, l.s_bhtt);
  gb.matmul("dP = dO V^T", dout, vt, dp, extents(pad, sq, skv, nullptr));
  const Desc dp_centered = gb.virt("dP - softmax_sum", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("dP - softmax_sum", CUDNN_POINTWISE_SUB, kF32, dp, softmax_sum, nullptr, dp_centered);
  const Desc ds_unscaled = gb.virt("P * (dP - softmax_sum)", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("P * (dP - softmax_sum)", CUDNN_POINTWISE_MUL, kF32, dp_centered, p, nullptr, ds_unscaled);
  const Desc ds = gb.virt("dS", kF32, l.bhtt, l.s_bhtt);
  gb.pointwise("dS = scale * ...", CUDNN_POINTWISE_MUL, kF32, ds_unscaled, scale, nullptr, ds);
  const Desc dst = gb.virt("dS^T", low, l.bhtt, l.s_bhtt_t);
  gb.reshape("dS^T", ds, dst);
  gb.matmul("dK = dS^T Q", dst, q, dk_heads, extents(pad, skv, nullptr, sq));
  if (l.grouped) gb.reduction("dK = group sum", CUDNN_REDUCE_TENSOR_ADD, dk_heads, dk);

  const Desc k = gb.virt("K", kF32, l.kv_td, l.s_kv);
  gb.reshape("K = (K^T)^T", kt, k);
  gb.matmul("dQ_accum = dS K", ds, k, dq_accum, extents(pad, sq, nullptr, skv));
  gb.pointwise("dQ = dQ_accum", CUDNN_POINTWISE_IDENTITY, kF32, dq_accum, nullptr, nullptr, dq);
}

}  // namespace

using cudnn_detail::fail;
using cudnn_detail::finalize;
using cudnn_detail::type_name;

CudnnDescriptor::CudnnDescriptor(cudnnBackendDescriptorType_t type, const char* name) : type_(type), name_(name) {
  const cudnnStatus_t status = cudnnBackendCreateDescriptor(type, &desc_);
  if (status != CUDNN_STATUS_SUCCESS)
    fail(status, std::string("cudnnBackendCreateDescriptor(") + type_name(type) + " '" + name + "')");
}

CudnnDescriptor::~CudnnDescriptor() {
  if (desc_) (void)cudnnBackendDestroyDescriptor(desc_);
}

CudnnDescriptor& CudnnDescriptor::operator=(CudnnDescriptor&& o) noexcept {
  if (this != &o) {
    if (desc_) (void)cudnnBackendDestroyDescriptor(desc_);
    desc_ = o.desc_;
    type_ = o.type_;
    name_ = o.name_;
    o.desc_ = nullptr;
  }
  return *this;
}

CudnnDescriptor cudnn_device_properties(const std::string& json) {
  CudnnDescriptor d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "from JSON");
  MPT_CUDNN_SET(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, int64_t(json.size()), json.data());
  finalize(d);
  return d;
}

std::unique_ptr<CudnnAttentionGraph> build_cudnn_attention_graph(const CudnnAttentionProblem& p, AttentionPass pass,
                                                                 const CudnnTarget& target,
                                                                 const CudnnGraphOptions& options) {
  auto g = std::make_unique<CudnnAttentionGraph>();
  g->problem = p;
  g->pass = pass;
  g->parts.reserve(128);  // descriptors are referenced by handle; growth would only move the owners
  GraphBuilder gb(*g);
  const Layouts l = layouts_of(p);
  if (pass == AttentionPass::Forward) build_forward(gb, l, p, options);
  else build_backward(gb, l, p, options);
  gb.finish(target);
  return g;
}

}  // namespace mpt::kernels::cuda
