// src/ops/matmul.cpp: matmul forward and backward: shape, dtype and scale checks, layouts, one dtype dispatch into
// the CPU GEMM kernels (kernels/cpu/gemm.h).
#include "mpt/ops/matmul.h"

#include "mpt/core/determinism.h"

#include <algorithm>
#include <exception>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cpu/gemm.h"
#include "mpt/ops/elementwise.h"
#include "ops/dispatch.h"

#if defined(MPT_WITH_CUDA)
#include <array>
#include <map>
#include <mutex>
#include <set>

#include "backend/cuda/check.h"
#include "kernels/cuda/gemm_scales.h"
#include "kernels/cuda/lib/gemm_cublaslt.h"
#include "ops/lt_workspace.h"
#include "mpt/core/memory.h"
#include "mpt/core/stream.h"
#endif

namespace mpt::ops {

namespace {

namespace kc = kernels::cpu;

constexpr int64_t kBlock = 128;

// The matrix the kernel reads for one operand: data (maybe a copy), whether the stored matrix is op()'s
// transpose, its leading dimension and its batch stride (0 broadcasts it).
struct Layout {
  Tensor t;
  bool trans = false;
  int64_t ld = 1, stride = 0;
};

// t holds op(t)^T when `trans`; its last two dims are the stored (or viewed) rows x cols.
Layout layout_of(const Tensor& t, bool trans) {
  const int64_t r = t.size(-2), c = t.size(-1);
  Layout l{t, trans, std::max<int64_t>(1, c), 0};
  if (t.numel() == 0) return l;
  const int64_t s_row = t.stride(-2), s_col = t.stride(-1);
  if ((s_col == 1 || c == 1) && (r == 1 || s_row >= c)) {
    l.ld = r == 1 ? c : s_row;
  } else if ((s_row == 1 || r == 1) && (c == 1 || s_col >= r)) {  // a transposed view: read it as stored
    l.trans = !trans;
    l.ld = c == 1 ? r : s_col;
  } else {
    l.t = t.contiguous();
  }
  if (l.t.dim() == 3 && l.t.size(0) > 1) l.stride = l.t.stride(0);
  return l;
}

int64_t batch_of(const Tensor& t) { return t.dim() == 3 ? t.size(0) : 1; }
Tensor batch_entry(const Tensor& t, int64_t i) { return t.dim() == 3 ? t.select(0, t.size(0) == 1 ? 0 : i) : t; }

DType default_out_dtype(DType in) { return is_fp8(in) ? DType::F32 : in; }

bool out_dtype_allowed(DType in, DType out) {
  switch (in) {
    case DType::F32: case DType::F64: return out == in;
    case DType::F16: case DType::BF16: return out == in || out == DType::F32;
    case DType::F8E4M3: case DType::F8E5M2:
      return out == DType::F32 || out == DType::BF16 || out == DType::F16 || is_fp8(out);
    default: return false;
  }
}

template <class F>
void visit_fp8(DType t, F&& f) {
  if (t == DType::F8E4M3) f(f8e4m3{});
  else f(f8e5m2{});
}

template <class F>
void visit_gemm_out(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::BF16: f(bf16{}); break;
    case DType::F16: f(f16{}); break;
    case DType::F8E4M3: f(f8e4m3{}); break;
    case DType::F8E5M2: f(f8e5m2{}); break;
    default: MPT_THROW("[matmul] unsupported output dtype {}", t);
  }
}

kc::ScaleMode scale_mode(Fp8Scaling::Kind k) {
  switch (k) {
    case Fp8Scaling::Kind::Block1x128: return kc::ScaleMode::Block1x128;
    case Fp8Scaling::Kind::Block128x128: return kc::ScaleMode::Block128x128;
    default: return kc::ScaleMode::PerTensor;
  }
}

// Checks one FP8 operand's scales (rows: its non-K dimension) and returns them contiguous.
Tensor checked_scale(const Fp8Scaling& s, const Tensor& operand, int64_t rows, int64_t k, const char* name,
                     Device dev) {
  MPT_CHECK(s.scale_inv.defined(), "[matmul] {} is {} and needs scale_{}.scale_inv (see Fp8Scaling)", name,
            operand.meta_str(), name);
  MPT_CHECK(s.scale_inv.dtype() == DType::F32 && s.scale_inv.device() == dev,
            "[matmul] scale_{}.scale_inv must be f32 on {}, got {}", name, dev.str(), s.scale_inv.meta_str());
  const int64_t kb = (k + kBlock - 1) / kBlock;
  Shape expected;
  if (s.kind == Fp8Scaling::Kind::PerTensor) {
    MPT_CHECK(s.scale_inv.numel() == 1, "[matmul] per-tensor scale_{}.scale_inv must have one element, got {}", name,
              s.scale_inv.meta_str());
    return s.scale_inv.contiguous();
  }
  expected = {s.kind == Fp8Scaling::Kind::Block1x128 ? rows : (rows + kBlock - 1) / kBlock, kb};
  if (operand.dim() == 3) expected.insert(expected.begin(), operand.size(0));
  MPT_CHECK(s.scale_inv.shape() == expected,
            "[matmul] {} block scale_{}.scale_inv for {} (non-K rows {}, k {}) must have shape {}, got {}",
            s.kind == Fp8Scaling::Kind::Block1x128 ? "1x128" : "128x128", name, operand.meta_str(), rows, k,
            shape_str(expected), s.scale_inv.meta_str());
  return s.scale_inv.contiguous();
}

void check_no_fp8_options(const MatmulOptions& opt, const char* op, const Tensor& a) {
  MPT_CHECK(!opt.scale_a.scale_inv.defined() && !opt.scale_b.scale_inv.defined() && !opt.out_scale.defined() &&
                !opt.out_amax.defined(),
            "[{}] FP8 scales (scale_a, scale_b, out_scale, out_amax) apply to FP8 operands and outputs only, got {}",
            op, a.meta_str());
}

// Runs a kernel and turns oneDNN or parameter errors into mpt::Error naming the operands.
template <class F>
void run_kernel(F&& f, const Tensor& a, const Tensor& b, const Tensor& c) {
  try {
    f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    MPT_THROW("[matmul] CPU GEMM failed for a {}, b {}, c {}: {}", a.meta_str(), b.meta_str(), c.meta_str(), e.what());
  }
}

#if defined(MPT_WITH_CUDA)
namespace kcu = kernels::cuda;

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F8E4M3: return CUDA_R_8F_E4M3;
    case DType::F8E5M2: return CUDA_R_8F_E5M2;
    default: MPT_THROW("[matmul] no cuBLASLt type for {}", t);
  }
}

