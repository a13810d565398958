// src/ops/cast.cpp: FP8 amax, quantize (given or current scale), cast + transpose, block quantize and dequantize: checks, dtype dispatch, CPU or CUDA kernels.
#include "mpt/ops/cast.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/activation.h"
#include "kernels/math/quantize.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/quantize.h"
#include "kernels/cuda/strided.h"
#endif

namespace mpt::ops {
namespace {

// Calls f(T{}) for the high-precision dtypes the quantizers read and the dequantizer writes.
template <class F>
decltype(auto) visit_wide(DType t, const char* op, const char* what, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    default: break;
  }
  MPT_THROW("[{}] expected {} to be f32, f16 or bf16, got {}", op, what, t);
}

template <class F>
decltype(auto) visit_fp8(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F8E4M3: return f(f8e4m3{});
    case DType::F8E5M2: return f(f8e5m2{});
    default: break;
  }
  MPT_THROW("[{}] expected an fp8 dtype (f8e4m3 or f8e5m2), got {}", op, t);
}

// The 2-d view of a tensor: rows = numel / last dim, cols = last dim (a 0-d tensor is 1 x 1).
kernels::math::Dims2 dims_of(const Tensor& t) {
  const int64_t cols = t.dim() == 0 ? 1 : t.size(t.dim() - 1);
  return {cols == 0 ? 0 : t.numel() / cols, cols};
}

void check_scalar_f32(const Tensor& t, Device dev, const char* what, const char* op) {
  MPT_CHECK(t.dtype() == DType::F32 && t.numel() == 1 && t.device() == dev,
            "[{}] {} must be an f32 tensor with one element on {}, got {}", op, what, dev.str(), t.meta_str());
}

// A fused bias gradient's output: [cols of x's 2-d view], contiguous, f32/bf16/f16, on x's device.
void check_dbias(const Tensor& dbias, const Tensor& x, Device dev, const char* op) {
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  MPT_CHECK(dbias.device() == dev && dbias.dim() == 1 && dbias.size(0) == cols && dbias.is_contiguous() &&
                (dbias.dtype() == DType::F32 || dbias.dtype() == DType::BF16 || dbias.dtype() == DType::F16),
            "[{}] dbias must be a contiguous [{}] f32, bf16 or f16 tensor on {} (x is {}), got {}", op, cols, dev.str(),
            x.meta_str(), dbias.meta_str());
}

// Checks x and the options, returns x's device.
Device check_quantize_args(const Tensor& x, DType fp8, const QuantizeOptions& o, const char* op) {
  const Device dev = detail::check_same_device({&x}, op);
  visit_wide(x.dtype(), op, "the input", [](auto) {});
  visit_fp8(fp8, op, [](auto) {});
  if (o.scale.defined()) check_scalar_f32(o.scale, dev, "the scale", op);
  if (o.amax.defined()) check_scalar_f32(o.amax, dev, "the amax output", op);
  if (o.dbias.defined()) {
    MPT_CHECK(std::string_view(op) == "quantize_fp8_transpose",
              "[{}] dbias is fused into quantize_fp8_transpose only (its tiles see every column)", op);
    check_dbias(o.dbias, x, dev, op);
  }
  MPT_CHECK(!o.amax_accumulate || (o.amax.defined() && o.amax_ignore_nan),
            "[{}] amax_accumulate folds into the amax output: it needs `amax` and amax_ignore_nan", op);
  MPT_CHECK(o.margin >= 0 && o.margin <= 64, "[{}] margin must be in [0, 64], got {}", op, o.margin);
  MPT_CHECK(!o.gelu || !o.dbias.defined(), "[{}] gelu quantizes gelu(x), which takes no dbias", op);
  return dev;
}

template <class Q>
kernels::math::ScaleFromAmax current_scaling(const QuantizeOptions& o) {
  return {kernels::math::fp8_max<Q>(), o.margin, o.power_of_2, o.amax_epsilon};
}

float* amax_ptr(const QuantizeOptions& o) { return o.amax.defined() ? o.amax.data<float>() : nullptr; }

