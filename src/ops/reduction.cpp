// src/ops/reduction.cpp: sum/mean over an axis, sum_to_shape, global L2 norm and the finite check.
#include "mpt/ops/reduction.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/reduction.h"
#include "mpt/ops/elementwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/optim.h"
#include "kernels/cuda/reduction.h"
#endif

namespace mpt::ops {

using detail::visit_float;
using kernels::math::ReduceShape;

namespace {

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// out (+)= sum(x) / divisor over the middle axis of `shape`; x contiguous, out contiguous with
// outer * inner elements.
void run_sum(const Tensor& x, const Tensor& out, const ReduceShape& shape, double divisor, bool accumulate,
             const char* op) {
  const Device dev = x.device();
  visit_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::sum_axis(x.data<T>(), out.data<T>(), shape, divisor, accumulate);
    } else if constexpr (!std::is_same_v<T, double>) {
#if defined(MPT_WITH_CUDA)
      const Tensor workspace =
          Tensor::empty({static_cast<int64_t>(kernels::cuda::sum_axis_workspace(shape))}, DType::F32, dev);
      MPT_CUDA_KERNEL(kernels::cuda::sum_axis(x.data<T>(), out.data<T>(), shape, static_cast<float>(divisor),
                                              accumulate, workspace.data<float>(),
                                              static_cast<cudaStream_t>(detail::stream_of(dev))));
#else
      MPT_CUDA_KERNEL(0);
#endif
    }
  });
}

Tensor reduce_dim(const Tensor& x_in, int64_t dim, bool keepdim, bool mean, const char* op) {
  const Device dev = detail::check_same_device({&x_in}, op);
  detail::check_f64_on_cpu(x_in, op);
  MPT_CHECK(x_in.dim() >= 1, "[{}] cannot reduce the 0-d tensor {} over dimension {}", op, x_in.meta_str(), dim);
  const size_t d = static_cast<size_t>(wrap_dim(dim, x_in.dim(), op));
  const Tensor x = x_in.contiguous();
  const Shape& s = x.shape();
  const ReduceShape shape{product(s, 0, d), s[d], product(s, d + 1, s.size())};
  Shape out_shape = s;
  if (keepdim) {
    out_shape[d] = 1;
  } else {
    out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(d));
  }
  const Tensor out = Tensor::empty(out_shape, x.dtype(), dev);
  run_sum(x, out, shape, mean ? static_cast<double>(shape.len) : 1.0, false, op);
  return out;
}

void check_list_device(const std::vector<Tensor>& tensors, const char* op) {
  for (size_t k = 0; k < tensors.size(); ++k) {
    MPT_CHECK(tensors[k].defined(), "[{}] tensor {} of the list is undefined", op, k);
    MPT_CHECK(tensors[k].device() == tensors[0].device(), "[{}] all tensors must be on one device: tensor {} is {}, "
              "tensor 0 is {}", op, k, tensors[k].meta_str(), tensors[0].meta_str());
  }
}

}  // namespace

namespace {

// The gradient of a sum (or mean, with scale 1/n) over `dim` of a tensor of `shape`: dy broadcast back.
Tensor spread(const Tensor& dy, const Shape& shape, int64_t dim, bool keepdim, double scale) {
  Tensor g = dy;
  if (dim >= 0 && !keepdim) g = g.unsqueeze(dim);
  Tensor dx = Tensor::empty(shape, dy.dtype(), dy.device());
  dx.copy_(scale == 1.0 ? g : ops::scale(g, scale));
  return dx;
}

Tensor reduce_recorded(const Tensor& x, int64_t dim, bool keepdim, bool mean, const char* op) {
  const detail::GradRecorder grad({&x});
  Tensor y = reduce_dim(x, dim, keepdim, mean, op);
  if (grad) {
    const int64_t d = dim < 0 ? dim + x.dim() : dim;
    const double scale = mean ? 1.0 / static_cast<double>(x.size(d)) : 1.0;
    grad.record(mean ? "MeanBackward" : "SumBackward", {&y},
                [shape = x.shape(), d, keepdim, scale](const std::vector<Tensor>& g) {
                  return std::vector<Tensor>{spread(g[0], shape, d, keepdim, scale)};
                });
  }
  return y;
}

}  // namespace

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) { return reduce_recorded(x, dim, keepdim, false, "sum"); }

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) { return reduce_recorded(x, dim, keepdim, true, "mean"); }