kcu::GemmScaleMode lt_mode(Fp8Scaling::Kind k) {
  return k == Fp8Scaling::Kind::Block1x128     ? kcu::GemmScaleMode::Block1x128
         : k == Fp8Scaling::Kind::Block128x128 ? kcu::GemmScaleMode::Block128x128
                                               : kcu::GemmScaleMode::PerTensor;
}

// The operands' block scales from our layout to cuBLASLt's (gemm_layout.h), both in one launch; per-tensor scales
// pass through.
std::pair<Tensor, Tensor> lt_scales(const Fp8Scaling& sa, const Tensor& a, int64_t m, const Fp8Scaling& sb,
                                    const Tensor& b, int64_t n, int64_t k, cudaStream_t stream) {
  kcu::BlockScaleConversion conv[2];
  Tensor out[2] = {a, b};
  const std::pair<const Fp8Scaling*, int64_t> operand[2] = {{&sa, m}, {&sb, n}};
  for (int i = 0; i < 2; ++i) {
    const kcu::GemmScaleMode mode = lt_mode(operand[i].first->kind);
    if (mode == kcu::GemmScaleMode::PerTensor) continue;
    const int64_t rows = operand[i].second, entries = out[i].numel() / kcu::our_scale_count(mode, rows, k);
    const Tensor ours = out[i];
    out[i] = Tensor::empty({entries * kcu::lt_scale_count(mode, rows, k)}, DType::F32, ours.device());
    conv[i] = {mode, ours.data<float>(), out[i].data<float>(), rows, k, entries};
  }
  if (conv[0].lt != nullptr || conv[1].lt != nullptr) MPT_CUDA_CHECK(kcu::block_scales_to_lt(conv[0], conv[1], stream));
  return {out[0], out[1]};
}

// GEMM dimensions that are not multiples of 8 (GPT-2's vocabulary of 50257 as the LM head's n, then as k and m in its
// gradients) send cuBLASLt to kernels several times slower: on an H200 the LM head's forward took 6.7 ms at 50257
// and 1.0 ms at 50304, for mptrain and PyTorch eager alike (torch.compile pads them: inductor's pad_mm). Large such
// GEMMs run here on zero-padded copies, each dimension rounded up to a multiple of 64 (nanoGPT's and llm.c's
// padded vocabulary): a pass over the padded operands and the output, a fraction of what the GEMM loses.
constexpr int64_t kPadMinBytes = int64_t{1} << 24;  // the largest operand or output: 16 MiB
int64_t padded_dim(int64_t d) { return d % 8 == 0 ? d : (d + 63) / 64 * 64; }

// A zero-padded copy of the stored matrix t ([rows, cols] as stored) with `rows_p` x `cols_p`.
Tensor padded_copy(const Tensor& t, int64_t rows_p, int64_t cols_p) {
  Tensor out = Tensor::empty({rows_p, cols_p}, t.dtype(), t.device());
  const int64_t rows = t.size(0), cols = t.size(1);
  if (cols_p > cols) out.slice(1, cols, cols_p).zero_();
  if (rows_p > rows) out.slice(0, rows, rows_p).zero_();
  out.slice(0, 0, rows).slice(1, 0, cols).copy_(t);
  return out;
}

bool gemm_cuda(const Tensor& a_in, const Tensor& b_in, const Tensor& c, float beta, const MatmulOptions& opt);