// The CPU's amax; ignore_nan: TE's (NaN elements skipped), by a scalar pass only when the fast one found a NaN.
template <class T>
float cpu_amax(const T* x, int64_t n, bool ignore_nan) {
  const float a = kernels::cpu::amax(x, n);
  if (!ignore_nan || !std::isnan(a)) return a;
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, kernels::math::amax_bits(x[i], true));
  return kernels::math::amax_from_bits(m);
}

#if defined(MPT_WITH_CUDA)
// The CUDA launches of quantize_per_tensor; returns the first failure.
template <class Q, class T>
cudaError_t quantize_per_tensor_cuda(const Tensor& x, const Tensor& q, const Tensor& qt, const Tensor& scale_inv,
                                     const QuantizeOptions& o) {
  const auto stream = static_cast<cudaStream_t>(detail::stream_of(x.device()));
  Tensor scale = o.scale;
  if (!scale.defined()) {  // current scaling: an amax pass, then the scale, both on the device
    const Tensor amax = Tensor::empty({}, DType::F32, x.device());
    scale = Tensor::empty({}, DType::F32, x.device());
    cudaError_t e = kernels::cuda::amax(x.data<T>(), x.numel(), amax.data<float>(), stream, o.amax_ignore_nan, o.gelu);
    if (e == cudaSuccess) {
      e = kernels::cuda::scale_from_amax(amax.data<float>(), scale.data<float>(), nullptr, current_scaling<Q>(o), stream);
    }
    if (e != cudaSuccess) return e;
  }
  kernels::cuda::QuantizeArgs args{scale.data<float>(), scale_inv.data<float>(), amax_ptr(o), o.saturation,
                                   o.amax_ignore_nan, o.amax_accumulate};
  args.gelu = o.gelu;
  if (!qt.defined()) return kernels::cuda::quantize(x.data<T>(), q.data<Q>(), x.numel(), args, stream);
  const kernels::math::Dims2 d = dims_of(x);
  Tensor partial;  // the fused dbias: each 32-row tile's column sums, then their sum
  if (o.dbias.defined()) {
    partial = Tensor::empty({kernels::math::dbias_tiles(d.rows), d.cols}, DType::F32, x.device());
    args.dbias_partial = partial.data<float>();
  }
  cudaError_t e = kernels::cuda::quantize_transpose(x.data<T>(), q.data<Q>(), qt.data<Q>(), d, args, stream);
  if (e == cudaSuccess && o.dbias.defined()) {
    visit_wide(o.dbias.dtype(), "quantize_fp8_transpose", "dbias", [&](auto otag) {
      using Out = decltype(otag);
      e = kernels::cuda::dbias_finish(partial.data<float>(), d, o.dbias.data<Out>(), stream);
    });
  }
  return e;
}
#endif

// Quantizes x (contiguous) into q and, when qt is defined, its transpose; writes scale_inv (0-d).
void quantize_per_tensor(const Tensor& x_in, const Tensor& q, const Tensor& qt, const Tensor& scale_inv,
                         const QuantizeOptions& o, const char* op) {
  Tensor x = x_in;
  if (o.gelu && x.device().is_cpu()) {  // the CPU: gelu first (CUDA fuses it into the pass)
    autograd::NoGradGuard no_grad;
    x = gelu(x);
  }
  visit_fp8(q.dtype(), op, [&](auto qtag) {
    using Q = decltype(qtag);
    visit_wide(x.dtype(), op, "the input", [&](auto ttag) {
      using T = decltype(ttag);
      if (!x.device().is_cpu()) {
        MPT_CUDA_KERNEL((quantize_per_tensor_cuda<Q, T>(x, q, qt, scale_inv, o)));
        return;
      }
      const float scale = o.scale.defined() ? o.scale.item<float>()
                                            : current_scaling<Q>(o)(cpu_amax(x.data<T>(), x.numel(), o.amax_ignore_nan));
      float amax = 0.0f;
      const kernels::cpu::QuantizeArgs args{scale, o.saturation, o.amax.defined() ? &amax : nullptr};
      if (qt.defined()) {
        kernels::cpu::quantize_transpose(x.data<T>(), q.data<Q>(), qt.data<Q>(), dims_of(x), args);
      } else {
        kernels::cpu::quantize(x.data<T>(), q.data<Q>(), x.numel(), args);
      }
      *scale_inv.data<float>() = kernels::math::reciprocal(scale);
      if (o.dbias.defined()) {
        visit_wide(o.dbias.dtype(), op, "dbias", [&](auto otag) {
          using Out = decltype(otag);
          kernels::cpu::column_sums_tiled(x.data<T>(), dims_of(x), o.dbias.data<Out>());
        });
      }
      if (o.amax.defined()) {
        if (o.amax_ignore_nan && std::isnan(amax)) amax = cpu_amax(x.data<T>(), x.numel(), true);
        *amax_ptr(o) = o.amax_accumulate ? std::fmax(*amax_ptr(o), amax) : amax;
      }
    });
  });
}

