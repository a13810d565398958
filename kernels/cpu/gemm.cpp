// kernels/cpu/gemm.cpp: f32 and bf16 GEMMs on cached oneDNN matmul primitives, and f16 through exact conversion to f32.
#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/scratch.h"
#include "kernels/math/numerics_cast.h"

namespace mpt::kernels::cpu {

namespace {

using dt = dnnl::memory::data_type;

template <class T>
constexpr dt dnnl_type() {
  if constexpr (std::is_same_v<T, float>) return dt::f32;
  else return dt::bf16;
}

// Everything a primitive depends on. Batch strides are zeroed for batch == 1 (they do not matter there);
// alpha is a run-time output scale, so only whether it is 1 matters; beta is baked into the sum post-op.
struct Key {
  dt a, c;
  int64_t m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  bool trans_a, trans_b, scaled, bias;
  uint32_t beta_bits;

  auto tie() const {
    return std::tie(a, c, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c, trans_a, trans_b, scaled,
                    bias, beta_bits);
  }
  bool operator==(const Key& o) const { return tie() == o.tie(); }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, key.batch, key.stride_a, key.stride_b,
                      key.stride_c})
      mix(static_cast<uint64_t>(v));
    mix(static_cast<uint64_t>(key.a) << 8 | static_cast<uint64_t>(key.c));
    mix(uint64_t{key.trans_a} | uint64_t{key.trans_b} << 1 | uint64_t{key.scaled} << 2 | uint64_t{key.bias} << 3);
    mix(key.beta_bits);
    return static_cast<size_t>(h);
  }
};

struct Entry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias;
  size_t scratchpad_bytes = 0;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A thread-safe LRU map from Key to a primitive. Primitives execute outside the lock, each call with its own
