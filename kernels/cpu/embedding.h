// kernels/cpu/embedding.h: embedding lookup and its deterministic backward (token buckets) on the CPU.
#pragma once

#include <cstdint>
#include <vector>

namespace mpt::kernels::cpu {

// out[p, :] = table[ids[p], :] for p in [0, n), table [vocab, channels]. Returns -1, or the first
// position whose id lies outside [0, vocab) (the output is then unspecified). I: int32_t or int64_t.
// T: float, double, mpt::f16, mpt::bf16.
template <class T, class I>
int64_t embedding_forward(const I* ids, const T* table, T* out, int64_t n, int64_t vocab, int64_t channels);

// The positions of each token, the fixed summation order of the backward on both backends:
// the distinct ids in increasing order, and for token k the positions positions[starts[k] .. starts[k+1])
// in increasing order. Built by a stable counting sort, O(n + vocab).
struct EmbeddingBuckets {
  std::vector<int64_t> tokens;
  std::vector<int64_t> starts;  // tokens.size() + 1 entries
  std::vector<int64_t> positions;
};

// Fills `buckets` from ids[0, n). Returns -1, or the first position whose id lies outside [0, vocab)
// (buckets is then unspecified).
template <class I>
int64_t embedding_buckets(const I* ids, int64_t n, int64_t vocab, EmbeddingBuckets& buckets);

// dtable[tokens[k], c] += acc with acc = 0 + dout[p0, c] + dout[p1, c] + ... over the positions of token
// k in increasing order, accumulated in float (double for double) and added to dtable once: the result
// is a function of the inputs only (not of thread count or scheduling), and kernels/cuda/embedding.cu
// gives the same bits. Rows of tokens that do not occur are not touched. O: dtable's type, T's or (T float) bf16 / f16
// (a BF16 gradient of an FP32 table, autograd::set_grad_dtype): the float sum rounded once to O.
template <class T, class O = T>
void embedding_backward(const EmbeddingBuckets& buckets, const T* dout, O* dtable, int64_t channels);

}  // namespace mpt::kernels::cpu
