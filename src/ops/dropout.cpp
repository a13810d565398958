// src/ops/dropout.cpp: dropout forward and backward: the mask is replayed from (seed, offset), never stored.
#include "mpt/ops/dropout.h"

#include "mpt/core/cuda_graph.h"

#include <cmath>

#include "kernels/cpu/elementwise.h"
#include "mpt/ops/elementwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/elementwise.h"
#endif

namespace mpt::ops {

using detail::visit_float;
using kernels::math::DropoutArgs;

namespace {

// out (+)= in * mask / (1 - p); p == 0 and p == 1 never reach here.
void run_dropout(const Tensor& in, const Tensor& out, const DropoutArgs& args, const char* op) {
  const Device dev = in.device();
  visit_float(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::dropout(in.data<T>(), out.data<T>(), in.numel(), args);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::dropout(in.data<T>(), out.data<T>(), in.numel(), args,
                                             static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
}

void check_p(float p, const char* op) {
  MPT_CHECK(p >= 0.0f && p <= 1.0f, "[{}] the drop probability must be in [0, 1], got {}", op, p);
}

}  // namespace

Tensor dropout(const Tensor& x_in, float p, Generator& gen, DropoutState* state) {
  const char* op = "dropout";
  const detail::GradRecorder grad({&x_in});
  const Device dev = detail::check_same_device({&x_in}, op);
  detail::check_f64_on_cpu(x_in, op);
  check_p(p, op);
  visit_float(x_in.dtype(), op, [](auto) {});
  const Tensor x = x_in.contiguous();
  DropoutState s{gen.seed(), gen.offset(), p};
  Tensor y;
  if (p == 0.0f) {
    y = x_in.clone();
  } else if (p == 1.0f) {
    y = Tensor::zeros(x.shape(), x.dtype(), dev);
  } else {
    MPT_CHECK(!dev.is_cuda() || CudaGraph::capturing(dev) == nullptr,
              "[{}] p = {} while a CUDA graph captures the step: the Philox offsets are drawn on the host, so every "
              "replay would reuse the captured masks (set dropout to 0 for graph capture)", op, p);
    s.offset = gen.reserve(x.numel());
    y = Tensor::empty(x.shape(), x.dtype(), dev);
    run_dropout(x, y, DropoutArgs{s.seed, s.offset, p, false}, op);
  }
  if (state != nullptr) *state = s;
  grad.record("DropoutBackward", {&y},
              [s](const std::vector<Tensor>& g) { return std::vector<Tensor>{dropout_backward(g[0], s)}; });
  return y;
}

Tensor dropout_backward(const Tensor& dy_in, const DropoutState& state, Tensor dx) {
  const char* op = "dropout_backward";
  const bool accumulate = dx.defined();
  const Device dev = accumulate ? detail::check_same_device({&dy_in, &dx}, op) : detail::check_same_device({&dy_in}, op);
  detail::check_f64_on_cpu(dy_in, op);
  check_p(state.p, op);
  visit_float(dy_in.dtype(), op, [](auto) {});
  if (accumulate) {
    detail::check_same_dtype({&dy_in, &dx}, op);
    detail::check_shape(dx, dy_in.shape(), "dx", op);
    MPT_CHECK(dx.is_contiguous(), "[{}] the gradient to accumulate into must be contiguous, got strides {}", op,
              shape_str(dx.strides()));
  }
  const Tensor dy = dy_in.contiguous();
  if (state.p == 1.0f) return accumulate ? dx : Tensor::zeros(dy.shape(), dy.dtype(), dev);
  if (state.p == 0.0f) return accumulate ? add_(dx, dy) : dy.clone();
  if (!accumulate) dx = Tensor::empty(dy.shape(), dy.dtype(), dev);
  run_dropout(dy, dx, DropoutArgs{state.seed, state.offset, state.p, accumulate}, op);
  return dx;
}

}  // namespace mpt::ops