// gemm_cuda, with a large 2-d 16-bit or FP32 GEMM whose m, n or k is not a multiple of 8 run on padded copies (the
// GELU epilogues excepted: the MLP's widths are multiples of 8).
void gemm_cuda_padded(const Tensor& a, const Tensor& b, const Tensor& c, float beta, const MatmulOptions& opt) {
  const int64_t m = c.size(-2), n = c.size(-1), k = opt.trans_a ? a.size(-2) : a.size(-1);
  const int64_t mp = padded_dim(m), np = padded_dim(n), kp = padded_dim(k);
  const bool odd = mp != m || np != n || kp != k;
  const int64_t largest = std::max({a.nbytes(), b.nbytes(), c.nbytes()});
  if (!odd || largest < kPadMinBytes || c.dim() != 2 || a.dim() != 2 || b.dim() != 2 || is_fp8(a.dtype()) ||
      is_fp8(c.dtype()) || opt.gelu_aux.defined() || opt.dgelu_aux.defined() || k == 0) {
    gemm_cuda(a, b, c, beta, opt);  // GELU epilogues never come here (gemm_into runs them first)
    return;
  }
  // The stored matrices: a is [m, k] ([k, m] with trans_a), b is [k, n] ([n, k] with trans_b).
  const Tensor ap = opt.trans_a ? padded_copy(a, kp, mp) : padded_copy(a, mp, kp);
  const Tensor bp = opt.trans_b ? padded_copy(b, np, kp) : padded_copy(b, kp, np);
  const bool pad_c = mp != m || np != n;
  Tensor cp = c;
  if (pad_c) {
    cp = Tensor::empty({mp, np}, c.dtype(), c.device());
    if (beta != 0.0f) cp.slice(0, 0, m).slice(1, 0, n).copy_(c);
  }
  MatmulOptions o = opt;
  if (opt.bias.defined() && np != n) o.bias = padded_copy(opt.bias.contiguous().view({1, n}), 1, np).view({np});
  if (opt.bias_grad.defined() && mp != m) o.bias_grad = Tensor::empty({mp}, opt.bias_grad.dtype(), c.device());
  gemm_cuda(ap, bp, cp, beta, o);
  if (pad_c) {
    Tensor dst = c;
    dst.copy_(cp.slice(0, 0, m).slice(1, 0, n));
  }
  if (o.bias_grad.defined() && mp != m) {
    Tensor dst = opt.bias_grad;
    dst.copy_(o.bias_grad.slice(0, 0, m));
  }
}

// GELU epilogues cuBLASLt refused (no algorithm), per device, epilogue, operand and output types, scale modes and
// deterministic mode: the FP8 ones are outside its documented tables (block-scaled FP8 with GELU, and FP8 DGELU on
// some GPUs). A refused kind is not asked again (nor are its block scales converted): those GEMMs run plain, with the
// GELU kernels after them (gemm_then_gelu). Shapes are not part of the key: a refusal for one shape sends every GEMM
// of that kind to the kernels, correct and only less fused.
using EpilogueKind = std::array<int, 9>;
EpilogueKind gelu_kind(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulOptions& opt) {
  return {c.device().index(), opt.gelu_aux.defined() ? 1 : 2, opt.bias.defined() || opt.aux_bias_grad.defined(),
          static_cast<int>(a.dtype()), static_cast<int>(b.dtype()), static_cast<int>(c.dtype()),
          is_fp8(a.dtype()) ? static_cast<int>(opt.scale_a.kind) : -1,
          is_fp8(b.dtype()) ? static_cast<int>(opt.scale_b.kind) : -1, deterministic() ? 1 : 0};
}
bool gelu_epilogue_refused(const EpilogueKind& kind, bool remember) {
  static std::mutex mutex;
  static auto* refused = new std::set<EpilogueKind>();
  std::lock_guard<std::mutex> lock(mutex);
  if (remember) refused->insert(kind);
  return refused->count(kind) != 0;
}

