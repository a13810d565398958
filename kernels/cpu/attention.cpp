// kernels/cpu/attention.cpp: blocked causal attention (flash-attention forward and backward), causal softmax rows.
#include "kernels/cpu/attention.h"
#include "kernels/math/opmath.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "kernels/cpu/convert.h"
#include "kernels/math/attention.h"

namespace mpt::kernels::cpu {
namespace {

constexpr int64_t kBlock = 64;  // query rows per block and keys per block
constexpr int64_t kPad = 16;    // the head dimension is padded to whole 64-byte vectors of float

#define MPT_ATTN_INLINE inline __attribute__((always_inline))

// The 64-byte vector helpers are always inlined, so the ABI note about returning them by value does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#define MPT_ATTN_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,fma"), noinline))

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// 64 bytes of F as a GCC vector; with AVX-512 one register. The AVX-512 build of the micro-kernels contracts
// multiply-adds into FMAs and the generic build (CPUs without AVX-512) does not, so the two round differently;
// on one machine the path, and so every bit, is fixed.
template <class F>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(64), aligned(4)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(64), aligned(8)));
};

template <class F>
MPT_ATTN_INLINE typename VecOf<F>::type vload(const F* p) {
  typename VecOf<F>::type v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class F>
MPT_ATTN_INLINE void vstore(F* p, const typename VecOf<F>::type& v) {
  std::memcpy(p, &v, sizeof v);
}

// s[r, 0:64] = sum_{d < k} a[r, d] * bt[d, 0:64] for R rows (s has row stride kBlock).
template <class F, int R>
MPT_ATTN_INLINE void abt_rows(int64_t k, const F* a, int64_t lda, const F* bt, int64_t ldb, F* s) {
  using V = typename VecOf<F>::type;
  constexpr int L = 64 / sizeof(F), N = kBlock / L;
  V acc[R][N];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) acc[r][j] = V{};
  for (int64_t d = 0; d < k; ++d) {
    V b[N];
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) b[j] = vload(bt + d * ldb + j * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const F x = a[r * lda + d];
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) acc[r][j] += x * b[j];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) vstore(s + r * kBlock + j * L, acc[r][j]);
}

// s (m x 64, row stride kBlock) = a (m x k) * bt (k x 64). Six rows at a time: 24 accumulators, so each step's 4
// vector loads and 6 broadcasts feed 24 FMAs (4 rows left the FMA units waiting on loads). Each element still sums
// over k in order: the row grouping changes no bit.
template <class F>
MPT_ATTN_INLINE void gemm_abt(int64_t m, int64_t k, const F* a, int64_t lda, const F* bt, int64_t ldb, F* s) {
  int64_t r = 0;
  for (; r + 6 <= m; r += 6) abt_rows<F, 6>(k, a + r * lda, lda, bt, ldb, s + r * kBlock);
  for (; r + 4 <= m; r += 4) abt_rows<F, 4>(k, a + r * lda, lda, bt, ldb, s + r * kBlock);
  for (; r < m; ++r) abt_rows<F, 1>(k, a + r * lda, lda, bt, ldb, s + r * kBlock);
}

// out[r, 0:NC vectors] += sum_{kk < k} a[r, kk] * b[kk, 0:NC vectors] for R rows; a[r, kk] is a[r * lda + kk * acs]
// (acs = 1: row-major; lda = 1 and acs = the stored row stride: a stored matrix read transposed).
template <class F, int R, int NC>
MPT_ATTN_INLINE void ab_block(int64_t k, const F* a, int64_t lda, int64_t acs, const F* b, int64_t ldb, F* out,
                              int64_t ldo) {
  using V = typename VecOf<F>::type;
  constexpr int L = 64 / sizeof(F);
  V acc[R][NC];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) acc[r][j] = vload(out + r * ldo + j * L);
  for (int64_t kk = 0; kk < k; ++kk) {
    V bv[NC];
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) bv[j] = vload(b + kk * ldb + j * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const F x = a[r * lda + kk * acs];
#pragma GCC unroll 8
      for (int j = 0; j < NC; ++j) acc[r][j] += x * bv[j];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) vstore(out + r * ldo + j * L, acc[r][j]);
}

template <class F, int R>
MPT_ATTN_INLINE void ab_cols(int64_t n, int64_t k, const F* a, int64_t lda, int64_t acs, const F* b, int64_t ldb,
                             F* out, int64_t ldo) {
  constexpr int L = 64 / sizeof(F);
  int64_t c = 0;
  for (; c + 4 * L <= n; c += 4 * L) ab_block<F, R, 4>(k, a, lda, acs, b + c, ldb, out + c, ldo);
  for (; c < n; c += L) ab_block<F, R, 1>(k, a, lda, acs, b + c, ldb, out + c, ldo);
}

