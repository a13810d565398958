// src/ops/arg_reduce.cpp: max / min with indices, argmax / argmin (forward beside backward) and var.
#include "kernels/cpu/pointwise.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/operators.h"
#include "mpt/ops/pointwise.h"
#include "mpt/ops/reduction.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/pointwise.h"
#endif

namespace mpt::ops {

using detail::visit_float;
using kernels::math::ReduceShape;

namespace {

ValuesIndices arg_reduce(const Tensor& x_in, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  const detail::GradRecorder grad({&x_in});
  const Device dev = detail::check_same_device({&x_in}, op);
  detail::check_f64_on_cpu(x_in, op);
  MPT_CHECK(x_in.dim() >= 1, "[{}] cannot reduce the 0-d tensor {} over dimension {}", op, x_in.meta_str(), dim);
  const int64_t d = wrap_dim(dim, x_in.dim(), op);
  MPT_CHECK(x_in.size(d) >= 1, "[{}] dimension {} of {} is empty: there is no {}", op, d, x_in.meta_str(), op);
  const Tensor x = x_in.contiguous();
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= s[static_cast<size_t>(k)];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= s[static_cast<size_t>(k)];
  const ReduceShape shape{outer, s[static_cast<size_t>(d)], inner};
  Shape out_shape = s;
  out_shape[static_cast<size_t>(d)] = 1;
  ValuesIndices r{Tensor::empty(out_shape, x.dtype(), dev), Tensor::empty(out_shape, DType::I64, dev)};
  visit_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::arg_reduce(is_max, x.data<T>(), r.values.data<T>(), r.indices.data<int64_t>(), shape);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::arg_reduce(is_max, x.data<T>(), r.values.data<T>(), r.indices.data<int64_t>(),
                                                shape, static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  // Backward: dy where the position along dim equals the saved index, 0 elsewhere (positions compared in f32, exact
  // up to 2^24).
  const Tensor index = r.indices;
  if (!keepdim) {
    r.values = r.values.squeeze(d);
    r.indices = r.indices.squeeze(d);
  }
  grad.record(is_max ? "MaxBackward" : "MinBackward", {&r.values},
              [d, keepdim, index, shape = s](const std::vector<Tensor>& g) {
                if (!g[0].defined()) return std::vector<Tensor>{Tensor{}};
                const Tensor dy = keepdim ? g[0] : g[0].unsqueeze(d);
                Shape along(shape.size(), 1);
                along[static_cast<size_t>(d)] = shape[static_cast<size_t>(d)];
                const Tensor pos = Tensor::arange(0, static_cast<double>(shape[static_cast<size_t>(d)]), 1, DType::F32,
                                                  dy.device()).reshape(along);
                const Tensor hit = eq(pos, index.to(DType::F32)).expand(shape);
                return std::vector<Tensor>{where(hit, dy.expand(shape), scalar_like(dy, 0))};
              });
  return r;
}

}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return arg_reduce(x, dim, keepdim, true); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return arg_reduce(x, dim, keepdim, false); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  autograd::NoGradGuard no_grad;
  return arg_reduce(x, dim, keepdim, true).indices;
}

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  autograd::NoGradGuard no_grad;
  return arg_reduce(x, dim, keepdim, false).indices;
}

Tensor var(const Tensor& x, int64_t dim, bool keepdim, int64_t correction) {
  MPT_CHECK(x.defined() && x.dim() >= 1, "[var] expected a tensor of at least one dimension, got {}",
            x.defined() ? x.meta_str() : "an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "var");
  MPT_CHECK(correction >= 0, "[var] correction must be >= 0, got {}", correction);
  const DType wide = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor xf = x.to(wide);
  const Tensor centered = xf - mean(xf, d, true);
  // n - correction <= 0 gives inf or NaN, as in PyTorch.
  const double divisor = static_cast<double>(x.size(d) - correction);
  const Tensor v = sum(centered * centered, d, keepdim) / divisor;
  return v.to(x.dtype());
}

}  // namespace mpt::ops