// c = alpha op(a) op(b) + beta c on a CUDA device through cuBLASLt (kernels/cuda/lib/gemm_cublaslt.h). Returns false,
// with nothing computed, when the GEMM asks for a GELU epilogue that cuBLASLt refuses; any other failure throws.
bool gemm_cuda(const Tensor& a_in, const Tensor& b_in, const Tensor& c, float beta, const MatmulOptions& opt) {
  const int64_t m = c.size(-2), n = c.size(-1), k = opt.trans_a ? a_in.size(-2) : a_in.size(-1);
  const bool gelu = opt.gelu_aux.defined() || opt.dgelu_aux.defined();
  const EpilogueKind kind = gelu ? gelu_kind(a_in, b_in, c, opt) : EpilogueKind{};
  if (gelu && (k == 0 || gelu_epilogue_refused(kind, false))) return false;  // the GEMM and the GELU kernels
  if (k == 0) {  // no products: C = beta C (beta == 0 never reads C)
    Tensor dst = c;
    if (beta == 0.0f) dst.zero_();
    else dst.copy_(scale(c, beta));
    return true;
  }
  const bool fp8_in = is_fp8(a_in.dtype());
  // FP8 needs A stored m x k and B stored n x k (TN): other layouts go through transposed copies.
  const Tensor a_op = fp8_in ? (opt.trans_a ? a_in.transpose(-2, -1) : a_in).contiguous() : a_in;
  const Tensor b_op = fp8_in ? (opt.trans_b ? b_in : b_in.transpose(-2, -1)).contiguous() : b_in;
  const Layout la = layout_of(a_op, fp8_in ? false : opt.trans_a), lb = layout_of(b_op, fp8_in || opt.trans_b);
  const Tensor &a = la.t, &b = lb.t;
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1;
  const Stream stream = Stream::current(c.device());
  const auto native = static_cast<cudaStream_t>(stream.native());

  kcu::LtGemmParams p;
  p.shape = {m, n, k, la.trans, lb.trans, la.ld, lb.ld, m == 1 ? std::max<int64_t>(1, n) : c.stride(-2), batch,
             la.stride, lb.stride, batch > 1 ? c.stride(0) : 0};
  p.alpha = opt.alpha, p.beta = beta;
  p.a_type = lt_type(a.dtype()), p.b_type = lt_type(b.dtype()), p.c_type = lt_type(c.dtype());
  p.allow_tf32 = false;  // the precision policy's TF32 flag goes here
  p.deterministic = deterministic();
  Tensor sa, sb;
  if (fp8_in) {
    const Tensor ca = checked_scale(opt.scale_a, a_in, m, k, "a", c.device());
    const Tensor cb = checked_scale(opt.scale_b, b_in, n, k, "b", c.device());
    std::tie(sa, sb) = lt_scales(opt.scale_a, ca, m, opt.scale_b, cb, n, k, native);
    p.scale_a = {lt_mode(opt.scale_a.kind), sa.data<float>()};
    p.scale_b = {lt_mode(opt.scale_b.kind), sb.data<float>()};
    p.fp8_fast_accum = opt.fp8_fast_accum;
  }
  if (is_fp8(c.dtype())) {
    MPT_CHECK(opt.out_scale.defined() && opt.out_scale.numel() == 1 && opt.out_scale.dtype() == DType::F32 &&
                  opt.out_scale.device() == c.device(),
              "[matmul] an FP8 output ({}) needs out_scale, an f32 scalar on {}", c.meta_str(), c.device().str());
    p.out_scale = opt.out_scale.data<float>();
    if (opt.out_amax.defined()) {
      MPT_CHECK(opt.out_amax.numel() == 1 && opt.out_amax.dtype() == DType::F32 &&
                    opt.out_amax.device() == c.device() && opt.out_amax.is_contiguous(),
                "[matmul] out_amax must be a contiguous f32 scalar on {}, got {}", c.device().str(),
                opt.out_amax.meta_str());
      p.out_amax = opt.out_amax.data<float>();
    }
  } else {
    MPT_CHECK(!opt.out_scale.defined() && !opt.out_amax.defined(),
              "[matmul] out_scale and out_amax apply to FP8 outputs only, the output is {}", c.meta_str());
  }
  Tensor bias;  // the forward bias in the type cuBLASLt reads (R2.1/R2.3: the output's; bf16 for FP8 -> f32)
  if (opt.bias.defined()) {
    const DType bias_type = fp8_in && c.dtype() == DType::F32 ? DType::BF16 : c.dtype();
    bias = opt.bias.to(bias_type).contiguous();
    p.epilogue = kcu::GemmEpilogue::Bias;
    p.bias = bias.data_ptr();
  } else if (opt.bias_grad.defined()) {
    p.epilogue = kcu::GemmEpilogue::BGradA;  // row sums of op(a), written beside D
    p.bias = opt.bias_grad.data_ptr();
  }
  if (opt.gelu_aux.defined()) {  // D = gelu(A B + bias), aux = the pre-activation
    p.epilogue = bias.defined() ? kcu::GemmEpilogue::GeluAuxBias : kcu::GemmEpilogue::GeluAux;
    p.aux = opt.gelu_aux.data_ptr();
    p.aux_ld = n;
  } else if (opt.dgelu_aux.defined()) {  // D = (A B) * gelu'(aux), bias = D's column sums
    p.epilogue = opt.aux_bias_grad.defined() ? kcu::GemmEpilogue::DGeluBGrad : kcu::GemmEpilogue::DGelu;
    p.aux = opt.dgelu_aux.data_ptr();
    p.aux_ld = n;
    if (opt.aux_bias_grad.defined()) p.bias = opt.aux_bias_grad.data_ptr();
  }
  const kcu::LtResult r =
      kcu::cublaslt_gemm(c.device().index(), p, a.data_ptr(), b.data_ptr(), c.data_ptr(), detail::lt_workspace(stream), native);
  if (gelu && r.code == kcu::LtCode::NoAlgorithm) return !gelu_epilogue_refused(kind, true);
  MPT_CHECK(r.ok(), "[matmul] {} (a {}, b {}, c {})", kcu::describe(r, p), a_in.meta_str(), b_in.meta_str(),
            c.meta_str());
  return true;
}
#endif

void gemm_into(const Tensor& a_in, const Tensor& b_in, const Tensor& c, float beta, const MatmulOptions& opt);

// The GELU epilogues as a plain GEMM and the GELU kernels after it (the CPU; CUDA where cuBLASLt refuses the epilogue):
// forward, the GEMM (with its bias) into gelu_aux, then c = gelu(gelu_aux); backward, the GEMM into c, then
// c *= gelu'(dgelu_aux) in place and aux_bias_grad = c's column sums (in FP32, then rounded to c's dtype).
void gemm_then_gelu(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulOptions& opt) {
  MatmulOptions plain = opt;
  plain.gelu_aux = plain.dgelu_aux = plain.aux_bias_grad = Tensor{};
  const bool forward = opt.gelu_aux.defined();
  const bool direct = c.is_contiguous();  // the GELU kernels write c in place, else through a temporary
  const Tensor out = direct ? c : Tensor::empty(c.shape(), c.dtype(), c.device());
  gemm_into(a, b, forward ? opt.gelu_aux : out, 0.0f, plain);
  if (forward) detail::gelu_into(opt.gelu_aux, out);
  else detail::gelu_backward_into(out, opt.dgelu_aux, out, false);
  if (!direct) Tensor(c).copy_(out);
  if (opt.aux_bias_grad.defined()) Tensor(opt.aux_bias_grad).copy_(detail::bias_grad(out));
}