// out (m x n, n a multiple of 64 bytes of F) += a (m x k) * b (k x n), a[r, kk] at a[r * lda + kk * acs]. Six rows
// at a time, as gemm_abt (the same bits as any grouping).
template <class F>
MPT_ATTN_INLINE void gemm_ab_acc(int64_t m, int64_t n, int64_t k, const F* a, int64_t lda, int64_t acs, const F* b,
                                 int64_t ldb, F* out, int64_t ldo) {
  int64_t r = 0;
  for (; r + 6 <= m; r += 6) ab_cols<F, 6>(n, k, a + r * lda, lda, acs, b, ldb, out + r * ldo, ldo);
  for (; r + 4 <= m; r += 4) ab_cols<F, 4>(n, k, a + r * lda, lda, acs, b, ldb, out + r * ldo, ldo);
  for (; r < m; ++r) ab_cols<F, 1>(n, k, a + r * lda, lda, acs, b, ldb, out + r * ldo, ldo);
}

// x[0, kBlock) = exp(x * mul - sub) by math::exp_op (vectorised here). The callers pass scores minus a row max or
// logsumexp (<= 0 up to rounding) and ignore the entries past a row's keys.
MPT_ATTN_INLINE void exp_block(float* x, float mul, float sub) {
#pragma omp simd
  for (int64_t j = 0; j < kBlock; ++j) x[j] = math::exp_op(x[j] * mul - sub);
}

MPT_ATTN_INLINE void exp_block(double* x, double mul, double sub) {
  for (int64_t j = 0; j < kBlock; ++j) x[j] = math::attention_exp(x[j] * mul - sub);
}

// One row of d values of T as F in dst[0, dp), zero padded.
template <class T, class F>
void load_row(const T* src, int64_t d, int64_t dp, F* dst) {
  convert<F>(src, dst, static_cast<size_t>(d));
  std::fill(dst + d, dst + dp, F(0));
}

// dst = val (or dst += val, added in F and rounded once), d values; tmp holds d values of F.
template <class T, class F>
void store_row(const F* val, T* dst, int64_t d, bool accumulate, F* tmp) {
  if (!accumulate) {
    convert<T>(val, dst, static_cast<size_t>(d));
    return;
  }
  convert<F>(dst, tmp, static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) tmp[i] += val[i];
  convert<T>(tmp, dst, static_cast<size_t>(d));
}

std::atomic<bool> g_avx512_enabled{true};

bool use_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("fma");
  return ok && g_avx512_enabled.load(std::memory_order_relaxed);
}

// Where head bh's rows of a tensor laid out by `st` start, and the distance between them (elements).
struct Rows {
  int64_t base, step;
};
Rows rows_of(const RowStrides& st, const AttentionShape& s, int64_t bh) {
  if (st.row == 0) return {bh * s.seq * s.head_dim, s.head_dim};
  return {bh / s.heads * st.batch + bh % s.heads * st.head, st.row};
}

// Query heads per kv head (1 without grouped-query attention), and the kv heads of all samples.
int64_t groups_of(const AttentionShape& s) { return s.kv_heads > 0 ? s.heads / s.kv_heads : 1; }
int64_t kv_head_count(const AttentionShape& s) { return s.batch_heads / groups_of(s); }

// The kv head query head bh reads (b * H_kv + h / G), and where its k and v rows (dk and dv) start.
int64_t kv_index(const AttentionShape& s, int64_t bh) {
  const int64_t g = groups_of(s);
  return bh / s.heads * (s.heads / g) + bh % s.heads / g;
}
Rows kv_rows_of(const AttentionShape& s, int64_t bh) {
  const int64_t g = groups_of(s);
  if (s.kv.row != 0) return {bh / s.heads * s.kv.batch + bh % s.heads / g * s.kv.head, s.kv.row};
  if (g == 1) return rows_of(s.qkv, s, bh);
  return {kv_index(s, bh) * s.seq * s.head_dim, s.head_dim};
}

// The keys head bh may attend: its sample's length under key padding, else all T.
int64_t keys_of(const AttentionShape& s, int64_t bh) {
  return s.padding.lengths == nullptr ? s.seq : s.padding.lengths[bh / s.padding.heads];
}