kernels::math::BlockScaleLayout block_layout(const Tensor& t, ScaleLayout layout) {
  const kernels::math::Dims2 d = dims_of(t);
  return kernels::math::BlockScaleLayout::make(d.rows, d.cols,
                                               layout == ScaleLayout::Block1x128
                                                   ? kernels::math::BlockScaling::Block1x128
                                                   : kernels::math::BlockScaling::Block128x128);
}

// Uninitialised codes of `shape` and f32 scales for the block grid of `grid` (2-d, the quantized shape) on dev.
Quantized empty_blocks(const Shape& shape, const Tensor& grid, ScaleLayout layout, DType fp8, Device dev) {
  const kernels::math::BlockScaleLayout bl = block_layout(grid, layout);
  return {Tensor::empty(shape, fp8, dev), Tensor::empty({bl.scale_rows(), bl.scale_cols()}, DType::F32, dev), layout};
}

const char* layout_name(ScaleLayout l) {
  switch (l) {
    case ScaleLayout::PerTensor: return "per-tensor";
    case ScaleLayout::Block1x128: return "1x128";
    case ScaleLayout::Block128x128: return "128x128";
  }
  return "?";
}

}  // namespace

void fold_amax_(const Tensor& into, const Tensor& amax) {
  constexpr const char* op = "fold_amax_";
  MPT_CHECK(into.defined() && amax.defined(), "[{}] undefined tensor", op);
  const Device dev = into.device();
  check_scalar_f32(into, dev, "into", op);
  check_scalar_f32(amax, dev, "amax", op);
  if (dev.is_cpu()) {
    float* h = into.data<float>();
    *h = std::fmax(*h, *amax.data<float>());
    return;
  }
  MPT_CUDA_KERNEL(kernels::cuda::fold_amax(amax.data<float>(), into.data<float>(),
                                           static_cast<cudaStream_t>(detail::stream_of(dev))));
}

void delayed_scaling_update_(std::span<const DelayedScalingSlot> slots, bool algo_max, int margin) {
  constexpr const char* op = "delayed_scaling_update_";
  if (slots.empty()) return;
  MPT_CHECK(margin >= 0 && margin <= 64, "[{}] margin must be in [0, 64], got {}", op, margin);
  const Device dev = slots[0].history.device();
  auto f32 = [&](const Tensor& t, const char* what, size_t i) {
    MPT_CHECK(t.defined() && t.dtype() == DType::F32 && t.device() == dev && t.is_contiguous(),
              "[{}] slot {}: {} must be a contiguous f32 tensor on {}, got {}", op, i, what, dev.str(),
              t.defined() ? t.meta_str() : std::string("undefined"));
    return t.data<float>();
  };
  const bool cpu = dev.is_cpu();
#if defined(MPT_WITH_CUDA)
  std::vector<kernels::cuda::DelayedUpdateEntry> entries;
#endif
  for (size_t i = 0; i < slots.size(); ++i) {
    const DelayedScalingSlot& s = slots[i];
    float* h = f32(s.history, "history", i);
    MPT_CHECK(s.history.numel() >= 1 && s.amax.numel() == 1 && s.scale.numel() == 1 && s.scale_inv.numel() == 1,
              "[{}] slot {}: expected a non-empty history and one-element amax, scale, scale_inv", op, i);
    const kernels::math::DelayedUpdate u{s.history.numel(), algo_max, margin, s.fp8_max};
    float* amax = f32(s.amax, "amax", i);
    float* scale = f32(s.scale, "scale", i);
    float* scale_inv = f32(s.scale_inv, "scale_inv", i);
    if (cpu) {
      kernels::math::delayed_scaling_update(u, h, *amax, scale, scale_inv);
      continue;
    }
#if defined(MPT_WITH_CUDA)
    entries.push_back({h, amax, scale, scale_inv, u});
#endif
  }
  if (cpu) return;
#if defined(MPT_WITH_CUDA)
  MPT_CUDA_KERNEL(kernels::cuda::delayed_scaling_update(entries.data(), static_cast<int64_t>(entries.size()),
                                                        static_cast<cudaStream_t>(detail::stream_of(dev))));
#else
  MPT_CUDA_KERNEL(0);
#endif
}

