// src/ops/dispatch.h: the checks and the one dtype switch every op runs before calling its kernel.
#pragma once

#include <initializer_list>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/core/tensor.h"

#if defined(MPT_WITH_CUDA)
#include "backend/cuda/check.h"
#endif

namespace mpt::ops::detail {

// Calls f(T{}) for the storage types arithmetic ops support: f32, f64 (CPU reference), f16, bf16.
template <class F>
decltype(auto) visit_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    default: break;
  }
  MPT_THROW("[{}] expected a f32, f64, f16 or bf16 tensor, got {}", op, t);
}

// All tensors defined, on one device; returns that device.
Device check_same_device(std::initializer_list<const Tensor*> tensors, const char* op);
// Same dtype as the first.
void check_same_dtype(std::initializer_list<const Tensor*> tensors, const char* op);
void check_shape(const Tensor& t, const Shape& expected, const char* what, const char* op);
// f64 tensors exist for CPU reference checks only.
void check_f64_on_cpu(const Tensor& t, const char* op);

// A binary op's operands, contiguous, and the period of b: b's shape without leading 1s is a suffix of a's shape
// (bias [C] over [N, C], same shape, ...) -> b is used as it is; otherwise b is expanded to a's shape first. Checks one
// device, one dtype, and that b broadcasts to a's shape.
struct BinaryPlan {
  Tensor a;
  Tensor b;
  int64_t period;
};
BinaryPlan plan_binary(const Tensor& a, const Tensor& b, const char* op);

// NumPy broadcasting of both operands: when a must grow to the common shape, a.expand(common) (a view, recorded by
// autograd, whose backward sums the gradient back to a's shape); otherwise an undefined tensor. Throws, naming op and
// both shapes, when they do not broadcast.
Tensor expand_left(const Tensor& a, const Tensor& b, const char* op);

// The native stream ops on `device` run on (cudaStream_t; null on the CPU); Stream::current makes a CUDA `device` the
// calling thread's current device, where the op's kernels then launch.
void* stream_of(Device device);

// An op's autograd bookkeeping, declared first thing in the op: decides once whether the op records a node (grad
// mode on and an input requires grad), and turns recording off for the op's body, so the ops it calls internally
// record nothing. record() then links the op's outputs to one node whose backward is `fn`.
class GradRecorder {
 public:
  explicit GradRecorder(std::vector<const Tensor*> inputs)
      : inputs_(std::move(inputs)), active_(autograd::any_requires_grad(inputs_)) {}
  explicit operator bool() const { return active_; }
  void record(std::string name, const std::vector<Tensor*>& outputs, autograd::BackwardFn fn) const {
    if (active_) autograd::attach(std::make_shared<autograd::FunctionNode>(std::move(name), std::move(fn)), inputs_,
                                  outputs);
  }
  // A backward that may add into the gradients already waiting for the inputs (autograd::Node::apply_partial).
  void record(std::string name, const std::vector<Tensor*>& outputs, autograd::PartialBackwardFn fn) const {
    if (active_) autograd::attach(std::make_shared<autograd::FunctionNode>(std::move(name), std::move(fn)), inputs_,
                                  outputs);
  }

 private:
  std::vector<const Tensor*> inputs_;
  bool active_;
  autograd::NoGradGuard no_grad_;  // after active_: the decision is made with the caller's grad mode
};

// A bias's copy in the dtype a GEMM's epilogue reads (LinearOptions::compute_bias and its kin): checked to be a 1-d
// float tensor of bias's shape on its device when defined (`name` in the error), and refused without a bias.
void check_compute_bias(const Tensor& compute_bias, const Tensor& bias, const char* op, const char* name);
// What the GEMM adds: compute_bias when defined, else bias (detached; undefined when there is none).
inline Tensor epilogue_bias(const Tensor& compute_bias, const Tensor& bias) {
  if (compute_bias.defined()) return compute_bias.detach();
  return bias.defined() ? bias.detach() : Tensor{};
}