// Per thread: one head's keys transposed (dp x tp) and values (tp x dp) as F, converted when the thread's task
// moves to another head, and one query block's working set.
template <class F>
struct ForwardScratch {
  int64_t head = -1;
  std::vector<F> kf, kt, vf, qf, s, oacc, row;
  ForwardScratch(int64_t tp, int64_t dp)
      : kf(tp * dp), kt(dp * tp), vf(tp * dp), qf(kBlock * dp), s(kBlock * kBlock), oacc(kBlock * dp), row(dp) {}
};

// Transposes a (rows x cols, row stride lda) into at (cols x rows, row stride ldt) in 16 x 16 tiles, so reads and
// writes both stay within a few cache lines.
template <class F>
void transpose_tiles(const F* a, int64_t rows, int64_t cols, int64_t lda, F* at, int64_t ldt) {
  constexpr int64_t kTile = 16;
  for (int64_t j0 = 0; j0 < rows; j0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t j = j0; j < std::min(rows, j0 + kTile); ++j)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) at[c * ldt + j] = a[j * lda + c];
}

template <class T, class F>
void load_head_kv(const T* k, const T* v, int64_t t, int64_t d, int64_t step, ForwardScratch<F>& w) {
  const int64_t dp = round_up(d, kPad), tp = round_up(t, kBlock);
  for (int64_t j = 0; j < tp; ++j) {
    if (j < t) {
      load_row(k + j * step, d, dp, w.kf.data() + j * dp);
      load_row(v + j * step, d, dp, w.vf.data() + j * dp);
    } else {
      std::fill(w.kf.begin() + j * dp, w.kf.begin() + (j + 1) * dp, F(0));
      std::fill(w.vf.begin() + j * dp, w.vf.begin() + (j + 1) * dp, F(0));
    }
  }
  transpose_tiles(w.kf.data(), tp, d, dp, w.kt.data(), tp);
}

// Over the 64 scores of a block row: the largest of the first `valid` (times scale), and after exp_block the sum of
// the first `valid` with the rest zeroed. Four vectors of lanes, then the lanes in order: the generic and AVX-512
// builds sum alike.
template <class F>
MPT_ATTN_INLINE F row_max(const F* x, int64_t valid, F scale) {
  using V = typename VecOf<F>::type;
  constexpr int L = 64 / sizeof(F), N = kBlock / L;
  F lanes[L];
  V m;
  for (int i = 0; i < L; ++i) m[i] = -INFINITY;
  for (int j = 0; j < N; ++j) {
    V v = vload(x + j * L);
    for (int i = 0; i < L; ++i) {
      const F y = j * L + i < valid ? v[i] * scale : F(-INFINITY);
      m[i] = y > m[i] ? y : m[i];  // fmax without the libm call (a NaN score is dropped either way)
    }
  }
  vstore(lanes, m);
  F r = lanes[0];
  for (int i = 1; i < L; ++i) r = lanes[i] > r ? lanes[i] : r;
  return r;
}

template <class F>
MPT_ATTN_INLINE F mask_and_sum(F* x, int64_t valid) {
  using V = typename VecOf<F>::type;
  constexpr int L = 64 / sizeof(F), N = kBlock / L;
  for (int64_t c = valid; c < kBlock; ++c) x[c] = F(0);
  V acc = vload(x);
  for (int j = 1; j < N; ++j) acc += vload(x + j * L);
  F lanes[L];
  vstore(lanes, acc);
  F r = 0;
  for (int i = 0; i < L; ++i) r += lanes[i];
  return r;
}