namespace detail {

Tensor column_sums(const Tensor& x_in, DType out_dtype) {
  constexpr const char* op = "column_sums";
  const Tensor x = x_in.contiguous();
  const kernels::math::Dims2 d = dims_of(x);
  Tensor out = Tensor::empty({d.cols}, out_dtype, x.device());
  visit_wide(x.dtype(), op, "the input", [&](auto ttag) {
    using T = decltype(ttag);
    visit_wide(out_dtype, op, "the output", [&](auto otag) {
      using Out = decltype(otag);
      if (x.device().is_cpu()) {
        kernels::cpu::column_sums_tiled(x.data<T>(), d, out.data<Out>());
        return;
      }
#if defined(MPT_WITH_CUDA)
      const auto stream = static_cast<cudaStream_t>(detail::stream_of(x.device()));
      const Tensor partial = Tensor::empty({kernels::math::dbias_tiles(d.rows), d.cols}, DType::F32, x.device());
      MPT_CUDA_KERNEL(kernels::cuda::column_partials(x.data<T>(), d, partial.data<float>(), stream));
      MPT_CUDA_KERNEL(kernels::cuda::dbias_finish(partial.data<float>(), d, out.data<Out>(), stream));
#else
      MPT_CUDA_KERNEL(0);
#endif
    });
  });
  return out;
}

}  // namespace detail

Tensor amax(const Tensor& x_in) {
  const Device dev = detail::check_same_device({&x_in}, "amax");
  return amax(x_in, Tensor::empty({}, DType::F32, dev));
}