// A weight gradient dW = dy^T x (2-d operands) in `w_dtype`, with `bias_grad` as MatmulOptions' (dy's column sums),
// added into `into` by the GEMM (beta = 1) when `into` is the leaf's gradient the engine offered
// (autograd::Node::apply_partial: a later micro-batch) and fits (w_dtype, [dy cols, x cols], contiguous, dy's
// device), else a new tensor. The product is FP32 either way and the addition rounds once, as AccumulateGrad's add
// did: the same bits for f32 gradients (src/ops/linear.cpp).
Tensor weight_grad(const Tensor& dy, const Tensor& x, DType w_dtype, const Tensor& into, const Tensor& bias_grad = {});
// The dtype a weight-gradient GEMM over `in` operands writes for `weight`: its gradient dtype
// (autograd::grad_dtype: BF16 gradients of FP32 masters are written and accumulated by the GEMM in BF16) where the
// GEMM can write it (half or FP8 operands), else the operands' own (f32 operands: f32, rounded by AccumulateGrad).
DType weight_grad_dtype(DType in, const Tensor& weight);
// Whether a gradient the engine offered (`into`, possibly undefined) can take a GEMM's [rows, cols] product of
// `dtype` on `device`: weight_grad's rule, and fp8::detail::gemm_tn's for the FP8 weight gradients. The GEMM adds
// into it (beta = 1), or overwrites it (beta = 0: offer_beta) when it is a leaf's fresh destination.
bool adds_into(const Tensor& into, DType dtype, int64_t rows, int64_t cols, Device device);
// The beta of a GEMM writing into an offered gradient: 0 for a leaf's fresh destination (autograd::is_fresh_offer,
// whatever it holds is overwritten), 1 for a gradient to add into.
float offer_beta(const Tensor& into);
// Where a backward writes a small gradient of input `input` it makes whole (a bias gradient from a GEMM epilogue or
// a fused pass, a norm's parameter gradients): the leaf's destination (autograd::offer: a fresh offer, no copy into
// it afterwards) when it is a contiguous `shape` tensor of `dtype` on `device`, else a new tensor.
Tensor fresh_or_empty(std::vector<Tensor>& partial, size_t input, const Shape& shape, DType dtype, Device device);
// The bias gradient of a Linear: the column sums of a 2-d dy in FP32 (f64 for f64), never rounded to dy's dtype
// (src/ops/linear.cpp).
Tensor bias_grad(const Tensor& dy);
// The column sums of x's 2-d view (rows = numel / last dim; f32, bf16 or f16) as an [cols] tensor of `out` (f32,
// bf16 or f16): FP32 sums in the tile order of the fused cast + transpose + dbias (kernels/math/quantize.h), rounded
// once; the same bits on the CPU and CUDA (src/ops/cast.cpp).
Tensor column_sums(const Tensor& x, DType out);

// The GELU kernels on outputs the caller gives (src/ops/activation.cpp; contiguous tensors of one shape, dtype and
// device): y = gelu(x); dx = dy * gelu'(x), added into dx when `accumulate` (dx may be dy: elementwise, in place).
// ops::gelu and gelu_backward run them, and so do the GEMMs whose GELU epilogue cuBLASLt refuses (ops/matmul.cpp).
void gelu_into(const Tensor& x, const Tensor& y);
void gelu_backward_into(const Tensor& dy, const Tensor& x, const Tensor& dx, bool accumulate);

}  // namespace mpt::ops::detail

// MPT_CUDA_KERNEL(expr): runs a kernels::cuda launcher and checks its status; in a build without CUDA it is
// unreachable (no CUDA tensor can exist) and throws.
#if defined(MPT_WITH_CUDA)
#define MPT_CUDA_KERNEL(expr) MPT_CUDA_CHECK(expr)
#else
#define MPT_CUDA_KERNEL(expr) MPT_THROW("[cuda] {}", ::mpt::cuda_backend::kNotBuilt)
#endif