// One head's block of up to 64 query rows against every key block up to the diagonal.
template <class T, class F = math::opmath_t<T>>
MPT_ATTN_INLINE void forward_task(const AttentionShape& sh, const T* q, const T* k, const T* v, T* o, F* lse,
                                  int64_t bh, int64_t qb, ForwardScratch<F>& w) {
  const int64_t t = sh.seq, d = sh.head_dim, dp = round_up(d, kPad), tp = round_up(t, kBlock);
  const F scale = static_cast<F>(sh.scale);
  const int64_t i0 = qb * kBlock, m = std::min(kBlock, t - i0);
  const Rows in = rows_of(sh.qkv, sh, bh), out = rows_of(sh.out, sh, bh);
  const int64_t len = keys_of(sh, bh), kvi = kv_index(sh, bh);
  if (w.head != kvi) {  // the kv head's K and V, kept while the thread's tasks stay on it
    const Rows kvr = kv_rows_of(sh, bh);
    load_head_kv(k + kvr.base, v + kvr.base, t, d, kvr.step, w);
    w.head = kvi;
  }
  for (int64_t r = 0; r < m; ++r) load_row(q + in.base + (i0 + r) * in.step, d, dp, w.qf.data() + r * dp);
  std::fill(w.oacc.begin(), w.oacc.begin() + m * dp, F(0));
  math::OnlineSoftmax<F> state[kBlock];
  for (int64_t r = 0; r < m; ++r) state[r] = math::OnlineSoftmax<F>::start();
  for (int64_t j0 = 0; j0 < std::min(i0 + m, len); j0 += kBlock) {
    const int64_t n = std::min(kBlock, len - j0);
    gemm_abt(m, d, w.qf.data(), dp, w.kt.data() + j0, tp, w.s.data());  // (m, 64) raw scores
    for (int64_t r = 0; r < m; ++r) {
      F* sr = w.s.data() + r * kBlock;
      const int64_t valid = std::min(n, i0 + r - j0 + 1);  // keys j <= i, j < len of this block (>= 1: j0 <= i0)
      const F alpha = state[r].rescale(row_max(sr, valid, scale));
      exp_block(sr, scale, state[r].m);
      state[r].l += mask_and_sum(sr, valid);
      F* orow = w.oacc.data() + r * dp;
      for (int64_t c = 0; c < dp; ++c) orow[c] *= alpha;
    }
    gemm_ab_acc(m, dp, n, w.s.data(), kBlock, 1, w.vf.data() + j0 * dp, dp, w.oacc.data(), dp);  // O += P V
  }
  for (int64_t r = 0; r < m; ++r) {
    const F inv = F(1) / state[r].l;
    const F* orow = w.oacc.data() + r * dp;
    for (int64_t c = 0; c < d; ++c) w.row[c] = orow[c] * inv;
    convert<T>(w.row.data(), o + out.base + (i0 + r) * out.step, static_cast<size_t>(d));
    lse[bh * t + i0 + r] = state[r].lse();
  }
}

template <class T, class F = math::opmath_t<T>>
MPT_ATTN_AVX512 void forward_task_avx512(
    const AttentionShape& sh, const T* q, const T* k, const T* v, T* o, F* lse, int64_t bh, int64_t qb,
    ForwardScratch<F>& w) {
  forward_task(sh, q, k, v, o, lse, bh, qb, w);
}

template <class T, class F = math::opmath_t<T>>
__attribute__((noinline)) void forward_task_generic(const AttentionShape& sh, const T* q, const T* k, const T* v, T* o,
                                                    F* lse, int64_t bh, int64_t qb, ForwardScratch<F>& w) {
  forward_task(sh, q, k, v, o, lse, bh, qb, w);
}

template <class F>
struct BackwardScratch {
  std::vector<F> kf, kt, vt, dk, dv, qf, dof, dq, s, dpm, row, delta, lse;
  BackwardScratch(int64_t tp, int64_t dpad)
      : kf(tp * dpad), kt(dpad * tp), vt(dpad * tp), dk(tp * dpad), dv(tp * dpad), qf(kBlock * dpad),
        dof(kBlock * dpad), dq(kBlock * dpad), s(kBlock * kBlock), dpm(kBlock * kBlock), row(dpad), delta(kBlock),
        lse(kBlock) {}
};

