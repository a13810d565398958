// mpt/ops/softmax.h: softmax over the last dim and the fused softmax + cross-entropy loss, forward beside backward.
#pragma once

#include <cstdint>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// y = softmax(x) over the last dimension, same shape, dtype and device (f32, f16, bf16; f64 on the CPU),
// computed in f32 (f64 for f64).
Tensor softmax(const Tensor& x);

// dx = y * (dy - sum(dy * y)) over the last dimension, from the forward's output y. When `dx` is given (same
// shape, dtype and device, contiguous) the result is accumulated into it (dx += ...) and dx is returned.
Tensor softmax_backward(const Tensor& dy, const Tensor& y, Tensor dx = {});

enum class LossReduction { None, Mean, Sum };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;                    // rows with this target have loss 0 and a zero gradient
  LossReduction reduction = LossReduction::Mean;  // Mean divides by the number of non-ignored rows
  // CUDA only: an out-of-range target is reported by the kernel as a deferred device error, thrown at the host's
  // next synchronisation with the device (src/core/device_errors.h; no read-back in the step). Without it such rows
  // silently give a NaN loss and NaN gradients. The CPU always checks, at once.
  bool check_targets = true;
  // 0: every entry of the last dimension is a class; otherwise only the first `classes` are (1 <= classes <= last
  // dim) and the rest are padding: they take no part in the softmax, their gradient is 0. For logits padded to an
  // aligned width (llm.c's GPT-2: 50257 classes in rows of 50304), read in place, with no copy to an unpadded buffer.
  int64_t classes = 0;
  // The loss's upstream gradient, when it is known before the forward (Mean or Sum only): a one-element tensor of the
  // loss's dtype (f32; f64 for f64 logits) on the logits' device, e.g. the Trainer's 1 / micro-batches x loss scale
  // (autograd::LossSeed). When the loss records a gradient, each row of logits is then read once for the loss and its
  // gradient for this upstream value (llm.c's fused classifier: the backward pass over the logits is gone), written
  // over the logits when the call holds their only reference (pass them as a temporary or std::move them; a caller
  // who kept them gets a fresh buffer instead). A backward that brings this very tensor (loss.backward(gradient))
  // uses that gradient as it is, with the unfused path's bits; any other upstream gradient g rescales it by
  // g / gradient in f32 (one more pass, a rounding's difference).
  Tensor gradient{};
};

// What backward needs besides the logits and targets: f32 (f64 for f64 logits).
struct CrossEntropySaved {
  Tensor lse;          // [rows]: logsumexp of each row (the probabilities are never stored)
  Tensor valid_count;  // [1]: rows whose target is not ignore_index (Mean's divisor)
};

struct CrossEntropyResult {
  Tensor loss;  // f32 (f64 for f64 logits): targets' shape for None (0 where ignored), else [] (a scalar)
  CrossEntropySaved saved;
};

// loss_r = logsumexp(logits_r) - logits_r[targets_r] for logits [..., V] (f32, f16, bf16; f64 on the CPU)
// and targets [...] (i64 or i32) of the same leading shape, reduced per options. With options.classes = C > 0
// the logits are [..., Vp] (C <= Vp) and only their first C columns are classes (V = C below). A target outside
// [0, V) other than ignore_index is an mpt::Error (on CUDA: deferred to the next synchronisation, see
// check_targets); so is a `classes` outside [0, Vp].
// The logits are taken by value: see options.gradient, the only case in which they are overwritten.
CrossEntropyResult softmax_cross_entropy(Tensor logits, const Tensor& targets, const CrossEntropyOptions& options = {});

// dlogits = (softmax(logits) - onehot(targets)) * dloss (/ valid_count for Mean), recomputed from the
// logits and saved.lse and written directly: no probabilities are materialised. dloss has the loss's shape
// and dtype. When `dlogits` is given (logits' shape and dtype, contiguous) the result is accumulated into it.
// With options.classes the result has the logits' full shape: the padding columns are 0 in a fresh (or in-place)
// gradient and left as they were in an accumulated one.
Tensor softmax_cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                                      const CrossEntropySaved& saved, const CrossEntropyOptions& options = {},
                                      Tensor dlogits = {});

// The same gradient written over the logits buffer (contiguous logits required), which is returned: saves
// the [rows, V] gradient allocation (llm.c's trick) when the logits are not needed afterwards.
Tensor softmax_cross_entropy_backward_in_place(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                                               const CrossEntropySaved& saved, const CrossEntropyOptions& options = {});

}  // namespace mpt::ops
