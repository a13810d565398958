// src/ops/embedding.cpp: embedding lookup and its deterministic backward (positions bucketed by token, on the tensors'
// device).
#include "mpt/ops/embedding.h"

#include <vector>

#include "core/device_errors.h"
#include "kernels/cpu/embedding.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/embedding.h"
#endif

namespace mpt::ops {

using detail::visit_float;

namespace {

template <class F>
decltype(auto) visit_ids(const Tensor& ids, const char* op, F&& f) {
  switch (ids.dtype()) {
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    default: break;
  }
  MPT_THROW("[{}] ids must be i32 or i64, got {}", op, ids.meta_str());
}

// Calls f(T{}, O{}) for a dout of `dout` and a table gradient of `table`: the same float dtype, or an f32 dout into a
// bf16 / f16 table gradient (a half gradient of an FP32 table: autograd::set_grad_dtype).
template <class F>
void visit_table_types(DType dout, DType table, const char* op, F&& f) {
  if (dout == table) return visit_float(dout, op, [&](auto tag) { f(tag, tag); });
  if (dout == DType::F32 && table == DType::BF16) return f(float{}, bf16{});
  if (dout == DType::F32 && table == DType::F16) return f(float{}, f16{});
  MPT_THROW("[{}] a table gradient of {} cannot take a dout of {}: expected dout's dtype, or bf16/f16 for an f32 dout",
            op, table, dout);
}

Shape with_channels(const Shape& ids_shape, int64_t channels) {
  Shape s = ids_shape;
  s.push_back(channels);
  return s;
}

// dtable += the gradient, everything on dout's CUDA device and stream: the buckets are sorted there (no copy to the
// host, no synchronisation); a bad id is reported through the device's error record and thrown at the next
// synchronisation (core/device_errors.h).
void cuda_embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab, const Tensor& dtable) {
  const char* op = "embedding_backward";
#if defined(MPT_WITH_CUDA)
  const Device dev = dout.device();
  const auto stream = static_cast<cudaStream_t>(detail::stream_of(dev));
  const int64_t n = ids.numel(), channels = dtable.size(1);
  const kernels::cuda::BucketPlan plan = kernels::cuda::embedding_bucket_plan(n, vocab);
  const Tensor histogram = Tensor::empty({plan.chunks * vocab}, DType::I32, dev);  // (chunks,V)
  const Tensor starts = Tensor::empty({vocab + 1}, DType::I64, dev);               // (V+1)
  const Tensor positions = Tensor::empty({n}, DType::I64, dev);                    // (n)
  visit_ids(ids, op, [&](auto itag) {
    using I = decltype(itag);
    const kernels::cuda::BucketArgs<I> args{ids.data<I>(), plan, histogram.data<int32_t>(), starts.data<int64_t>(),
                                            positions.data<int64_t>(),
                                            device_error_sink(dev, kernels::DeviceErrorOp::EmbeddingBackward)};
    MPT_CUDA_KERNEL(kernels::cuda::embedding_buckets(args, stream));
  });
  const kernels::cuda::DeviceBuckets buckets{starts.data<int64_t>(), positions.data<int64_t>(), vocab, n};
  visit_table_types(dout.dtype(), dtable.dtype(), op, [&](auto tag, auto otag) {
    using T = decltype(tag);
    using O = decltype(otag);
    if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(
          kernels::cuda::embedding_backward(buckets, dout.data<T>(), dtable.data<O>(), channels, stream));
    }
  });
#else
  (void)dout;
  (void)ids;
  (void)vocab;
  (void)dtable;
  MPT_THROW("[{}] {}", op, cuda_backend::kNotBuilt);
#endif
}

}  // namespace

