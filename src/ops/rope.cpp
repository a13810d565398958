// src/ops/rope.cpp: the rotary table and the rotary embedding, forward beside backward (the inverse rotation).
#include "mpt/ops/rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/math/opmath.h"
#include "mpt/autograd/grad_mode.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/rope.h"
#endif

namespace mpt::ops {

using detail::visit_float;

RopeTable rope_table(int64_t positions, int64_t head_dim, double theta, Device device, DType dtype) {
  MPT_CHECK(positions >= 1 && head_dim >= 2 && head_dim % 2 == 0,
            "[rope_table] expected positions >= 1 and an even head dimension >= 2, got {} positions, head dim {}",
            positions, head_dim);
  MPT_CHECK(std::isfinite(theta) && theta > 1, "[rope_table] theta must be finite and > 1, got {}", theta);
  MPT_CHECK(dtype == DType::F32 || dtype == DType::F64, "[rope_table] the table is f32 (or f64), got {}", dtype);
  const int64_t half = head_dim / 2;
  std::vector<double> c(static_cast<size_t>(positions * half)), s(c.size());
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    for (int64_t p = 0; p < positions; ++p) {
      c[static_cast<size_t>(p * half + i)] = std::cos(static_cast<double>(p) * inv_freq);
      s[static_cast<size_t>(p * half + i)] = std::sin(static_cast<double>(p) * inv_freq);
    }
  }
  return {Tensor::from_vector(c, {positions, half}).to(device, dtype),
          Tensor::from_vector(s, {positions, half}).to(device, dtype)};
}