// c = alpha op(a) op(b) + beta c for validated shapes and dtypes; c has the result's shape.
void gemm_into(const Tensor& a_in, const Tensor& b_in, const Tensor& c, float beta, const MatmulOptions& opt) {
  const int64_t m = c.size(-2), n = c.size(-1), k = opt.trans_a ? a_in.size(-2) : a_in.size(-1);
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1;
  const bool fp8_in = is_fp8(a_in.dtype());
  if (fp8_in) {  // validated on the caller's shapes, before any reshaping below
    checked_scale(opt.scale_a, a_in, m, k, "a", c.device());
    checked_scale(opt.scale_b, b_in, n, k, "b", c.device());
  }

  // A batch of A rows against one B is one taller GEMM (oneDNN is faster on it, and 1x128 scales stay valid).
  if (a_in.dim() == 3 && b_in.dim() == 2 && !opt.trans_a && c.is_contiguous() &&
      !(fp8_in && opt.scale_a.kind == Fp8Scaling::Kind::Block128x128)) {
    MatmulOptions flat = opt;
    if (fp8_in && opt.scale_a.kind == Fp8Scaling::Kind::Block1x128)
      flat.scale_a.scale_inv = opt.scale_a.scale_inv.reshape({-1, opt.scale_a.scale_inv.size(-1)});
    return gemm_into(a_in.reshape({-1, k}), b_in, c.view({-1, n}), beta, flat);
  }
  // An output the kernel cannot write in place goes through a contiguous copy.
  const bool c_ok = (c.stride(-1) == 1 || n == 1) && (m == 1 || c.stride(-2) >= n) &&
                    (batch == 1 || c.stride(0) >= (m - 1) * std::max<int64_t>(c.stride(-2), 1) + n);
  if (!c_ok && c.numel() > 0) {
    Tensor tmp = beta == 0.0f ? Tensor::empty(c.shape(), c.dtype(), c.device()) : c.contiguous().clone();
    gemm_into(a_in, b_in, tmp, beta, opt);
    Tensor dst = c;
    dst.copy_(tmp);
    return;
  }

  if (opt.gelu_aux.defined() || opt.dgelu_aux.defined()) {
    const Tensor& aux = opt.gelu_aux.defined() ? opt.gelu_aux : opt.dgelu_aux;
    MPT_CHECK(aux.dtype() == c.dtype() && beta == 0.0f &&
                  (!opt.aux_bias_grad.defined() || opt.aux_bias_grad.dtype() == c.dtype()),
              "[matmul] the GELU aux ({}) and aux_bias_grad must have the output's dtype {}, with beta 0", aux.meta_str(),
              c.dtype());
#if defined(MPT_WITH_CUDA)
    if (c.device().is_cuda() && gemm_cuda(a_in, b_in, c, beta, opt)) return;  // cuBLASLt's epilogue
#endif
    return gemm_then_gelu(a_in, b_in, c, opt);
  }
  if (opt.bias_grad.defined()) {
    MPT_CHECK(opt.bias_grad.dtype() == c.dtype(), "[matmul] bias_grad must have the output's dtype {}, got {}",
              c.dtype(), opt.bias_grad.meta_str());
    if (!c.device().is_cuda()) {  // the CPU: the sums beside the GEMM (CUDA: the GEMM's epilogue)
      MatmulOptions plain = opt;
      plain.bias_grad = Tensor{};
      gemm_into(a_in, b_in, c, beta, plain);
      Tensor out = opt.bias_grad;
      out.copy_(detail::bias_grad(opt.trans_a ? a_in.contiguous() : a_in.t().contiguous()));
      return;
    }
  }
  // The bias is fused into the CPU's f32/f16/bf16 GEMMs and into cuBLASLt's epilogue. f64 and FP8 outputs: the
  // product goes to an f32 (f64) buffer, the bias is added there and the sum rounded once.
  if (opt.bias.defined() && (a_in.dtype() == DType::F64 || is_fp8(c.dtype()))) {
    MatmulOptions plain = opt;
    plain.bias = Tensor{};
    const DType wide = c.dtype() == DType::F64 ? DType::F64 : DType::F32;
    const Tensor acc = c.dtype() == wide ? c : beta == 0.0f ? Tensor::empty(c.shape(), wide, c.device()) : c.to(wide);
    gemm_into(a_in, b_in, acc, beta, plain);
    Tensor dst = c;
    dst.copy_(add(acc, opt.bias.to(wide)));
    return;
  }
#if defined(MPT_WITH_CUDA)
  if (c.device().is_cuda()) return gemm_cuda_padded(a_in, b_in, c, beta, opt);
#endif
  const Layout la = layout_of(a_in, opt.trans_a), lb = layout_of(b_in, opt.trans_b);
  kc::GemmParams p;
  p.m = m, p.n = n, p.k = k;
  p.trans_a = la.trans, p.trans_b = lb.trans;
  p.lda = la.ld, p.ldb = lb.ld;
  p.ldc = m == 1 || c.numel() == 0 ? std::max<int64_t>(1, n) : c.stride(-2);
  p.batch = batch;
  p.stride_a = la.stride, p.stride_b = lb.stride;
  p.stride_c = batch > 1 ? c.stride(0) : 0;
  p.alpha = opt.alpha, p.beta = beta;
  const Tensor &a = la.t, &b = lb.t;
  const Tensor bias = opt.bias.defined() ? opt.bias.to(DType::F32).contiguous() : Tensor{};
  p.bias = bias.defined() ? bias.data<float>() : nullptr;

  if (!fp8_in) {
    detail::visit_float(a.dtype(), "matmul", [&](auto tag) {
      using T = decltype(tag);
      run_kernel([&] {
        if (c.dtype() == a.dtype()) kc::gemm<T, T>(p, a.data<T>(), b.data<T>(), c.data<T>());
        else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
          kc::gemm<T, float>(p, a.data<T>(), b.data<T>(), c.data<float>());
      }, a, b, c);
    });
    return;
  }
  const Device dev = c.device();
  const Tensor sa = checked_scale(opt.scale_a, a_in, m, k, "a", dev);
  const Tensor sb = checked_scale(opt.scale_b, b_in, n, k, "b", dev);
  kc::Fp8GemmArgs args;
  args.a = {scale_mode(opt.scale_a.kind), sa.data<float>()};
  args.b = {scale_mode(opt.scale_b.kind), sb.data<float>()};
  Tensor out_scale;
  if (is_fp8(c.dtype())) {
    MPT_CHECK(opt.out_scale.defined() && opt.out_scale.numel() == 1 && opt.out_scale.dtype() == DType::F32 &&
                  opt.out_scale.device() == dev,
              "[matmul] an FP8 output ({}) needs out_scale, an f32 scalar on {}; got {}", c.meta_str(), dev.str(),
              opt.out_scale.defined() ? opt.out_scale.meta_str() : std::string("none"));
    MPT_CHECK(beta == 0.0f, "[matmul] an FP8 output ({}) cannot accumulate (beta = {})", c.meta_str(), beta);
    out_scale = opt.out_scale.contiguous();
    args.out_scale = out_scale.data<float>();
    if (opt.out_amax.defined()) {
      MPT_CHECK(opt.out_amax.numel() == 1 && opt.out_amax.dtype() == DType::F32 && opt.out_amax.device() == dev &&
                    opt.out_amax.is_contiguous(),
                "[matmul] out_amax must be a contiguous f32 scalar on {}, got {}", dev.str(), opt.out_amax.meta_str());
      args.out_amax = opt.out_amax.data<float>();
    }
  } else {
    MPT_CHECK(!opt.out_scale.defined() && !opt.out_amax.defined(),
              "[matmul] out_scale and out_amax apply to FP8 outputs only, the output is {}", c.meta_str());
  }
  visit_fp8(a.dtype(), [&](auto ta) {
    visit_fp8(b.dtype(), [&](auto tb) {
      using TA = decltype(ta);
      using TB = decltype(tb);
      visit_gemm_out(c.dtype(), [&](auto tc) {
        using TC = decltype(tc);
        run_kernel([&] { kc::gemm_fp8<TA, TB, TC>(p, a.data<TA>(), b.data<TB>(), c.data<TC>(), args); }, a, b, c);
      });
    });
  });
}

