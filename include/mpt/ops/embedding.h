// mpt/ops/embedding.h: embedding lookup (token or position ids into a table) and its deterministic backward.
#pragma once

#include <optional>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// out[..., :] = table[ids[...], :]: ids (i32 or i64, any shape S) index rows of table [V, C]
// (f32, f16, bf16; f64 on the CPU); out has shape S + [C] and table's dtype and device.
// Out-of-range ids: on the CPU an mpt::Error naming the first bad position and id. On CUDA the ids are
// not read back (that would synchronize every step): the kernel reports the bad id as a deferred device error,
// thrown at the host's next synchronisation with the device (src/core/device_errors.h), and fills its row
// with NaN.
Tensor embedding(const Tensor& ids, const Tensor& table);

// dtable[v, :] += sum over positions p with ids[p] == v of dout[p, :]: deterministic. Each row's
// gradient is accumulated in float (double for f64) over its positions in increasing order and added to
// dtable once, on both backends (no atomics): bit-identical run to run, for any thread count, and on CPU
// and CUDA. dout: shape ids.shape + [C], table's dtype. When `dtable` is given ([V, C] on dout's device,
// contiguous; dout's dtype, or bf16/f16 for an f32 dout: a BF16 gradient of an FP32 table, autograd::set_grad_dtype,
// each row's float sum added and rounded once) the gradient is accumulated into it and it is returned; otherwise a
// new [vocab, C] tensor of `table_dtype` (dout's when unset; the same pairs), zeros where a token does not occur.
// The positions are grouped by token where dout lives: on CUDA by a stable counting sort on the device (no host
// round trip; CPU ids are uploaded first), and an out-of-range id there is a deferred device error like the forward's.
Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab, Tensor dtable = {},
                          std::optional<DType> table_dtype = std::nullopt);

}  // namespace mpt::ops