Tensor sum(const Tensor& x) {
  const detail::GradRecorder grad({&x});
  detail::check_same_device({&x}, "sum");
  Tensor y = reduce_dim(x.reshape({-1}), 0, false, false, "sum");
  grad.record("SumBackward", {&y}, [shape = x.shape()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{spread(g[0], shape, -1, true, 1.0)};
  });
  return y;
}

Tensor mean(const Tensor& x) {
  MPT_CHECK(x.defined(), "[mean] undefined tensor");
  return mean(x.reshape({-1}), 0);
}

Tensor sum_to_shape(const Tensor& x_in, const Shape& shape, Tensor out) {
  const char* op = "sum_to_shape";
  const Device dev = out.defined() ? detail::check_same_device({&x_in, &out}, op) : detail::check_same_device({&x_in}, op);
  detail::check_f64_on_cpu(x_in, op);
  MPT_CHECK(shape.size() <= x_in.shape().size() && broadcast_shapes(shape, x_in.shape(), op) == x_in.shape(),
            "[{}] shape {} does not broadcast to {}", op, shape_str(shape), x_in.meta_str());
  if (out.defined()) {
    detail::check_same_dtype({&x_in, &out}, op);
    detail::check_shape(out, shape, "out", op);
    MPT_CHECK(out.is_contiguous(), "[{}] the tensor to accumulate into must be contiguous, got strides {}", op,
              shape_str(out.strides()));
  }
  // Dims of x where `shape` (padded with leading 1s) has size 1 are summed; runs of adjacent ones are
  // summed in one pass as a single axis.
  const Shape& xs = x_in.shape();
  const size_t rank = xs.size(), lead = rank - shape.size();
  std::vector<bool> reduced(rank);
  for (size_t d = 0; d < rank; ++d) reduced[d] = d < lead || shape[d - lead] == 1;
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t d = 0; d < rank; ++d) {
    if (!reduced[d] || xs[d] == 1) continue;
    size_t end = d;
    while (end < rank && reduced[end]) ++end;
    runs.emplace_back(d, end);
    d = end;
  }
  Tensor cur = x_in.contiguous();
  Shape cur_shape = xs;
  if (runs.empty()) runs.emplace_back(0, 0);  // nothing to sum: one pass over an axis of length 1 copies
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto [begin, end] = runs[r];
    const ReduceShape rs{product(cur_shape, 0, begin), product(cur_shape, begin, end),
                         product(cur_shape, end, rank)};
    for (size_t d = begin; d < end; ++d) cur_shape[d] = 1;
    const bool last = r + 1 == runs.size();
    const Tensor dst = last && out.defined() ? out : Tensor::empty(last ? shape : cur_shape, x_in.dtype(), dev);
    run_sum(cur, dst, rs, 1.0, last && out.defined(), op);
    cur = dst;
  }
  return cur;
}