// Validates a matmul and returns the result's shape; dtype-independent checks only.
Shape checked_shape(const Tensor& a, const Tensor& b, const MatmulOptions& opt, const char* op) {
  detail::check_same_device({&a, &b}, op);
  detail::check_f64_on_cpu(a, op);
  MPT_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3),
            "[{}] expected 2-d or 3-d (batched) operands, got a {} and b {}", op, a.meta_str(), b.meta_str());
  const int64_t m = opt.trans_a ? a.size(-1) : a.size(-2), ka = opt.trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = opt.trans_b ? b.size(-1) : b.size(-2), n = opt.trans_b ? b.size(-2) : b.size(-1);
  MPT_CHECK(ka == kb, "[{}] inner dimensions differ: op(a) is {}x{} (a {}{}) and op(b) is {}x{} (b {}{})", op, m, ka,
            a.meta_str(), opt.trans_a ? ", trans_a" : "", kb, n, b.meta_str(), opt.trans_b ? ", trans_b" : "");
  const int64_t ba = batch_of(a), bb = batch_of(b);
  MPT_CHECK(ba == bb || ba == 1 || bb == 1, "[{}] batch sizes differ: a {} and b {}", op, a.meta_str(),
            b.meta_str());
  const bool fp8_a = is_fp8(a.dtype()), fp8_b = is_fp8(b.dtype());
  MPT_CHECK(fp8_a == fp8_b && (fp8_a || a.dtype() == b.dtype()),
            "[{}] unsupported dtype pair a {} and b {}: both f32, f16, bf16 or f64 alike, or both FP8", op,
            a.meta_str(), b.meta_str());
  if (!fp8_a) {
    detail::visit_float(a.dtype(), op, [](auto) {});
    check_no_fp8_options(opt, op, a);
  }
  if (opt.bias_grad.defined()) {
    detail::check_same_device({&a, &opt.bias_grad}, op);
    MPT_CHECK(a.dim() == 2 && b.dim() == 2 && !fp8_a && !opt.bias.defined() && opt.alpha == 1.0f &&
                  opt.bias_grad.dim() == 1 && opt.bias_grad.size(0) == m && opt.bias_grad.is_contiguous(),
              "[{}] bias_grad needs 2-d non-FP8 operands, alpha 1, no bias and a contiguous [{}] tensor (op(a)'s rows); "
              "got a {}, b {}, alpha {}, bias_grad {}", op, m, a.meta_str(), b.meta_str(), opt.alpha,
              opt.bias_grad.meta_str());
  }
  if (opt.gelu_aux.defined() || opt.dgelu_aux.defined() || opt.aux_bias_grad.defined()) {
    const Tensor& aux = opt.gelu_aux.defined() ? opt.gelu_aux : opt.dgelu_aux;
    MPT_CHECK(aux.defined() && opt.gelu_aux.defined() != opt.dgelu_aux.defined() && a.dim() == 2 && b.dim() == 2 &&
                  !is_fp8(aux.dtype()) && opt.alpha == 1.0f && !opt.bias_grad.defined() &&
                  (!opt.aux_bias_grad.defined() || opt.dgelu_aux.defined()) &&
                  (!opt.bias.defined() || opt.gelu_aux.defined()),
              "[{}] gelu_aux (with an optional bias) or dgelu_aux (with an optional aux_bias_grad), one of them, on 2-d "
              "operands with a non-FP8 output, alpha 1 and no bias_grad", op);
    detail::check_same_device({&a, &aux}, op);
    MPT_CHECK(aux.dim() == 2 && aux.size(0) == m && aux.size(1) == n && aux.is_contiguous(),
              "[{}] the GELU aux must be a contiguous [{}, {}] tensor, got {}", op, m, n, aux.meta_str());
    if (opt.aux_bias_grad.defined()) {
      detail::check_same_device({&a, &opt.aux_bias_grad}, op);
      MPT_CHECK(opt.aux_bias_grad.dim() == 1 && opt.aux_bias_grad.size(0) == n && opt.aux_bias_grad.is_contiguous(),
                "[{}] aux_bias_grad must be a contiguous [{}] tensor, got {}", op, n, opt.aux_bias_grad.meta_str());
    }
  }
  if (opt.bias.defined()) {
    detail::check_same_device({&a, &opt.bias}, op);
    MPT_CHECK(opt.bias.dim() == 1 && opt.bias.size(0) == n && is_floating(opt.bias.dtype()) &&
                  !is_fp8(opt.bias.dtype()) && opt.alpha == 1.0f && !opt.bias.requires_grad(),
              "[{}] the bias must be a [{}] float tensor (the output's columns) not requiring grad, with alpha 1; got "
              "bias {}, alpha {} (for a differentiable bias use ops::linear)", op, n, opt.bias.meta_str(), opt.alpha);
  }
  if (a.dim() == 2 && b.dim() == 2) return {m, n};
  return {std::max(ba, bb), m, n};
}

}  // namespace