// (user-mode) scratchpad, so concurrent GEMMs never share state.
class PrimitiveCache {
 public:
  std::shared_ptr<const Entry> get(const Key& key) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = map_.find(key); it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++hits_;
        return it->second->second;
      }
      ++misses_;
    }
    std::shared_ptr<const Entry> entry = create(key);  // slow (milliseconds): outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    if (capacity_ == 0 || map_.count(key) != 0) return entry;
    lru_.emplace_front(key, entry);
    map_[key] = lru_.begin();
    evict();
    return entry;
  }

  GemmCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {hits_, misses_, static_cast<int64_t>(map_.size()), static_cast<int64_t>(capacity_)};
  }

  void set_capacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = capacity;
    evict();
  }

 private:
  void evict() {
    while (map_.size() > capacity_) {
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

  static std::shared_ptr<const Entry> create(const Key& key) {
    // Logical op(A) is m x k and op(B) k x n; a transposed operand is the same dims with swapped strides.
    const bool batched = key.batch > 1;
    auto desc = [&](dt type, int64_t rows, int64_t cols, int64_t ld, bool trans, int64_t stride) {
      dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
      dnnl::memory::dims dims{rows, cols};
      if (batched) {
        const int64_t span = (trans ? cols : rows) * ld;  // any positive value works for a broadcast batch of 1
        dims.insert(dims.begin(), stride == 0 ? 1 : key.batch);
        strides.insert(strides.begin(), stride == 0 ? span : stride);
      }
      return dnnl::memory::desc(dims, type, strides);
    };
    auto entry = std::make_shared<Entry>();
    entry->a = desc(key.a, key.m, key.k, key.lda, key.trans_a, key.stride_a);
    entry->b = desc(key.a, key.k, key.n, key.ldb, key.trans_b, key.stride_b);
    entry->c = desc(key.c, key.m, key.n, key.ldc, false, key.stride_c);
    if (key.bias) entry->bias = batched ? dnnl::memory::desc({1, 1, key.n}, dt::f32, {key.n, key.n, 1})
                                        : dnnl::memory::desc({1, key.n}, dt::f32, {key.n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (key.scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
    if (key.beta_bits != 0) {
      float beta;
      std::memcpy(&beta, &key.beta_bits, sizeof beta);
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::desc md = key.bias ? dnnl::matmul::desc(entry->a, entry->b, entry->bias, entry->c)
                                           : dnnl::matmul::desc(entry->a, entry->b, entry->c);
    dnnl::matmul::primitive_desc pd(md, attr, cpu_engine());
    entry->scratchpad_bytes = pd.scratchpad_desc().get_size();
    entry->prim = dnnl::matmul(pd);
    return entry;
  }

  std::mutex mutex_;
  std::list<std::pair<Key, std::shared_ptr<const Entry>>> lru_;
  std::unordered_map<Key, decltype(lru_)::iterator, KeyHash> map_;
  size_t capacity_ = 256;
  int64_t hits_ = 0, misses_ = 0;
};

PrimitiveCache& cache() {
  static PrimitiveCache c;
  return c;
}

template <class T, class TC>
void dnnl_gemm(const GemmParams& p, const T* a, const T* b, TC* c) {
  const bool batched = p.batch > 1;
  Key key{dnnl_type<T>(), dnnl_type<TC>(), p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.batch,
          batched ? p.stride_a : 0, batched ? p.stride_b : 0, batched ? p.stride_c : 0,
          p.trans_a, p.trans_b, p.alpha != 1.0f, p.bias != nullptr, 0};
  const float beta = p.beta == 0.0f ? 0.0f : p.beta;  // -0 behaves as 0 (C is not read)
  std::memcpy(&key.beta_bits, &beta, sizeof beta);
  const std::shared_ptr<const Entry> entry = cache().get(key);

  dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  thread_local std::vector<unsigned char> scratch;
  if (scratch.size() < entry->scratchpad_bytes) scratch.resize(entry->scratchpad_bytes);
  float alpha = p.alpha;
  dnnl::memory ma(entry->a, engine, const_cast<T*>(a));
  dnnl::memory mb(entry->b, engine, const_cast<T*>(b));
  dnnl::memory mc(entry->c, engine, c);
  dnnl::memory ms({{1}, dt::f32, {1}}, engine, &alpha);
  dnnl::memory mpad(dnnl::memory::desc({static_cast<int64_t>(entry->scratchpad_bytes)}, dt::u8, {1}), engine,
                    scratch.data());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, mpad}};
  if (key.scaled) args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, ms);
  if (key.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(entry->bias, engine, const_cast<float*>(p.bias)));
  entry->prim.execute(stream, args);
  stream.wait();
}

// C = bias + beta * C (the k == 0 product), never reading C when beta == 0.
template <class TC>
void scale_output(const GemmParams& p, TC* c) {
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t i = 0; i < p.m; ++i) {
      TC* row = c + bi * p.stride_c + i * p.ldc;
      for (int64_t j = 0; j < p.n; ++j) {
        const float b = p.bias != nullptr ? p.bias[j] : 0.0f;
        row[j] = scalar_cast<TC>(p.beta == 0.0f ? b : b + p.beta * scalar_cast<float>(row[j]));
      }
    }
}

// Copies the stored f16 / bf16 matrices of one operand into contiguous f32 ones (exact), one per batch entry
// unless the operand is broadcast, in the calling thread's scratch slot `Slot`. Returns the new leading dimension
// and batch stride through ld / stride.
template <int Slot, class T>
float* widen(const T* src, int64_t rows, int64_t cols, int64_t batch, int64_t& ld, int64_t& stride) {
  const int64_t mats = stride == 0 ? 1 : batch;
  float* dst = scratch<float, Slot>(static_cast<size_t>(mats * rows * cols));
  for (int64_t bi = 0; bi < mats; ++bi) {
    if (ld == cols) {
      convert<float, T>(src + bi * stride, dst + bi * rows * cols, static_cast<size_t>(rows * cols));
    } else {
      for (int64_t r = 0; r < rows; ++r)
        convert<float, T>(src + bi * stride + r * ld, dst + (bi * rows + r) * cols, static_cast<size_t>(cols));
    }
  }
  ld = cols;
  stride = stride == 0 ? 0 : rows * cols;
  return dst;
}

// Whether this CPU's oneDNN runs bf16 matmuls (oneDNN 2.6 needs AVX-512 for them: an AVX2-only CPU, such as some
// AMD EPYC machines, has none). Probed once with a tiny primitive.
bool bf16_matmul_supported() {
  static const bool supported = [] {
    try {
      const dnnl::memory::desc d({16, 16}, dt::bf16, dnnl::memory::dims{16, 1});
      (void)dnnl::matmul::primitive_desc(dnnl::matmul::desc(d, d, d), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return supported;
}

// A 16-bit GEMM as an f32 one: the operands widened exactly (a tensor core's products are exact in f32 too), FP32
// accumulation, one rounding to TC. f16 always (oneDNN 2.6 has no f16 matmul here); bf16 where oneDNN has none.
template <class T, class TC>
void widened_gemm(const GemmParams& p, const T* a, const T* b, TC* c) {
  GemmParams q = p;
  const float* a32 = widen<0>(a, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.batch, q.lda, q.stride_a);
  const float* b32 = widen<1>(b, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.batch, q.ldb, q.stride_b);
  if constexpr (std::is_same_v<TC, float>) {
    dnnl_gemm<float, float>(q, a32, b32, c);
  } else {
    // f32 result, then C = round(D + beta * C): one rounding, as a tensor core's f16 / bf16 epilogue.
    q.beta = 0;
    q.ldc = p.n;
    q.stride_c = p.m * p.n;
    float* d = scratch<float, 2>(static_cast<size_t>(p.batch * p.m * p.n));
    dnnl_gemm<float, float>(q, a32, b32, d);
    if (p.beta == 0.0f && p.ldc == p.n && (p.batch == 1 || p.stride_c == p.m * p.n)) {
      convert<TC, float>(d, c, static_cast<size_t>(p.batch * p.m * p.n));  // vectorised (F16C)
      return;
    }
    const int64_t rows = p.batch * p.m;
#pragma omp parallel for schedule(static) if (rows * p.n > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
      float* dr = d + r * p.n;
      TC* cr = c + (r / p.m) * p.stride_c + (r % p.m) * p.ldc;
      if (p.beta != 0.0f)
        for (int64_t j = 0; j < p.n; ++j) dr[j] += p.beta * scalar_cast<float>(cr[j]);
      convert<TC, float>(dr, cr, static_cast<size_t>(p.n));
    }
  }
}

}  // namespace

void check_gemm_params(const GemmParams& p) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("gemm: " + what + " (m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                                " k=" + std::to_string(p.k) + " batch=" + std::to_string(p.batch) + ")");
  };
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 1) fail("negative size or batch < 1");
  const int64_t a_cols = p.trans_a ? p.m : p.k, b_cols = p.trans_b ? p.k : p.n;
  if (p.lda < std::max<int64_t>(1, a_cols) || p.ldb < std::max<int64_t>(1, b_cols) ||
      p.ldc < std::max<int64_t>(1, p.n))
    fail("leading dimension smaller than the stored row");
  if (p.stride_a < 0 || p.stride_b < 0 || p.stride_c < 0) fail("negative batch stride");
  if (p.batch > 1 && p.stride_c == 0) fail("C cannot be broadcast over the batch");
  if (p.bias != nullptr && p.alpha != 1.0f) fail("a bias needs alpha == 1");
}