Tensor global_l2_norm(const std::vector<Tensor>& tensors) {
  const char* op = "global_l2_norm";
  if (tensors.empty()) return Tensor::zeros({}, DType::F32);
  check_list_device(tensors, op);
  const Device dev = tensors[0].device();
  const bool f64 = tensors[0].dtype() == DType::F64;
  for (size_t k = 0; k < tensors.size(); ++k) {
    detail::check_f64_on_cpu(tensors[k], op);
    MPT_CHECK((tensors[k].dtype() == DType::F64) == f64, "[{}] f64 tensors cannot be mixed with others: tensor {} is "
              "{}, tensor 0 is {}", op, k, tensors[k].meta_str(), tensors[0].meta_str());
  }
  if (dev.is_cpu()) {
    double total64 = 0;
    float total32 = 0;
    for (const Tensor& t_in : tensors) {
      const Tensor t = t_in.contiguous();
      visit_float(t.dtype(), op, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, double>) {
          total64 += kernels::cpu::sum_squares(t.data<T>(), t.numel());
        } else {
          total32 += kernels::cpu::sum_squares(t.data<T>(), t.numel());
        }
      });
    }
    return f64 ? Tensor::full({}, std::sqrt(total64), DType::F64) : Tensor::full({}, std::sqrt(total32), DType::F32);
  }
#if defined(MPT_WITH_CUDA)
  // One multi-tensor launch per dtype (and per table of tensors) writes a partial sum per 2048 elements; one block
  // sums them (kernels/cuda/optim.h): a handful of launches however many parameters there are.
  const auto stream = static_cast<cudaStream_t>(detail::stream_of(dev));
  std::vector<Tensor> contiguous;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    MPT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
              "[{}] expected f32, bf16 or f16 tensors on {}, got {}", op, dev.str(), t.meta_str());
    contiguous.push_back(t.contiguous());
    sizes.push_back(t.numel());
  }
  const int64_t count = static_cast<int64_t>(tensors.size());
  const Tensor partials =
      Tensor::empty({std::max<int64_t>(kernels::cuda::sum_squares_partials(sizes.data(), count), 1)}, DType::F32, dev);
  int64_t offset = 0;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<const void*> xs;
    std::vector<int64_t> ns;
    for (size_t k = 0; k < contiguous.size(); ++k) {
      if (contiguous[k].dtype() != dt) continue;
      xs.push_back(contiguous[k].data_ptr());
      ns.push_back(sizes[k]);
    }
    if (xs.empty()) continue;
    const int64_t m = static_cast<int64_t>(xs.size());
    visit_float(dt, op, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, double>) {
        MPT_CUDA_KERNEL(kernels::cuda::sum_squares_multi(reinterpret_cast<const T* const*>(xs.data()), ns.data(), m,
                                                         partials.data<float>() + offset, stream));
      }
    });
    offset += kernels::cuda::sum_squares_partials(ns.data(), m);
  }
  Tensor norm = Tensor::empty({}, DType::F32, dev);
  MPT_CUDA_KERNEL(kernels::cuda::sqrt_of_sum(partials.data<float>(), offset, norm.data<float>(), stream));
  return norm;
#else
  MPT_CUDA_KERNEL(0);
#endif
}

Tensor all_finite_flag(const std::vector<Tensor>& tensors) {
  const char* op = "all_finite";
  if (tensors.empty()) return Tensor::ones({}, DType::U8);
  check_list_device(tensors, op);
  const Device dev = tensors[0].device();
  const Tensor flag = Tensor::ones({}, DType::U8, dev);
  bool finite = true;
  for (const Tensor& t_in : tensors) {
    if (is_integral(t_in.dtype())) continue;
    const Tensor t = t_in.contiguous();
    visit_float(t.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      if (dev.is_cpu()) {
        finite = finite && kernels::cpu::all_finite(t.data<T>(), t.numel());
      } else if constexpr (!std::is_same_v<T, double>) {
        MPT_CUDA_KERNEL(kernels::cuda::check_finite(t.data<T>(), t.numel(), flag.data<uint8_t>(),
                                                    static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    });
  }
  if (dev.is_cpu() && !finite) flag.data<uint8_t>()[0] = 0;
  return flag;
}

bool all_finite(const std::vector<Tensor>& tensors) { return all_finite_flag(tensors).item<int>() != 0; }

}  // namespace mpt::ops