namespace {

// Batch dimensions beyond one, broadcast NumPy-style: each operand becomes 2-d (a batch of one) or 3-d over the
// broadcast batch through recorded views (expand, reshape), so autograd sums a broadcast operand's gradient back.
Tensor matmul_nd(const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  MPT_CHECK(a.dim() >= 2 && b.dim() >= 2, "[matmul] expected operands of at least 2 dimensions, got a {} and b {}",
            a.meta_str(), b.meta_str());
  MPT_CHECK(!opt.scale_a.scale_inv.defined() && !opt.scale_b.scale_inv.defined() && !opt.bias.defined() &&
                !opt.bias_grad.defined() && !opt.gelu_aux.defined() && !opt.dgelu_aux.defined(),
            "[matmul] operands with more than one batch dimension ({} x {}) take no FP8 scales, bias or epilogues",
            a.meta_str(), b.meta_str());
  const auto batch_dims = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  const Shape batch = broadcast_shapes(batch_dims(a), batch_dims(b), "matmul");
  const int64_t nb = numel(batch);
  const auto flat = [&](const Tensor& t) {
    const int64_t r = t.size(-2), c = t.size(-1);
    if (numel(batch_dims(t)) == 1) return t.reshape({r, c});
    Shape full = batch;
    full.push_back(r);
    full.push_back(c);
    return t.expand(full).reshape({nb, r, c});
  };
  const Tensor c = matmul(flat(a), flat(b), opt);
  Shape out = batch;
  out.push_back(c.size(-2));
  out.push_back(c.size(-1));
  return c.reshape(out);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  if (a.defined() && b.defined() && (a.dim() > 3 || b.dim() > 3)) return matmul_nd(a, b, opt);
  const detail::GradRecorder grad({&a, &b});
  const Shape shape = checked_shape(a, b, opt, "matmul");
  const DType out = opt.out_dtype.value_or(default_out_dtype(a.dtype()));
  MPT_CHECK(out_dtype_allowed(a.dtype(), out), "[matmul] {} x {} cannot produce a {} output", a.meta_str(),
            b.meta_str(), out);
  MPT_CHECK(!grad || (!opt.bias_grad.defined() && !opt.gelu_aux.defined() && !opt.dgelu_aux.defined()),
            "[matmul] bias_grad and the GELU epilogues are not differentiable: call them without grad (ops::mlp)");
  MPT_CHECK(!grad || !is_fp8(a.dtype()), "[matmul] FP8 operands are codes, not differentiable tensors ({} x {}): an "
            "FP8 recipe quantizes and runs the backward GEMMs itself", a.meta_str(), b.meta_str());
  Tensor c = Tensor::empty(shape, out, a.device());
  gemm_into(a, b, c, 0.0f, opt);
  grad.record("MatmulBackward", {&c}, [a = a.detach(), b = b.detach(), opt](const std::vector<Tensor>& g) {
    const MatmulGrads d = matmul_backward(g[0], a, b, opt);
    return std::vector<Tensor>{d.da, d.db};
  });
  return c;
}

void matmul_out(const Tensor& a, const Tensor& b, const Tensor& c, float beta, const MatmulOptions& opt) {
  MPT_CHECK(!autograd::any_requires_grad({&a, &b, &c}),
            "[matmul_out] writes into c in place, which autograd does not record, and an operand requires grad: use "
            "ops::matmul, or run under autograd::NoGradGuard");
  const Shape shape = checked_shape(a, b, opt, "matmul_out");
  detail::check_same_device({&a, &c}, "matmul_out");
  detail::check_shape(c, shape, "c", "matmul_out");
  MPT_CHECK(!opt.out_dtype || *opt.out_dtype == c.dtype(), "[matmul_out] out_dtype {} differs from c {}",
            *opt.out_dtype, c.meta_str());
  MPT_CHECK(out_dtype_allowed(a.dtype(), c.dtype()), "[matmul_out] {} x {} cannot produce a {} output", a.meta_str(),
            b.meta_str(), c.dtype());
  gemm_into(a, b, c, beta, opt);
}

namespace {

// Shared by both gradients: checks, the dc conversion and the destination (accumulating when given).
struct GradSetup {
  Tensor dc, out;
  float beta;
};

GradSetup grad_setup(const Tensor& dc, const Tensor& a, const Tensor& b, const MatmulOptions& opt,
                     const Tensor& target, Tensor given, const char* op) {
  const Shape shape = checked_shape(a, b, opt, op);
  MPT_CHECK(!is_fp8(a.dtype()), "[{}] FP8 operands ({}, {}): quantize dc and call matmul for the dgrad and wgrad "
            "GEMMs", op, a.meta_str(), b.meta_str());
  detail::check_same_device({&a, &dc}, op);
  detail::check_shape(dc, shape, "dc", op);
  GradSetup s{dc.dtype() == a.dtype() ? dc : dc.to(a.dtype()), given, given.defined() ? 1.0f : 0.0f};
  if (given.defined()) {
    detail::check_same_device({&a, &given}, op);
    detail::check_shape(given, target.shape(), "the gradient to accumulate into", op);
    MPT_CHECK(out_dtype_allowed(a.dtype(), given.dtype()), "[{}] cannot accumulate a {} gradient into {}", op,
              a.dtype(), given.meta_str());
  } else {
    s.out = Tensor::empty(target.shape(), a.dtype(), a.device());
  }
  return s;
}

// out (+)= x op y over the batch, where out is 2-d and the batch of x / y is summed (beta = 1 after the first).
// A low-precision out is summed in an f32 buffer and rounded once.
void sum_over_batch(const Tensor& x, const Tensor& y, const Tensor& out, float beta, const MatmulOptions& g) {
  const int64_t batch = std::max(batch_of(x), batch_of(y));
  const bool wide = out.dtype() == DType::F32 || out.dtype() == DType::F64;
  const Tensor acc = wide ? out : beta == 0.0f ? Tensor::empty(out.shape(), DType::F32, out.device()) : out.to(DType::F32);
  for (int64_t i = 0; i < batch; ++i) gemm_into(batch_entry(x, i), batch_entry(y, i), acc, i == 0 ? beta : 1.0f, g);
  if (!wide) {
    Tensor dst = out;
    dst.copy_(acc);
  }
}

MatmulOptions grad_options(float alpha, bool trans_a, bool trans_b) {
  MatmulOptions g;
  g.alpha = alpha, g.trans_a = trans_a, g.trans_b = trans_b;
  return g;
}

}  // namespace

Tensor matmul_grad_a(const Tensor& dc_in, const Tensor& a, const Tensor& b, const MatmulOptions& opt, Tensor da) {
  GradSetup s = grad_setup(dc_in, a, b, opt, a, std::move(da), "matmul_backward");
  const Tensor& dc = s.dc;
  // !trans_a: dA = dC op(B)^T;   trans_a: dA = op(B) dC^T  (dA is stored as op(A)^T).
  const Tensor& x = opt.trans_a ? b : dc;
  const Tensor& y = opt.trans_a ? dc : b;
  const MatmulOptions g = opt.trans_a ? grad_options(opt.alpha, opt.trans_b, true)
                                      : grad_options(opt.alpha, false, !opt.trans_b);
  if (batch_of(a) == 1 && dc.dim() == 3 && dc.size(0) > 1) {
    sum_over_batch(x, y, a.dim() == 3 ? s.out.select(0, 0) : s.out, s.beta, g);
  } else {
    gemm_into(x, y, s.out, s.beta, g);
  }
  return s.out;
}

Tensor matmul_grad_b(const Tensor& dc_in, const Tensor& a, const Tensor& b, const MatmulOptions& opt, Tensor db) {
  GradSetup s = grad_setup(dc_in, a, b, opt, b, std::move(db), "matmul_backward");
  const Tensor& dc = s.dc;
  // !trans_b: dB = op(A)^T dC;   trans_b: dB = dC^T op(A)  (dB is stored as op(B)^T).
  const Tensor& x = opt.trans_b ? dc : a;
  const Tensor& y = opt.trans_b ? a : dc;
  const MatmulOptions g = opt.trans_b ? grad_options(opt.alpha, true, opt.trans_a)
                                      : grad_options(opt.alpha, !opt.trans_a, false);
  if (batch_of(b) == 1 && dc.dim() == 3 && dc.size(0) > 1) {
    const Tensor out2 = b.dim() == 3 ? s.out.select(0, 0) : s.out;
    if (!opt.trans_a && a.dim() == 3) {  // the batch folds into K: one GEMM over (batch * m) rows
      const Tensor a2 = a.reshape({-1, a.size(-1)}), dc2 = dc.reshape({-1, dc.size(-1)});
      gemm_into(opt.trans_b ? dc2 : a2, opt.trans_b ? a2 : dc2, out2, s.beta, g);
    } else {
      sum_over_batch(x, y, out2, s.beta, g);
    }
  } else {
    gemm_into(x, y, s.out, s.beta, g);
  }
  return s.out;
}

MatmulGrads matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, const MatmulOptions& opt) {
  return {matmul_grad_a(dc, a, b, opt), matmul_grad_b(dc, a, b, opt)};
}

}  // namespace mpt::ops
