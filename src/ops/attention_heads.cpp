// src/ops/attention_heads.cpp: split_qkv_heads, a fused QKV projection's output as attention's head-major q, k, v.
#include "mpt/ops/attention.h"
#include "ops/dispatch.h"

namespace mpt::ops {

QkvHeads split_qkv_heads(const Tensor& qkv, int64_t n_head) {
  MPT_CHECK(qkv.defined() && qkv.dim() == 3 && n_head > 0 && qkv.size(2) % (3 * n_head) == 0,
            "[split_qkv_heads] expected qkv [B, T, 3 * C] with C a multiple of n_head {}, got {}", n_head,
            qkv.defined() ? qkv.meta_str() : "undefined");
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
  const detail::GradRecorder grad({&qkv});
  // One copy into [3, B, H, T, D]: q, k and v are contiguous slices of it.
  const Tensor all = qkv.detach().reshape({B, T, 3, n_head, D}).permute({2, 0, 3, 1, 4}).contiguous();
  QkvHeads r{all.select(0, 0), all.select(0, 1), all.select(0, 2)};
  grad.record("SplitQkvHeadsBackward", {&r.q, &r.k, &r.v}, [B, T, C, n_head, D](const std::vector<Tensor>& g) {
    const Tensor& like = g[0].defined() ? g[0] : g[1].defined() ? g[1] : g[2];
    auto fill = [&](Tensor dst, int64_t i) {
      if (g[static_cast<size_t>(i)].defined()) dst.copy_(g[static_cast<size_t>(i)]);
      else dst.zero_();
    };
    // Each head-major gradient is written straight into its slots of d(qkv) (a strided copy, on the CPU or the
    // device): no zero fill, no accumulation, no intermediate [3, B, H, T, D] buffer.
    Tensor d = Tensor::empty({B, T, 3, n_head, D}, like.dtype(), like.device());
    for (int64_t i = 0; i < 3; ++i) fill(d.select(2, i).transpose(1, 2), i);  // [B, H, T, D] views
    return std::vector<Tensor>{d.reshape({B, T, 3 * C})};
  });
  return r;
}

}  // namespace mpt::ops