template <class T, class TC>
void gemm(const GemmParams& p, const T* a, const T* b, TC* c) {
  if constexpr (std::is_same_v<T, double>) {
    gemm_reference(p, a, b, c);
  } else {
    check_gemm_params(p);
    if (p.m == 0 || p.n == 0) return;
    if (p.k == 0) return scale_output(p, c);
    if constexpr (std::is_same_v<T, f16>) {
      widened_gemm(p, a, b, c);
    } else if constexpr (std::is_same_v<T, bf16>) {
      if (bf16_matmul_supported()) dnnl_gemm(p, a, b, c);
      else widened_gemm(p, a, b, c);
    } else {
      dnnl_gemm(p, a, b, c);
    }
  }
}

GemmCacheStats gemm_cache_stats() { return cache().stats(); }
void set_gemm_cache_capacity(size_t capacity) { cache().set_capacity(capacity); }

template void gemm<double, double>(const GemmParams&, const double*, const double*, double*);
template void gemm<float, float>(const GemmParams&, const float*, const float*, float*);
template void gemm<bf16, bf16>(const GemmParams&, const bf16*, const bf16*, bf16*);
template void gemm<bf16, float>(const GemmParams&, const bf16*, const bf16*, float*);
template void gemm<f16, f16>(const GemmParams&, const f16*, const f16*, f16*);
template void gemm<f16, float>(const GemmParams&, const f16*, const f16*, float*);

}  // namespace mpt::kernels::cpu
