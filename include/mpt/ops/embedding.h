// mpt/ops/embedding.h: embedding lookup (token or position ids into a table) and its deterministic backward.
#pragma once

#include "mpt/core/tensor.h"

namespace mpt::ops {

// out[..., :] = table[ids[...], :]: ids (i32 or i64, any shape S) index rows of table [V, C]
// (f32, f16, bf16; f64 on the CPU); out has shape S + [C] and table's dtype and device.
// Out-of-range ids: on the CPU an mpt::Error naming the first bad position and id. On CUDA the ids are
// not read back (that would synchronize every step): a row whose id is out of range is filled with NaN,
// so the loss turns NaN (and a GradScaler skips the step); embedding_backward, which reads the ids on
// the host anyway, then reports the bad id as an error.
Tensor embedding(const Tensor& ids, const Tensor& table);

// dtable[v, :] += sum over positions p with ids[p] == v of dout[p, :]: deterministic. Each row's
// gradient is accumulated in float (double for f64) over its positions in increasing order and added to
// dtable once, on both backends (no atomics): bit-identical run to run, for any thread count, and on CPU
// and CUDA. dout: shape ids.shape + [C], table's dtype. When `dtable` is given ([V, C], dout's dtype and
// device, contiguous) the gradient is accumulated into it and it is returned; otherwise a new [vocab, C]
// tensor (zeros where a token does not occur). The positions are grouped by token on the host:
// ids may be on the CPU while dout is on CUDA (no device-to-host copy then); CUDA ids are copied to the
// host first, which synchronizes.
Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab, Tensor dtable = {});

}  // namespace mpt::ops
