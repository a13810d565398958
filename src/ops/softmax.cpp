// src/ops/softmax.cpp: softmax and softmax + cross-entropy, forward and backward: checks, dispatch, CPU or CUDA kernel.
#include "mpt/ops/softmax.h"

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/softmax.h"
#include "core/device_errors.h"
#include "mpt/autograd/engine.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/pointwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/softmax.h"
#endif

namespace mpt::ops {

namespace {

using detail::visit_float;
namespace math = kernels::math;

DType stats_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

int64_t last_dim(const Tensor& x, const char* op) {
  MPT_CHECK(x.dim() >= 1, "[{}] expected at least one dimension, got {}", op, x.meta_str());
  return x.size(-1);
}

template <class F>
void visit_index(DType t, const char* op, F&& f) {
  if (t == DType::I64) return f(int64_t{});
  if (t == DType::I32) return f(int32_t{});
  MPT_THROW("[{}] targets must be i64 or i32, got {}", op, t);
}

struct CeShape {
  int64_t rows;
  int64_t vocab;   // the classes: the first `vocab` entries of the last dimension
  int64_t stride;  // the last dimension: elements from one row to the next (> vocab when padded)
};

CeShape check_ce(const Tensor& logits, const Tensor& targets, int64_t classes, const char* op) {
  detail::check_f64_on_cpu(logits, op);
  const int64_t stride = last_dim(logits, op);
  MPT_CHECK(stride >= 1, "[{}] the class dimension is empty: {}", op, logits.meta_str());
  MPT_CHECK(classes >= 0 && classes <= stride,
            "[{}] options.classes must be 0 (every entry of the last dimension) or in [1, {}] for logits {}, got {}",
            op, stride, logits.meta_str(), classes);
  const int64_t vocab = classes == 0 ? stride : classes;
  MPT_CHECK(targets.dtype() == DType::I64 || targets.dtype() == DType::I32, "[{}] targets must be i64 or i32, got {}",
            op, targets.meta_str());
  const Shape& ls = logits.shape();
  const Shape lead(ls.begin(), ls.end() - 1);
  MPT_CHECK(targets.shape() == lead, "[{}] targets must have shape {} for logits {}, got {}", op, shape_str(lead),
            logits.meta_str(), targets.meta_str());
  const int64_t rows = logits.numel() / stride;
  MPT_CHECK(logits.device().is_cpu() || rows <= 2147483647, "[{}] at most 2^31 - 1 rows on CUDA, got {}", op, rows);
  return {rows, vocab, stride};
}

[[noreturn]] void throw_bad_target(const Tensor& targets, int64_t row, const CeShape& shape, int64_t ignore_index,
                                   const char* op) {
  const int64_t value = targets.reshape({-1}).select(0, row).item<int64_t>();
  if (shape.stride == shape.vocab) {
    MPT_THROW("[{}] target {} at row {} is out of range [0, {}) and is not ignore_index {}", op, value, row,
              shape.vocab, ignore_index);
  }
  MPT_THROW("[{}] target {} at row {} is out of range [0, {}) ({} classes; the other {} of the last dimension's {} "
            "entries are padding) and is not ignore_index {}",
            op, value, row, shape.vocab, shape.vocab, shape.stride - shape.vocab, shape.stride, ignore_index);
}

// The first row whose target is outside [0, vocab) and not ignore_index (CPU targets), or -1.
int64_t first_bad_target(const Tensor& targets, int64_t vocab, int64_t ignore_index) {
  int64_t bad = -1;
  visit_index(targets.dtype(), "softmax_cross_entropy", [&](auto tag) {
    using I = decltype(tag);
    const I* t = targets.data<I>();
    for (int64_t r = 0; r < targets.numel() && bad < 0; ++r) {
      const int64_t v = static_cast<int64_t>(t[r]);
      if (v != ignore_index && !math::ce_target_in_range(v, vocab)) bad = r;
    }
  });
  return bad;
}

math::CrossEntropyReduction kernel_reduction(LossReduction r) {
  switch (r) {
    case LossReduction::None:
      return math::CrossEntropyReduction::None;
    case LossReduction::Sum:
      return math::CrossEntropyReduction::Sum;
    case LossReduction::Mean:
      break;
  }
  return math::CrossEntropyReduction::Mean;
}

Tensor ce_backward(const Tensor& dloss_in, const Tensor& logits_in, const Tensor& targets_in,
                   const CrossEntropySaved& saved, const CrossEntropyOptions& options, Tensor dlogits, bool in_place,
                   const char* op) {
  const Device dev =
      detail::check_same_device({&dloss_in, &logits_in, &targets_in, &saved.lse, &saved.valid_count}, op);
  const CeShape shape = check_ce(logits_in, targets_in, options.classes, op);
  const auto [rows, vocab, stride] = shape;
  const DType acc = stats_dtype(logits_in.dtype());
  MPT_CHECK(dloss_in.dtype() == acc, "[{}] dloss must be {} (the loss's dtype), got {}", op, acc, dloss_in.meta_str());
  if (options.reduction == LossReduction::None) {
    detail::check_shape(dloss_in, targets_in.shape(), "dloss", op);
  } else {
    MPT_CHECK(dloss_in.numel() == 1, "[{}] dloss of a reduced loss must have one element, got {}", op,
              dloss_in.meta_str());
  }
  MPT_CHECK(saved.lse.dtype() == acc && saved.valid_count.dtype() == acc,
            "[{}] saved tensors must be {}, got {} and {}", op, acc, saved.lse.meta_str(),
            saved.valid_count.meta_str());
  detail::check_shape(saved.lse, {rows}, "saved.lse", op);
  detail::check_shape(saved.valid_count, {1}, "saved.valid_count", op);
  const bool accumulate = dlogits.defined();
  if (in_place) {
    MPT_CHECK(logits_in.is_contiguous(), "[{}] in-place backward needs contiguous logits, got strides {}", op,
              shape_str(logits_in.strides()));
    dlogits = logits_in;
  } else if (accumulate) {
    detail::check_same_dtype({&logits_in, &dlogits}, op);
    MPT_CHECK(dlogits.device() == dev, "[{}] dlogits is {}, logits are {}", op, dlogits.meta_str(),
              logits_in.meta_str());
    detail::check_shape(dlogits, logits_in.shape(), "dlogits", op);
    MPT_CHECK(dlogits.is_contiguous(), "[{}] dlogits to accumulate into must be contiguous, got strides {}", op,
              shape_str(dlogits.strides()));
  } else {
    dlogits = Tensor::empty(logits_in.shape(), logits_in.dtype(), dev);
  }
  if (rows == 0) return dlogits;
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous(), dloss = dloss_in.contiguous();
  const Tensor lse = saved.lse.contiguous();
  if (dev.is_cpu()) {
    const int64_t bad = first_bad_target(targets, vocab, options.ignore_index);
    if (bad >= 0) throw_bad_target(targets, bad, shape, options.ignore_index, op);
  }
  visit_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using F = math::opmath_t<T>;
    visit_index(targets.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      math::CrossEntropyBackwardParams<T, I> p;
      p.logits = logits.data<T>();
      p.targets = targets.data<I>();
      p.lse = lse.data<F>();
      p.dloss = dloss.data<F>();
      p.divisor = options.reduction == LossReduction::Mean ? saved.valid_count.data<F>() : nullptr;
      p.dlogits = dlogits.data<T>();
      p.dloss_stride = options.reduction == LossReduction::None ? 1 : 0;
      p.rows = rows;
      p.vocab = vocab;
      p.row_stride = stride;
      p.ignore_index = options.ignore_index;
      p.accumulate = accumulate && !in_place;
      if (dev.is_cpu()) {
        kernels::cpu::cross_entropy_backward(p);
      } else if constexpr (!std::is_same_v<T, double>) {
        MPT_CUDA_KERNEL(kernels::cuda::cross_entropy_backward(p, static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    });
  });
  return dlogits;
}

// options.gradient: one element of the loss's dtype on its device, for a reduced loss.
void check_known_gradient(const Tensor& gradient, DType acc, Device dev, LossReduction reduction, const char* op) {
  MPT_CHECK(reduction != LossReduction::None,
            "[{}] options.gradient needs a reduced loss (Mean or Sum): an unreduced loss has a gradient per row", op);
  MPT_CHECK(gradient.numel() == 1 && gradient.dtype() == acc && gradient.device() == dev,
            "[{}] options.gradient must be one element of {} on {} (the loss's dtype and device), got {}", op, acc,
            dev.str(), gradient.meta_str());
}

// The fused path's backward: the gradient written in the forward for `known`, as it is when g is that tensor (the
// caller seeded backward with it), else rescaled by g / known in the loss's dtype.
Tensor known_gradient_backward(const Tensor& g, const Tensor& dlogits, const Tensor& known) {
  if (!g.defined()) return {};
  if (g.shares_storage(known) && g.offset() == known.offset()) return dlogits;
  MPT_CHECK(g.numel() == 1 && g.dtype() == known.dtype(),
            "[softmax_cross_entropy_backward] dloss of a reduced loss must be one element of {}, got {}",
            known.dtype(), g.meta_str());
  const Tensor ratio = div(g.reshape({}), known.reshape({}));
  return mul(dlogits.to(known.dtype()), ratio).to(dlogits.dtype());
}

}  // namespace

Tensor softmax(const Tensor& x_in) {
  const detail::GradRecorder grad({&x_in});
  const Device dev = detail::check_same_device({&x_in}, "softmax");
  detail::check_f64_on_cpu(x_in, "softmax");
  const int64_t cols = last_dim(x_in, "softmax");
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / cols;
  MPT_CHECK(dev.is_cpu() || rows <= 2147483647, "[softmax] at most 2^31 - 1 rows on CUDA, got {}", rows);
  visit_float(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::softmax_rows(x.data<T>(), y.data<T>(), rows, cols);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::softmax_rows(x.data<T>(), y.data<T>(), rows, cols,
                                                  static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  grad.record("SoftmaxBackward", {&y}, [y = y.detach()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{softmax_backward(g[0], y)};
  });
  return y;
}

Tensor softmax_backward(const Tensor& dy_in, const Tensor& y_in, Tensor dx) {
  const char* op = "softmax_backward";
  const bool accumulate = dx.defined();
  const Device dev =
      accumulate ? detail::check_same_device({&dy_in, &y_in, &dx}, op) : detail::check_same_device({&dy_in, &y_in}, op);
  detail::check_same_dtype({&y_in, &dy_in}, op);
  detail::check_shape(dy_in, y_in.shape(), "dy", op);
  detail::check_f64_on_cpu(y_in, op);
  const int64_t cols = last_dim(y_in, op);
  if (accumulate) {
    detail::check_same_dtype({&y_in, &dx}, op);
    detail::check_shape(dx, y_in.shape(), "dx", op);
    MPT_CHECK(dx.is_contiguous(), "[{}] the gradient to accumulate into must be contiguous, got strides {}", op,
              shape_str(dx.strides()));
  } else {
    dx = Tensor::empty(y_in.shape(), y_in.dtype(), dev);
  }
  if (y_in.numel() == 0) return dx;
  const int64_t rows = y_in.numel() / cols;
  MPT_CHECK(dev.is_cpu() || rows <= 2147483647, "[{}] at most 2^31 - 1 rows on CUDA, got {}", op, rows);
  const Tensor dy = dy_in.contiguous(), y = y_in.contiguous();
  visit_float(y.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::softmax_backward_rows(dy.data<T>(), y.data<T>(), dx.data<T>(), rows, cols, accumulate);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::softmax_backward_rows(dy.data<T>(), y.data<T>(), dx.data<T>(), rows, cols,
                                                           accumulate,
                                                           static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  return dx;
}

CrossEntropyResult softmax_cross_entropy(Tensor logits_in, const Tensor& targets_in,
                                         const CrossEntropyOptions& options) {
  const char* op = "softmax_cross_entropy";
  const detail::GradRecorder grad({&logits_in});
  const Device dev = detail::check_same_device({&logits_in, &targets_in}, op);
  const CeShape shape = check_ce(logits_in, targets_in, options.classes, op);
  const auto [rows, vocab, stride] = shape;
  const DType acc = stats_dtype(logits_in.dtype());
  if (options.gradient.defined()) check_known_gradient(options.gradient, acc, dev, options.reduction, op);
  // The fused classifier (options.gradient): in place when this call holds the only reference to the logits.
  const bool fused = grad && options.gradient.defined();
  const bool in_place = fused && logits_in.is_contiguous() && logits_in.storage().use_count() == 1;
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const Tensor row_loss = Tensor::empty({rows}, acc, dev);
  CrossEntropyResult out{
      options.reduction == LossReduction::None ? row_loss.view(targets.shape()) : Tensor::empty({}, acc, dev),
      {Tensor::empty({rows}, acc, dev), Tensor::empty({1}, acc, dev)}};
  const Tensor bad_row = Tensor::empty({1}, DType::I64, dev);
  const Tensor dlogits = !fused ? Tensor() : in_place ? logits : Tensor::empty(logits.shape(), logits.dtype(), dev);
  // The fused path overwrites the logits, so on the CPU a bad target is found before (the CUDA kernels only report).
  if (fused && dev.is_cpu()) {
    const int64_t bad = first_bad_target(targets, vocab, options.ignore_index);
    if (bad >= 0) throw_bad_target(targets, bad, shape, options.ignore_index, op);
  }
  visit_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using F = math::opmath_t<T>;
    visit_index(targets.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      math::CrossEntropyForwardParams<T, I> f;
      f.logits = logits.data<T>();
      f.targets = targets.data<I>();
      f.loss = row_loss.data<F>();
      f.lse = out.saved.lse.data<F>();
      f.rows = rows;
      f.vocab = vocab;
      f.row_stride = stride;
      f.ignore_index = options.ignore_index;
      math::CrossEntropyReduceParams<T, I> r;
      r.row_loss = row_loss.data<F>();
      r.targets = f.targets;
      r.loss = options.reduction == LossReduction::None ? nullptr : out.loss.data<F>();
      r.count = out.saved.valid_count.data<F>();
      r.bad_row = bad_row.data<int64_t>();
      if (!dev.is_cpu() && options.check_targets) r.errors = device_error_sink(dev, kernels::DeviceErrorOp::CrossEntropy);
      r.rows = rows;
      r.vocab = vocab;
      r.ignore_index = options.ignore_index;
      r.reduction = kernel_reduction(options.reduction);
      if (fused) {
        // Mean's divisor first (the count of counted rows, from the targets alone; it reports a bad target), then
        // every row's loss, lse and gradient in one pass, then the loss's reduction.
        const bool mean = options.reduction == LossReduction::Mean;
        math::CrossEntropyReduceParams<T, I> count = r;
        count.row_loss = nullptr;
        count.loss = nullptr;
        count.reduction = math::CrossEntropyReduction::None;
        if (mean) r.errors = {};
        math::CrossEntropyFusedParams<T, I> fb;
        fb.forward = f;
        fb.dloss = options.gradient.data<F>();
        fb.divisor = mean ? r.count : nullptr;
        fb.dlogits = dlogits.data<T>();
        if (dev.is_cpu()) {
          if (mean) kernels::cpu::cross_entropy_reduce(count);
          kernels::cpu::cross_entropy_forward_backward(fb);
          kernels::cpu::cross_entropy_reduce(r);
        } else if constexpr (!std::is_same_v<T, double>) {
          if (mean) {
            MPT_CUDA_KERNEL(
                kernels::cuda::cross_entropy_reduce(count, static_cast<cudaStream_t>(detail::stream_of(dev))));
          }
          MPT_CUDA_KERNEL(
              kernels::cuda::cross_entropy_forward_backward(fb, static_cast<cudaStream_t>(detail::stream_of(dev))));
          MPT_CUDA_KERNEL(kernels::cuda::cross_entropy_reduce(r, static_cast<cudaStream_t>(detail::stream_of(dev))));
        }
      } else if (dev.is_cpu()) {
        kernels::cpu::cross_entropy_forward(f);
        kernels::cpu::cross_entropy_reduce(r);
      } else if constexpr (!std::is_same_v<T, double>) {
        MPT_CUDA_KERNEL(kernels::cuda::cross_entropy_forward(f, static_cast<cudaStream_t>(detail::stream_of(dev))));
        MPT_CUDA_KERNEL(kernels::cuda::cross_entropy_reduce(r, static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    });
  });
  if (dev.is_cpu()) {
    const int64_t bad = bad_row.item<int64_t>();
    if (bad >= 0) throw_bad_target(targets, bad, shape, options.ignore_index, op);
  }
  if (fused) {
    // The gradient is final unless the backward brings another upstream value than the one promised.
    grad.record("SoftmaxCrossEntropyBackward", {&out.loss},
                [dlogits = dlogits.detach(), known = options.gradient.detach()](const std::vector<Tensor>& g) {
                  return std::vector<Tensor>{known_gradient_backward(g[0], dlogits, known)};
                });
    return out;
  }
  // The fused classifier, llm.c style: the gradient is written over the logits when nothing else holds them (GPT's
  // loss: the LM head's output is read only here) and this graph will not run again, saving a [rows, V] buffer
  // (GPT-2 at 8 x 1024 tokens: 0.8 GB in BF16). A caller who kept the logits, or a view of them, gets a fresh
  // buffer, as in PyTorch's gradient stealing. The loss and lse come from one pass over the logits, the gradient
  // from a second, in place: the upstream gradient (loss scale, accumulation) is known only then (unless given as
  // options.gradient, above). `options` carries `classes` to the backward: a padded gradient has the logits' full
  // shape, 0 in the padding columns.
  grad.record("SoftmaxCrossEntropyBackward", {&out.loss},
              [logits = logits.detach(), targets, saved = out.saved, options](const std::vector<Tensor>& g) {
                const bool sole = logits.is_contiguous() && logits.storage().use_count() == 1 &&
                                  !autograd::retaining_graph();
                return std::vector<Tensor>{
                    sole ? softmax_cross_entropy_backward_in_place(g[0], logits, targets, saved, options)
                         : softmax_cross_entropy_backward(g[0], logits, targets, saved, options)};
              });
  return out;
}

Tensor softmax_cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                                      const CrossEntropySaved& saved, const CrossEntropyOptions& options,
                                      Tensor dlogits) {
  return ce_backward(dloss, logits, targets, saved, options, std::move(dlogits), false,
                     "softmax_cross_entropy_backward");
}

Tensor softmax_cross_entropy_backward_in_place(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                                               const CrossEntropySaved& saved, const CrossEntropyOptions& options) {
  return ce_backward(dloss, logits, targets, saved, options, Tensor(), true, "softmax_cross_entropy_backward_in_place");
}

}  // namespace mpt::ops