namespace {

// x, y (B, T, H, D) of one shape: contiguous, or the heads of a wider packed row (each token's H heads adjacent, a
// token stride of at least H * D: stride(1), the kernels' x_ld / y_ld). Heads [rotated, H) are copied (0: none).
void rope_into(const Tensor& x, const Tensor& y, const RopeTable& table, int64_t position0, bool inverse,
               int64_t rotated = 0) {
  const Device dev = x.device();
  kernels::math::RopeShape shape{x.size(0) * x.size(1) * x.size(2), x.size(1), x.size(2), x.size(3),
                                 x.size(3) / 2, position0, inverse};
  shape.x_ld = x.stride(1);
  shape.y_ld = y.stride(1);
  shape.rotated = rotated;
  visit_float(x.dtype(), "rope", [&](auto tag) {
    using T = decltype(tag);
    using F = kernels::math::opmath_t<T>;
    if (dev.is_cpu()) {
      kernels::cpu::rope(x.data<T>(), y.data<T>(), table.cos.data<F>(), table.sin.data<F>(), shape);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::rope(x.data<T>(), y.data<T>(), table.cos.data<float>(),
                                          table.sin.data<float>(), shape,
                                          static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
}

}  // namespace

Tensor rope(const Tensor& x_in, const RopeTable& table, int64_t position0) {
  const char* op = "rope";
  const detail::GradRecorder grad({&x_in});
  MPT_CHECK(table.cos.defined() && table.sin.defined(), "[rope] the table is empty (make it with ops::rope_table)");
  detail::check_same_device({&x_in, &table.cos, &table.sin}, op);
  detail::check_f64_on_cpu(x_in, op);
  MPT_CHECK(x_in.dim() == 4 && x_in.size(3) % 2 == 0 && x_in.size(3) >= 2,
            "[rope] expected x (B, T, H, D) with an even D, got {}", x_in.meta_str());
  const int64_t half = x_in.size(3) / 2;
  MPT_CHECK(table.cos.dim() == 2 && table.cos.size(1) == half && table.sin.shape() == table.cos.shape(),
            "[rope] the table {} is for head dimension {}, x {} has {}", table.cos.meta_str(),
            table.cos.dim() == 2 ? 2 * table.cos.size(1) : 0, x_in.meta_str(), x_in.size(3));
  const DType want = x_in.dtype() == DType::F64 ? DType::F64 : DType::F32;
  MPT_CHECK(table.cos.dtype() == want && table.sin.dtype() == want, "[rope] a {} input needs a {} table, got {}",
            x_in.dtype(), want, table.cos.meta_str());
  MPT_CHECK(position0 >= 0 && position0 + x_in.size(1) <= table.positions(),
            "[rope] positions [{}, {}) of {} are outside the table's {} positions", position0,
            position0 + x_in.size(1), x_in.meta_str(), table.positions());
  const Tensor x = x_in.contiguous();
  const RopeTable t{table.cos.contiguous(), table.sin.contiguous()};
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  rope_into(x, y, t, position0, false);
  grad.record("RopeBackward", {&y}, [t, position0](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor{}};
    const Tensor dy = g[0].contiguous();
    Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    rope_into(dy, dx, t, position0, true);
    return std::vector<Tensor>{dx};
  });
  return y;
}

namespace {

// rope_qkv's packed tensor (its slices are views taken outside the op, as a caller's would be).
Tensor rope_qkv_packed(const Tensor& qkv_in, const RopeTable& table, int64_t n_head, int64_t n_kv_head,
                       int64_t position0) {
  const char* op = "rope_qkv";
  MPT_CHECK(qkv_in.defined() && qkv_in.dim() == 4 && n_head >= 1 && n_kv_head >= 1 &&
                qkv_in.size(2) == n_head + 2 * n_kv_head && qkv_in.size(3) % 2 == 0 && qkv_in.size(3) >= 2,
            "[{}] expected qkv (B, T, n_head + 2 n_kv_head, D) with an even D for n_head {} and n_kv_head {}, got {}",
            op, n_head, n_kv_head, qkv_in.defined() ? qkv_in.meta_str() : "undefined");
  const detail::GradRecorder grad({&qkv_in});
  detail::check_same_device({&qkv_in, &table.cos, &table.sin}, op);
  detail::check_f64_on_cpu(qkv_in, op);
  const int64_t half = qkv_in.size(3) / 2, T = qkv_in.size(1);
  const DType want = qkv_in.dtype() == DType::F64 ? DType::F64 : DType::F32;
  MPT_CHECK(table.cos.defined() && table.cos.dim() == 2 && table.cos.size(1) == half && table.cos.dtype() == want &&
                table.sin.shape() == table.cos.shape() && table.sin.dtype() == want,
            "[{}] the table must be {} for head dimension {}, got {}", op, want, 2 * half,
            table.cos.defined() ? table.cos.meta_str() : "undefined");
  MPT_CHECK(position0 >= 0 && position0 + T <= table.positions(),
            "[{}] positions [{}, {}) of {} are outside the table's {} positions", op, position0, position0 + T,
            qkv_in.meta_str(), table.positions());
  const Tensor qkv = qkv_in.contiguous();
  const RopeTable t{table.cos.contiguous(), table.sin.contiguous()};
  const int64_t H = n_head, Hkv = n_kv_head, rotated = H + Hkv;
  // One pass: q's and k's heads rotated, v's copied (rope_into's `rotated`).
  Tensor packed = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
  rope_into(qkv, packed, t, position0, false, rotated);
  grad.record("RopeQkvBackward", {&packed}, [t, position0, rotated, dtype = qkv.dtype()](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor{}};
    const Tensor dy = g[0].to(dtype).contiguous();  // qkv's dtype (gradients summed from several readers may be wider)
    Tensor dqkv = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    rope_into(dy, dqkv, t, position0, true, rotated);  // dq and dk rotated back, dv copied: one pass
    return std::vector<Tensor>{dqkv};
  });
  return packed;
}

}  // namespace

QkvRotated rope_qkv(const Tensor& qkv, const RopeTable& table, int64_t n_head, int64_t n_kv_head,
                    int64_t position0) {
  QkvRotated r;
  r.packed = rope_qkv_packed(qkv, table, n_head, n_kv_head, position0);
  const int64_t H = n_head, Hkv = n_kv_head;
  r.q = r.packed.slice(2, 0, H);
  r.k = r.packed.slice(2, H, H + Hkv);
  r.v = r.packed.slice(2, H + Hkv, H + 2 * Hkv);
  return r;
}

}  // namespace mpt::ops