Tensor embedding(const Tensor& ids_in, const Tensor& table_in) {
  const char* op = "embedding";
  const detail::GradRecorder grad({&table_in});
  const Device dev = detail::check_same_device({&ids_in, &table_in}, op);
  detail::check_f64_on_cpu(table_in, op);
  MPT_CHECK(table_in.dim() == 2, "[{}] the table must be 2-d [vocab, channels], got {}", op, table_in.meta_str());
  const Tensor ids = ids_in.contiguous(), table = table_in.contiguous();
  const int64_t vocab = table.size(0), channels = table.size(1), n = ids.numel();
  Tensor out = Tensor::empty(with_channels(ids.shape(), channels), table.dtype(), dev);
  visit_ids(ids, op, [&](auto itag) {
    using I = decltype(itag);
    visit_float(table.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      if (dev.is_cpu()) {
        const int64_t bad =
            kernels::cpu::embedding_forward(ids.data<I>(), table.data<T>(), out.data<T>(), n, vocab, channels);
        MPT_CHECK(bad < 0, "[{}] token id {} at position {} of ids {} is out of range for a table {} of {} rows", op,
                  bad < 0 ? 0 : static_cast<int64_t>(ids.data<I>()[bad]), bad, ids.meta_str(), table.meta_str(),
                  vocab);
      } else if constexpr (!std::is_same_v<T, double>) {
        MPT_CUDA_KERNEL(kernels::cuda::embedding_forward(
            ids.data<I>(), table.data<T>(), out.data<T>(), kernels::cuda::EmbeddingShape{n, vocab, channels},
            device_error_sink(dev, kernels::DeviceErrorOp::Embedding),
            static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    });
  });
  // The table's gradient adds into one already waiting for it when it can (a tied LM head's, computed first):
  // no zero fill and no add pass over the [vocab, channels] gradient. The same bits for f32 tables (x + y = y + x);
  // one rounding fewer for half ones.
  // The gradient in the table's gradient dtype (autograd::grad_dtype: BF16 for an FP32 table under
  // amp::Policy::grads), each row's float sum rounded once into it.
  const DType grad_dtype = autograd::grad_dtype(table_in);
  grad.record("EmbeddingBackward", {&out},
              autograd::PartialBackwardFn([ids, vocab, grad_dtype, dev](const std::vector<Tensor>& g,
                                                                        std::vector<Tensor>& partial) {
                const DType gd = g[0].dtype() == DType::F32 || g[0].dtype() == grad_dtype ? grad_dtype : g[0].dtype();
                const Tensor& waiting = autograd::offer(partial, 0, gd);
                const bool adds = waiting.defined() && waiting.dtype() == gd && waiting.device() == dev &&
                                  waiting.shape() == Shape{vocab, g[0].shape().back()} && waiting.is_contiguous();
                // A leaf's fresh destination (its owner's flat buffer) holds anything: zeroed, then added into.
                if (adds && autograd::is_fresh_offer(waiting)) Tensor(waiting).zero_();
                return std::vector<Tensor>{embedding_backward(g[0], ids, vocab, adds ? waiting : Tensor{}, gd)};
              }));
  return out;
}

Tensor embedding_backward(const Tensor& dout_in, const Tensor& ids_in, int64_t vocab, Tensor dtable,
                          std::optional<DType> table_dtype) {
  const char* op = "embedding_backward";
  const Device dev = dtable.defined() ? detail::check_same_device({&dout_in, &dtable}, op)
                                      : detail::check_same_device({&dout_in}, op);
  detail::check_same_device({&ids_in}, op);
  detail::check_f64_on_cpu(dout_in, op);
  MPT_CHECK(ids_in.device().is_cpu() || ids_in.device() == dev, "[{}] ids must be on the CPU or on dout's device {}, "
            "got {}", op, dev.str(), ids_in.meta_str());
  MPT_CHECK(vocab >= 0, "[{}] vocab must be >= 0, got {}", op, vocab);
  MPT_CHECK(dout_in.dim() == ids_in.dim() + 1, "[{}] dout must have shape ids.shape + [channels] = {} + [C], got {}",
            op, shape_str(ids_in.shape()), dout_in.meta_str());
  const int64_t channels = dout_in.shape().back();
  detail::check_shape(dout_in, with_channels(ids_in.shape(), channels), "dout", op);
  if (dtable.defined()) {
    MPT_CHECK(!table_dtype || *table_dtype == dtable.dtype(), "[{}] table_dtype {} differs from the given dtable {}",
              op, *table_dtype, dtable.meta_str());
    detail::check_shape(dtable, {vocab, channels}, "dtable", op);
    MPT_CHECK(dtable.is_contiguous(), "[{}] the gradient to accumulate into must be contiguous, got strides {}", op,
              shape_str(dtable.strides()));
  }
  const DType out = dtable.defined() ? dtable.dtype() : table_dtype.value_or(dout_in.dtype());
  visit_table_types(dout_in.dtype(), out, op, [](auto, auto) {});  // checks the pair
  if (!dtable.defined()) dtable = Tensor::zeros({vocab, channels}, out, dev);
  const Tensor dout = dout_in.contiguous();
  if (dev.is_cuda()) {
    cuda_embedding_backward(dout, ids_in.to(dev).contiguous(), vocab, dtable);
    return dtable;
  }
  // The buckets fix the summation order; the CUDA path builds the same ones on the device.
  const Tensor ids = ids_in.contiguous();
  kernels::cpu::EmbeddingBuckets buckets;
  visit_ids(ids, op, [&](auto itag) {
    using I = decltype(itag);
    const int64_t bad = kernels::cpu::embedding_buckets(ids.data<I>(), ids.numel(), vocab, buckets);
    MPT_CHECK(bad < 0, "[{}] token id {} at position {} of ids {} is out of range [0, {})", op,
              bad < 0 ? 0 : static_cast<int64_t>(ids.data<I>()[bad]), bad, ids_in.meta_str(), vocab);
  });
  visit_table_types(dout.dtype(), dtable.dtype(), op, [&](auto tag, auto otag) {
    using T = decltype(tag);
    using O = decltype(otag);
    kernels::cpu::embedding_backward(buckets, dout.data<T>(), dtable.data<O>(), channels);
  });
  return dtable;
}

}  // namespace mpt::ops