// Every gradient of one kv head: K and V (float, transposed copies for the score GEMMs) and the dK, dV
// accumulators live for the whole kv head; its query heads run in order, each one's query blocks in order, key
// blocks up to the diagonal.
template <class T, class F = math::opmath_t<T>>
MPT_ATTN_INLINE void backward_head(const AttentionShape& sh, const AttentionBackwardArgs<T>& a, int64_t kvi,
                                   BackwardScratch<F>& w) {
  const int64_t t = sh.seq, d = sh.head_dim, dp = round_up(d, kPad), tp = round_up(t, kBlock);
  const F scale = static_cast<F>(sh.scale);
  const int64_t groups = groups_of(sh), kv_per_sample = sh.heads / groups;
  const int64_t first = kvi / kv_per_sample * sh.heads + kvi % kv_per_sample * groups;  // its first query head
  const Rows kvr = kv_rows_of(sh, first);
  const int64_t len = keys_of(sh, first);
  for (int64_t j = 0; j < tp; ++j) {
    if (j < t) {
      load_row(a.k + kvr.base + j * kvr.step, d, dp, w.kf.data() + j * dp);
      load_row(a.v + kvr.base + j * kvr.step, d, dp, w.row.data());
    } else {
      std::fill(w.kf.begin() + j * dp, w.kf.begin() + (j + 1) * dp, F(0));
      std::fill(w.row.begin(), w.row.end(), F(0));
    }
    for (int64_t c = 0; c < d; ++c) {
      w.kt[c * tp + j] = w.kf[j * dp + c];
      w.vt[c * tp + j] = w.row[c];
    }
  }
  std::fill(w.dk.begin(), w.dk.begin() + t * dp, F(0));
  std::fill(w.dv.begin(), w.dv.begin() + t * dp, F(0));
  for (int64_t bh = first; bh < first + groups; ++bh) {
    const Rows in = rows_of(sh.qkv, sh, bh), out = rows_of(sh.out, sh, bh);
    for (int64_t i0 = 0; i0 < t; i0 += kBlock) {
      const int64_t m = std::min(kBlock, t - i0);
      for (int64_t r = 0; r < m; ++r) {
        const int64_t off = in.base + (i0 + r) * in.step, out_off = out.base + (i0 + r) * out.step;
        load_row(a.q + off, d, dp, w.qf.data() + r * dp);
        load_row(a.do_ + out_off, d, dp, w.dof.data() + r * dp);
        load_row(a.o + out_off, d, dp, w.row.data());
        F delta = 0;  // D_i = rowsum(dO_i * O_i)
        for (int64_t c = 0; c < d; ++c) delta += w.dof[r * dp + c] * w.row[c];
        w.delta[r] = delta;
        w.lse[r] = a.lse[bh * t + i0 + r];
      }
      std::fill(w.dq.begin(), w.dq.begin() + m * dp, F(0));
      for (int64_t j0 = 0; j0 < std::min(i0 + m, len); j0 += kBlock) {
        const int64_t n = std::min(kBlock, len - j0);
        gemm_abt(m, d, w.qf.data(), dp, w.kt.data() + j0, tp, w.s.data());    // S = Q K^T (unscaled)
        gemm_abt(m, d, w.dof.data(), dp, w.vt.data() + j0, tp, w.dpm.data());  // dP = dO V^T
        for (int64_t r = 0; r < m; ++r) {
          F* sr = w.s.data() + r * kBlock;
          F* dr = w.dpm.data() + r * kBlock;
          const int64_t valid = std::min(n, i0 + r - j0 + 1);
          exp_block(sr, scale, w.lse[r]);  // P = exp(scale * S - lse)
          for (int64_t c = 0; c < valid; ++c) dr[c] = math::causal_softmax_backward(sr[c], dr[c], w.delta[r], scale);
          for (int64_t c = valid; c < n; ++c) sr[c] = dr[c] = F(0);
        }
        // P^T and dS^T are read in place (row stride 1, column stride kBlock): no transposed copies.
        gemm_ab_acc(n, dp, m, w.s.data(), 1, kBlock, w.dof.data(), dp, w.dv.data() + j0 * dp, dp);    // dV += P^T dO
        gemm_ab_acc(n, dp, m, w.dpm.data(), 1, kBlock, w.qf.data(), dp, w.dk.data() + j0 * dp, dp);   // dK += dS^T Q
        gemm_ab_acc(m, dp, n, w.dpm.data(), kBlock, 1, w.kf.data() + j0 * dp, dp, w.dq.data(), dp);   // dQ += dS K
      }
      for (int64_t r = 0; r < m; ++r)
        store_row(w.dq.data() + r * dp, a.dq + in.base + (i0 + r) * in.step, d, a.accumulate, w.row.data());
    }
  }
  for (int64_t j = 0; j < t; ++j) {
    store_row(w.dk.data() + j * dp, a.dk + kvr.base + j * kvr.step, d, a.accumulate, w.row.data());
    store_row(w.dv.data() + j * dp, a.dv + kvr.base + j * kvr.step, d, a.accumulate, w.row.data());
  }
}

template <class T, class F = math::opmath_t<T>>
MPT_ATTN_AVX512 void backward_head_avx512(
    const AttentionShape& sh, const AttentionBackwardArgs<T>& a, int64_t kvi, BackwardScratch<F>& w) {
  backward_head(sh, a, kvi, w);
}

template <class T, class F = math::opmath_t<T>>
__attribute__((noinline)) void backward_head_generic(const AttentionShape& sh, const AttentionBackwardArgs<T>& a,
                                                     int64_t kvi, BackwardScratch<F>& w) {
  backward_head(sh, a, kvi, w);
}

}  // namespace

