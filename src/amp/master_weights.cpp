// src/amp/master_weights.cpp: the cache of low-precision compute copies and the FP32 gradient hand-off.
#include "mpt/amp/master_weights.h"

#include <map>
#include <mutex>
#include <utility>

#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/elementwise.h"

namespace mpt::amp {

namespace {

struct Entry {
  Tensor copy;
  const void* data = nullptr;  // the master's storage when the copy was made (a replaced master is a miss)
  bool requires_grad = false;
  std::shared_ptr<autograd::AutogradMeta> owner;  // keeps the key's address from being reused while cached
};

struct Cache {
  std::mutex mutex;
  std::map<std::pair<const autograd::AutogradMeta*, DType>, Entry> entries;
  CastCacheStats stats;
};

Cache& cache() {
  static Cache c;
  return c;
}

// Adds the copy's gradient into the master's, in the master's dtype, then clears the copy's.
void hand_off(const Tensor& master, const Tensor& copy) {
  const Tensor g = copy.grad();
  if (!g.defined()) return;
  copy.set_grad(Tensor{});
  autograd::NoGradGuard no_grad;
  const Tensor g32 = g.to(master.dtype());
  const Tensor existing = master.grad();
  if (existing.defined()) {
    ops::add_(existing, g32);
  } else {
    master.set_grad(g32);
  }
  for (const auto& hook : master.autograd_meta()->post_accumulate_hooks) hook(master);
}

Tensor make_copy(const Tensor& master, DType dtype, bool requires_grad) {
  Tensor copy;
  {
    autograd::NoGradGuard no_grad;
    copy = master.detach().to(dtype);
  }
  if (requires_grad) {
    copy.requires_grad_(true);
    copy.register_post_accumulate_grad_hook([master](const Tensor& c) { hand_off(master, c); });
  }
  return copy;
}

}  // namespace

Tensor compute_copy(const Tensor& master, DType dtype) {
  MPT_CHECK(master.defined(), "[compute_copy] undefined master tensor");
  if (master.dtype() == dtype) return master;
  if (master.dtype() != DType::F32 || !master.is_leaf() || master.autograd_meta() == nullptr) return master.to(dtype);
  const bool wants_grad = master.requires_grad() && autograd::is_grad_enabled();
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  Entry& e = c.entries[{master.autograd_meta().get(), dtype}];
  if (e.copy.defined() && e.data == master.data_ptr() && e.requires_grad == wants_grad) {
    ++c.stats.hits;
    return e.copy;
  }
  e = Entry{make_copy(master, dtype, wants_grad), master.data_ptr(), wants_grad, master.autograd_meta()};
  ++c.stats.casts;
  return e.copy;
}

void invalidate_compute_copies(const Tensor& master) {
  if (!master.defined() || master.autograd_meta() == nullptr) return;
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const autograd::AutogradMeta* id = master.autograd_meta().get();
  for (auto it = c.entries.lower_bound({id, DType{}}); it != c.entries.end() && it->first.first == id;)
    it = c.entries.erase(it);
}

void invalidate_compute_copies() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.entries.clear();
}

CastCacheStats cast_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  CastCacheStats s = c.stats;
  s.live = static_cast<int64_t>(c.entries.size());
  return s;
}

void reset_cast_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.stats = {};
}

}  // namespace mpt::amp