Tensor amax(const Tensor& x_in, const Tensor& out) {
  const Device dev = detail::check_same_device({&x_in, &out}, "amax");
  MPT_CHECK(out.dtype() == DType::F32 && out.numel() == 1 && out.is_contiguous(),
            "[amax] out must be one contiguous f32 element, got {}", out.meta_str());
  const Tensor x = x_in.contiguous();
  visit_wide(x.dtype(), "amax", "the input", [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      *out.data<float>() = kernels::cpu::amax(x.data<T>(), x.numel());
    } else {
      MPT_CUDA_KERNEL(kernels::cuda::amax(x.data<T>(), x.numel(), out.data<float>(),
                                          static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  return out;
}

Quantized quantize_fp8(const Tensor& x_in, DType fp8, const QuantizeOptions& options) {
  const Device dev = check_quantize_args(x_in, fp8, options, "quantize_fp8");
  const Tensor x = x_in.contiguous();
  Quantized q{Tensor::empty(x.shape(), fp8, dev), Tensor::empty({}, DType::F32, dev), ScaleLayout::PerTensor};
  quantize_per_tensor(x, q.data, Tensor(), q.scale_inv, options, "quantize_fp8");
  return q;
}

std::pair<Quantized, Quantized> quantize_fp8_transpose(const Tensor& x_in, DType fp8, const QuantizeOptions& options) {
  const Device dev = check_quantize_args(x_in, fp8, options, "quantize_fp8_transpose");
  const Tensor x = x_in.contiguous();
  const kernels::math::Dims2 d = dims_of(x);
  const Tensor scale_inv = Tensor::empty({}, DType::F32, dev);
  Quantized q{Tensor::empty(x.shape(), fp8, dev), scale_inv, ScaleLayout::PerTensor};
  Quantized qt{Tensor::empty({d.cols, d.rows}, fp8, dev), scale_inv, ScaleLayout::PerTensor};
  quantize_per_tensor(x, q.data, qt.data, scale_inv, options, "quantize_fp8_transpose");
  return {q, qt};
}

void transpose_codes(std::span<const Tensor> src, std::span<const Tensor> dst) {
  constexpr const char* op = "transpose_codes";
  MPT_CHECK(src.size() == dst.size(), "[{}] {} sources for {} destinations", op, src.size(), dst.size());
  for (size_t k = 0; k < src.size(); ++k) {
    const Tensor &a = src[k], &b = dst[k];
    MPT_CHECK(a.defined() && b.defined() && a.dim() == 2 && a.is_contiguous() && a.element_size() == 1 &&
                  a.device() == src[0].device(),
              "[{}] source {}: expected a contiguous 2-d tensor of 1-byte codes on {}, got {}", op, k,
              src[0].device(), a.defined() ? a.meta_str() : "undefined");
    MPT_CHECK(b.dtype() == a.dtype() && b.device() == a.device() && b.is_contiguous() &&
                  (b.shape() == Shape{a.size(1), a.size(0)}) && !b.shares_storage(a),
              "[{}] destination {}: expected a contiguous {}[{}, {}] on {} apart from its source, got {}", op, k,
              a.dtype(), a.size(1), a.size(0), a.device(), b.defined() ? b.meta_str() : "undefined");
  }
  if (src.empty()) return;
#if defined(MPT_WITH_CUDA)
  if (src[0].device().is_cuda()) {
    std::vector<kernels::cuda::ByteTranspose> tiles;
    for (size_t k = 0; k < src.size(); ++k) {
      const kernels::cuda::ByteTranspose t{static_cast<const uint8_t*>(src[k].data_ptr()),
                                           static_cast<uint8_t*>(dst[k].data_ptr()), src[k].size(0), src[k].size(1)};
      if (kernels::cuda::byte_transpose_vectorisable(t)) {
        tiles.push_back(t);
      } else {
        Tensor(dst[k]).copy_(src[k].t());
      }
    }
    if (!tiles.empty()) {
      MPT_CUDA_KERNEL(kernels::cuda::byte_transposes(tiles.data(), static_cast<int64_t>(tiles.size()),
                                                     static_cast<cudaStream_t>(detail::stream_of(src[0].device()))));
    }
    return;
  }
#endif
  for (size_t k = 0; k < src.size(); ++k) Tensor(dst[k]).copy_(src[k].t());
}

#if defined(MPT_WITH_CUDA)
namespace {

// The partial column sums a fused CUDA pass writes for `dbias` ([dbias_tiles(rows), cols] f32); undefined without one.
Tensor dbias_partials(const Tensor& dbias, kernels::math::Dims2 d, Device dev) {
  return dbias.defined() ? Tensor::empty({kernels::math::dbias_tiles(d.rows), d.cols}, DType::F32, dev) : Tensor();
}

// dbias from those partials (over the tiles in order, rounded once to dbias's dtype); nothing without a dbias.
void finish_dbias(const Tensor& partial, kernels::math::Dims2 d, const Tensor& dbias, cudaStream_t stream,
                  const char* op) {
  if (!dbias.defined()) return;
  visit_wide(dbias.dtype(), op, "dbias", [&](auto otag) {
    using Out = decltype(otag);
    MPT_CUDA_KERNEL(kernels::cuda::dbias_finish(partial.data<float>(), d, dbias.data<Out>(), stream));
  });
}

}  // namespace
#endif

Quantized quantize_blockwise(const Tensor& x_in, DType fp8, ScaleLayout layout, const BlockQuantizeOptions& options) {
  const char* op = "quantize_blockwise";
  const Device dev = detail::check_same_device({&x_in}, op);
  visit_wide(x_in.dtype(), op, "the input", [](auto) {});
  MPT_CHECK(layout != ScaleLayout::PerTensor, "[{}] expected a block layout (1x128 or 128x128), got per-tensor "
            "(use quantize_fp8)", op);
  MPT_CHECK(!options.transpose || (x_in.dim() == 2 && layout == ScaleLayout::Block1x128),
            "[{}] transpose quantizes a 2-d input's transpose in 1x128 blocks, got {} with {} blocks", op,
            x_in.meta_str(), layout == ScaleLayout::Block1x128 ? "1x128" : "128x128");
  const bool fused = options.transpose;  // x^T's codes without its transposed copy, on every backend
  MPT_CHECK(!options.dgelu_aux.defined(), "[{}] dgelu_aux is taken by quantize_blockwise_transpose only", op);
  if (options.dbias.defined()) {
    MPT_CHECK(options.transpose, "[{}] dbias is fused into the transposed (columnwise) 1x128 quantization only", op);
    check_dbias(options.dbias, x_in, dev, op);
  }
  MPT_CHECK(!options.gelu || (layout == ScaleLayout::Block1x128 && !options.dbias.defined()),
            "[{}] gelu quantizes gelu(x) in 1x128 blocks without dbias, got {} blocks{}", op,
            layout == ScaleLayout::Block1x128 ? "1x128" : "128x128", options.dbias.defined() ? " and a dbias" : "");
  Tensor x = options.transpose && !fused ? x_in.t().contiguous() : x_in.contiguous();
  if (options.gelu && dev.is_cpu()) {  // the CPU: gelu first (CUDA fuses it into the pass)
    autograd::NoGradGuard no_grad;
    x = gelu(x);
  }
  const Shape shape = fused ? Shape{x.size(1), x.size(0)} : x.shape();
  const kernels::math::BlockScaleLayout bl = block_layout(fused ? x.t() : x, layout);  // of the quantized shape
  Quantized q = empty_blocks(shape, fused ? x.t() : x, layout, fp8, dev);
  visit_fp8(fp8, op, [&](auto qtag) {
    using Q = decltype(qtag);
    const kernels::math::ScaleFromAmax scaling{kernels::math::fp8_max<Q>(), 0, options.power_of_2};
    visit_wide(x.dtype(), op, "the input", [&](auto ttag) {
      using T = decltype(ttag);
      if (fused && dev.is_cpu()) {
        kernels::cpu::quantize_blockwise_1x128_transposed(x.data<T>(), x.size(0), x.size(1), q.data.data<Q>(),
                                                          q.scale_inv.data<float>(), scaling);
        if (options.dbias.defined()) {
          visit_wide(options.dbias.dtype(), op, "dbias", [&](auto otag) {
            using Out = decltype(otag);
            kernels::cpu::column_sums_tiled(x.data<T>(), dims_of(x), options.dbias.data<Out>());
          });
        }
      } else if (fused) {
#if defined(MPT_WITH_CUDA)
        const auto stream = static_cast<cudaStream_t>(detail::stream_of(dev));
        const kernels::math::Dims2 d = dims_of(x);
        const Tensor partial = dbias_partials(options.dbias, d, dev);
        MPT_CUDA_KERNEL(kernels::cuda::quantize_blockwise_1x128_transposed(
            x.data<T>(), x.size(0), x.size(1), q.data.data<Q>(), q.scale_inv.data<float>(), scaling, stream,
            partial.defined() ? partial.data<float>() : nullptr, options.gelu));
        finish_dbias(partial, d, options.dbias, stream, op);
#else
        MPT_CUDA_KERNEL(0);
#endif
      } else if (dev.is_cpu()) {
        kernels::cpu::quantize_blockwise(x.data<T>(), q.data.data<Q>(), q.scale_inv.data<float>(), bl, scaling);
      } else {
        MPT_CUDA_KERNEL(kernels::cuda::quantize_blockwise(x.data<T>(), q.data.data<Q>(), q.scale_inv.data<float>(), bl,
                                                          scaling, static_cast<cudaStream_t>(detail::stream_of(dev)),
                                                          options.gelu));
      }
    });
  });
  return q;
}

namespace {

// quantize_blockwise_transpose's 128x128 case: W's codes and W^T's, which share the tile scales.
std::pair<Quantized, Quantized> quantize_tiles_transpose(const Tensor& x_in, DType fp8, const BlockQuantizeOptions& o,
                                                         Device dev, const char* op) {
  MPT_CHECK(!o.dbias.defined() && !o.gelu && !o.dgelu_aux.defined(),
            "[{}] 128x128 blocks take no dbias, gelu or dgelu_aux", op);
  if (dev.is_cpu()) {
    Quantized q = quantize_blockwise(x_in, fp8, ScaleLayout::Block128x128, o);
    Quantized qt{q.data.t().contiguous(), q.scale_inv.t().contiguous(), ScaleLayout::Block128x128};
    return {std::move(q), std::move(qt)};
  }
  visit_wide(x_in.dtype(), op, "the input", [](auto) {});
  const Tensor x = x_in.contiguous();
  const kernels::math::BlockScaleLayout bl = block_layout(x, ScaleLayout::Block128x128);
  Quantized q = empty_blocks(x.shape(), x, ScaleLayout::Block128x128, fp8, dev);
  Quantized qt = empty_blocks({x.size(1), x.size(0)}, x.t(), ScaleLayout::Block128x128, fp8, dev);
#if defined(MPT_WITH_CUDA)
  visit_fp8(fp8, op, [&](auto qtag) {
    using Q = decltype(qtag);
    const kernels::math::ScaleFromAmax scaling{kernels::math::fp8_max<Q>(), 0, o.power_of_2};
    visit_wide(x.dtype(), op, "the input", [&](auto ttag) {
      using T = decltype(ttag);
      MPT_CUDA_KERNEL(kernels::cuda::quantize_blockwise_128x128_both(
          x.data<T>(), q.data.data<Q>(), q.scale_inv.data<float>(), qt.data.data<Q>(), qt.scale_inv.data<float>(), bl,
          scaling, static_cast<cudaStream_t>(detail::stream_of(dev))));
    });
  });
#else
  MPT_CUDA_KERNEL(0);
#endif
  return {std::move(q), std::move(qt)};
}

}  // namespace

std::pair<Quantized, Quantized> quantize_blockwise_transpose(const Tensor& x_in, DType fp8,
                                                             const BlockQuantizeOptions& options, ScaleLayout layout) {
  const char* op = "quantize_blockwise_transpose";
  const Device dev = detail::check_same_device({&x_in}, op);
  MPT_CHECK(x_in.dim() == 2 && !options.transpose, "[{}] expected a 2-d input and options without transpose (both "
            "come back), got {}{}", op, x_in.meta_str(), options.transpose ? " with transpose" : "");
  MPT_CHECK(layout != ScaleLayout::PerTensor, "[{}] expected a block layout, got per-tensor (use "
            "quantize_fp8_transpose)", op);
  if (layout == ScaleLayout::Block128x128) return quantize_tiles_transpose(x_in, fp8, options, dev, op);
  const Tensor& aux = options.dgelu_aux;
  if (aux.defined()) {
    MPT_CHECK(!options.gelu && aux.device() == dev && aux.dtype() == x_in.dtype() && aux.shape() == x_in.shape(),
              "[{}] dgelu_aux must have the input's shape, dtype and device ({}), without gelu, got {}{}", op,
              x_in.meta_str(), aux.meta_str(), options.gelu ? " with gelu" : "");
  }
  BlockQuantizeOptions rowwise = options, columnwise = options;
  rowwise.dbias = rowwise.dgelu_aux = columnwise.dgelu_aux = Tensor();
  columnwise.transpose = true;
  if (dev.is_cpu()) {  // the two passes (the CPU's quantizers are bound by their arithmetic, not by reading x)
    Tensor t = x_in;
    if (aux.defined()) {
      t = Tensor::empty(x_in.shape(), x_in.dtype(), dev);
      detail::gelu_backward_into(x_in.contiguous(), aux.contiguous(), t, false);
    }
    Quantized q = quantize_blockwise(t, fp8, ScaleLayout::Block1x128, rowwise);
    return {std::move(q), quantize_blockwise(t, fp8, ScaleLayout::Block1x128, columnwise)};
  }
  visit_wide(x_in.dtype(), op, "the input", [](auto) {});
  if (options.dbias.defined()) check_dbias(options.dbias, x_in, dev, op);
  MPT_CHECK(!options.gelu || !options.dbias.defined(), "[{}] gelu quantizes gelu(x) without dbias", op);
  const Tensor x = x_in.contiguous(), a = aux.defined() ? aux.contiguous() : Tensor();
  const kernels::math::Dims2 d = dims_of(x);
  Quantized q = empty_blocks(x.shape(), x, ScaleLayout::Block1x128, fp8, dev);
  Quantized qt = empty_blocks({d.cols, d.rows}, x.t(), ScaleLayout::Block1x128, fp8, dev);
#if defined(MPT_WITH_CUDA)
  const auto stream = static_cast<cudaStream_t>(detail::stream_of(dev));
  const Tensor partial = dbias_partials(options.dbias, d, dev);
  visit_fp8(fp8, op, [&](auto qtag) {
    using Q = decltype(qtag);
    const kernels::math::ScaleFromAmax scaling{kernels::math::fp8_max<Q>(), 0, options.power_of_2};
    visit_wide(x.dtype(), op, "the input", [&](auto ttag) {
      using T = decltype(ttag);
      MPT_CUDA_KERNEL(kernels::cuda::quantize_blockwise_1x128_both(
          x.data<T>(), d.rows, d.cols, q.data.data<Q>(), q.scale_inv.data<float>(), qt.data.data<Q>(),
          qt.scale_inv.data<float>(), scaling, stream, partial.defined() ? partial.data<float>() : nullptr,
          options.gelu, a.defined() ? a.data<T>() : nullptr));
    });
  });
  finish_dbias(partial, d, options.dbias, stream, op);
#else
  MPT_CUDA_KERNEL(0);
#endif
  return {std::move(q), std::move(qt)};
}

Tensor dequantize(const Quantized& q, DType out_dtype) {
  const char* op = "dequantize";
  const Device dev = detail::check_same_device({&q.data, &q.scale_inv}, op);
  MPT_CHECK(q.scale_inv.dtype() == DType::F32, "[{}] scale_inv must be f32, got {}", op, q.scale_inv.meta_str());
  const kernels::math::BlockScaleLayout bl = block_layout(q.data, q.layout);
  const Shape expected = q.layout == ScaleLayout::PerTensor ? Shape{} : Shape{bl.scale_rows(), bl.scale_cols()};
  MPT_CHECK(q.scale_inv.numel() == numel(expected) && (q.layout == ScaleLayout::PerTensor || q.scale_inv.shape() == expected),
            "[{}] a {} scale_inv for data {} must have shape {}, got {}", op, layout_name(q.layout),
            q.data.meta_str(), shape_str(expected), q.scale_inv.meta_str());
  const Tensor data = q.data.contiguous(), scale_inv = q.scale_inv.contiguous();
  Tensor out;
  visit_fp8(data.dtype(), op, [&](auto qtag) {
    using Q = decltype(qtag);
    visit_wide(out_dtype, op, "the output dtype", [&](auto otag) {
      using Out = decltype(otag);
      out = Tensor::empty(data.shape(), out_dtype, dev);
      const Q* codes = data.data<Q>();
      const float* si = scale_inv.data<float>();
      if (dev.is_cpu()) {
        if (q.layout == ScaleLayout::PerTensor) {
          kernels::cpu::dequantize(codes, out.data<Out>(), data.numel(), *si);
        } else {
          kernels::cpu::dequantize_blockwise(codes, out.data<Out>(), si, bl);
        }
      } else if (q.layout == ScaleLayout::PerTensor) {
        MPT_CUDA_KERNEL(kernels::cuda::dequantize(codes, out.data<Out>(), data.numel(), si,
                                                  static_cast<cudaStream_t>(detail::stream_of(dev))));
      } else {
        MPT_CUDA_KERNEL(kernels::cuda::dequantize_blockwise(codes, out.data<Out>(), si, bl,
                                                            static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    });
  });
  return out;
}

}  // namespace mpt::ops