void set_attention_avx512(bool enabled) { g_avx512_enabled.store(enabled, std::memory_order_relaxed); }

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* o, math::opmath_t<T>* lse) {
  using F = math::opmath_t<T>;
  if (s.batch_heads <= 0 || s.seq <= 0 || s.head_dim <= 0) return;
  const int64_t blocks = (s.seq + kBlock - 1) / kBlock, tasks = s.batch_heads * blocks;
  const bool avx512 = use_avx512();
  // With heads to spare a task is a whole head (its K and V converted once, by one thread); otherwise one query block
  // of a head, the costlier late blocks first.
  const bool whole_heads = s.batch_heads >= 4 * omp_get_max_threads();
#pragma omp parallel
  {
    ForwardScratch<F> w(round_up(s.seq, kBlock), round_up(s.head_dim, kPad));
    auto run = [&](int64_t bh, int64_t qb) {
      if (avx512) {
        forward_task_avx512(s, q, k, v, o, lse, bh, qb, w);
      } else {
        forward_task_generic(s, q, k, v, o, lse, bh, qb, w);
      }
    };
    if (whole_heads) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < s.batch_heads; ++bh)
        for (int64_t qb = blocks - 1; qb >= 0; --qb) run(bh, qb);
    } else {
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < tasks; ++task) run(task / blocks, blocks - 1 - task % blocks);
    }
  }
}

template <class T>
void attention_backward(const AttentionShape& s, const AttentionBackwardArgs<T>& a) {
  using F = math::opmath_t<T>;
  if (s.batch_heads <= 0 || s.seq <= 0 || s.head_dim <= 0) return;
  const bool avx512 = use_avx512();
#pragma omp parallel
  {
    BackwardScratch<F> w(round_up(s.seq, kBlock), round_up(s.head_dim, kPad));
#pragma omp for schedule(dynamic, 1)
    for (int64_t kvi = 0; kvi < kv_head_count(s); ++kvi) {
      if (avx512) {
        backward_head_avx512(s, a, kvi, w);
      } else {
        backward_head_generic(s, a, kvi, w);
      }
    }
  }
}

template <class T>
void causal_softmax_forward(const T* x, T* y, math::opmath_t<T>* lse, int64_t rows, int64_t t, double scale,
                            math::KeyPadding padding) {
  using F = math::opmath_t<T>;
  if (rows <= 0 || t <= 0) return;
  const F sc = static_cast<F>(scale);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * t;
    T* yr = y + r * t;
    const int64_t n = math::causal_keys(r, t, padding);
    F row_max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < n; ++c) row_max = math::attention_max(row_max, math::load(xr[c]) * sc);
    for (int64_t c = 0; c < n; ++c) sum += math::attention_exp(math::load(xr[c]) * sc - row_max);
    const auto row = math::CausalSoftmaxRow<F>::make(sc, row_max, sum);
    for (int64_t c = 0; c < n; ++c) yr[c] = math::store<T>(row.prob(math::load(xr[c])));
    for (int64_t c = n; c < t; ++c) yr[c] = math::store<T>(F(0));
    if (lse != nullptr) lse[r] = row.lse;
  }
}

template <class T>
void causal_softmax_backward(const T* dy, const T* y, T* dx, int64_t rows, int64_t t, double scale,
                             math::KeyPadding padding) {
  using F = math::opmath_t<T>;
  if (rows <= 0 || t <= 0) return;
  const F sc = static_cast<F>(scale);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * t, n = math::causal_keys(r, t, padding);
    F dot = 0;
    for (int64_t c = 0; c < n; ++c) dot += math::load(dy[off + c]) * math::load(y[off + c]);
    for (int64_t c = 0; c < n; ++c)
      dx[off + c] =
          math::store<T>(math::causal_softmax_backward(math::load(y[off + c]), math::load(dy[off + c]), dot, sc));
    for (int64_t c = n; c < t; ++c) dx[off + c] = math::store<T>(F(0));
  }
}

#define MPT_INSTANTIATE(T)                                                                                    \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, T*,                 \
                                     math::opmath_t<T>*);                                                     \
  template void attention_backward<T>(const AttentionShape&, const AttentionBackwardArgs<T>&);                \
  template void causal_softmax_forward<T>(const T*, T*, math::opmath_t<T>*, int64_t, int64_t, double,          \
                                          math::KeyPadding);                                                  \
  template void causal_softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, double, math::KeyPadding);
MPT_FOR_CPU_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cpu
