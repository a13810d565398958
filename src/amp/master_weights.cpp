// src/amp/master_weights.cpp: the cache of low-precision compute copies and the FP32 gradient hand-off.
#include "mpt/amp/master_weights.h"

#include <bit>
#include <cstddef>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <variant>

#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/linear.h"
#include "mpt/fp8/linear.h"

namespace mpt::amp {

namespace {

struct Entry {
  Tensor copy;
  const void* data = nullptr;  // the master's storage when the copy was made (a replaced master is a miss)
  bool requires_grad = false;
  std::shared_ptr<autograd::AutogradMeta> owner;  // keeps the key's address from being reused while cached
};

// An FP8 weight copy, keyed by (master, recipe kind).
struct Fp8Entry {
  std::shared_ptr<const fp8::Fp8Weight> copy;
  const void* data = nullptr;                  // the master's storage when the copy was made
  std::shared_ptr<fp8::Fp8TensorMeta> meta;         // the weight meta it was made (and records its amax) with
  fp8::Fp8Recipe recipe;                            // the recipe it was made under
  std::shared_ptr<autograd::AutogradMeta> owner;
};

struct Cache {
  std::mutex mutex;
  std::map<std::tuple<const autograd::AutogradMeta*, DType, int64_t>, Entry> entries;  // (master, dtype, padded rows)
  std::map<std::pair<const autograd::AutogradMeta*, size_t>, Fp8Entry> fp8_entries;
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

// Whether two recipes of one kind quantize a weight alike (delayed: by the meta's scale, compared separately).
bool same_weight_quantization(const fp8::Fp8Recipe& a, const fp8::Fp8Recipe& b) {
  if (a.index() != b.index()) return false;
  if (const auto* ca = std::get_if<fp8::CurrentScaling>(&a)) {
    const auto& cb = std::get<fp8::CurrentScaling>(b);
    return ca->power_2_scale == cb.power_2_scale &&
           std::bit_cast<uint32_t>(ca->amax_epsilon) == std::bit_cast<uint32_t>(cb.amax_epsilon);
  }
  if (const auto* ba = std::get_if<fp8::BlockScaling>(&a)) {
    return ba->power_2_scale == std::get<fp8::BlockScaling>(b).power_2_scale;
  }
  return true;  // delayed: every weight is E4M3 whatever the format
}

std::shared_ptr<const fp8::Fp8Weight> quantize_weight(const Tensor& master, const fp8::Fp8Recipe& recipe,
                                                      const std::shared_ptr<fp8::Fp8TensorMeta>& meta, bool transpose) {
  autograd::NoGradGuard no_grad;
  return std::make_shared<const fp8::Fp8Weight>(fp8::quantize_fp8_weight(master.detach(), recipe, meta, transpose));
}

}  // namespace

std::shared_ptr<const fp8::Fp8Weight> fp8_weight_copy(const Tensor& master, const fp8::Fp8Recipe& recipe,
                                                      const std::shared_ptr<fp8::Fp8TensorMeta>& weight_meta,
                                                      bool transpose) {
  MPT_CHECK(master.defined(), "[fp8_weight_copy] undefined master tensor");
  if (master.dtype() != DType::F32 || !master.is_leaf() || master.autograd_meta() == nullptr) {
    return quantize_weight(master, recipe, weight_meta, transpose);
  }
  const bool delayed = std::holds_alternative<fp8::DelayedScaling>(recipe);
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const std::pair key{static_cast<const autograd::AutogradMeta*>(master.autograd_meta().get()), recipe.index()};
  auto it = c.fp8_entries.find(key);
  if (it != c.fp8_entries.end()) {
    const Fp8Entry& e = it->second;
    // Delayed: the codes must have been made under the meta's current scale version (update() and load_state_dict
    // bump it, on the host: no read of the device). Within a version the miss already recorded W's amax into the
    // history slot, which only those calls reset, so a hit records nothing.
    const bool valid = e.copy && e.data == master.data_ptr() && e.meta == weight_meta &&
                       same_weight_quantization(e.recipe, recipe) && (!transpose || e.copy->has_transpose()) &&
                       (!delayed || (weight_meta && weight_meta->scale_version == e.copy->scale_version));
    if (valid) {
      ++c.stats.hits;
      ++c.stats.fp8_hits;
      return e.copy;
    }
  }
  auto copy = quantize_weight(master, recipe, weight_meta, transpose);
  c.fp8_entries.insert_or_assign(key, Fp8Entry{copy, master.data_ptr(), weight_meta, recipe, master.autograd_meta()});
  ++c.stats.casts;
  ++c.stats.fp8_casts;
  return copy;
}

Tensor compute_copy(const Tensor& master, DType dtype) { return compute_copy(master, dtype, 0); }

Tensor compute_copy(const Tensor& master, DType dtype, int64_t padded_rows) {
  MPT_CHECK(master.defined(), "[compute_copy] undefined master tensor");
  const bool pad = padded_rows > 0;
  if (pad) {
    MPT_CHECK(master.dim() == 2 && padded_rows > master.size(0),
              "[compute_copy] padded_rows {} must exceed the rows of a 2-d master, got {}", padded_rows,
              master.meta_str());
    MPT_CHECK(!autograd::is_grad_enabled(),
              "[compute_copy] a padded copy is made with grad mode off (the GEMM's weight gradient goes to the "
              "master)");
  }
  if (!pad && master.dtype() == dtype) return master;
  if (master.dtype() != DType::F32 || !master.is_leaf() || master.autograd_meta() == nullptr)
    return pad ? ops::padded_rows(master, padded_rows, dtype) : master.to(dtype);
  const bool wants_grad = master.requires_grad() && autograd::is_grad_enabled();
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  Entry& e = c.entries[{master.autograd_meta().get(), dtype, padded_rows}];
  if (e.copy.defined() && e.data == master.data_ptr() && e.requires_grad == wants_grad) {
    ++c.stats.hits;
    return e.copy;
  }
  e = Entry{pad ? ops::padded_rows(master, padded_rows, dtype) : make_copy(master, dtype, wants_grad),
            master.data_ptr(), wants_grad, master.autograd_meta()};
  ++c.stats.casts;
  return e.copy;
}

void invalidate_compute_copies(const Tensor& master) { invalidate_compute_copies(master, Tensor()); }

Tensor refreshable_compute_copy(const Tensor& master) {
  if (!master.defined() || master.dtype() != DType::F32 || master.autograd_meta() == nullptr ||
      !master.is_contiguous())
    return {};
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const autograd::AutogradMeta* id = master.autograd_meta().get();
  Tensor found;
  const auto first = c.entries.lower_bound({id, DType{}, int64_t{0}});
  for (auto it = first; it != c.entries.end() && std::get<0>(it->first) == id; ++it) {
    const Entry& e = it->second;
    if (!e.copy.defined() || e.data != master.data_ptr() || !e.copy.is_contiguous()) continue;
    if (e.copy.dtype() != DType::BF16 && e.copy.dtype() != DType::F16) continue;
    if (!found.defined() || std::get<2>(it->first) > 0) found = e.copy;  // the padded one, when there are two
  }
  return found;
}

void invalidate_compute_copies(const Tensor& master, const Tensor& keep) {
  if (!master.defined() || master.autograd_meta() == nullptr) return;
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const autograd::AutogradMeta* id = master.autograd_meta().get();
  const auto first = c.entries.lower_bound({id, DType{}, int64_t{0}});
  for (auto it = first; it != c.entries.end() && std::get<0>(it->first) == id;) {
    if (keep.defined() && it->second.copy.shares_storage(keep)) {
      ++it;
    } else {
      it = c.entries.erase(it);
    }
  }
  for (auto it = c.fp8_entries.lower_bound({id, size_t{0}}); it != c.fp8_entries.end() && it->first.first == id;)
    it = c.fp8_entries.erase(it);
}

void invalidate_compute_copies() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.entries.clear();
  c.fp8_entries.clear();
}

CastCacheStats cast_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  CastCacheStats s = c.stats;
  s.fp8_live = static_cast<int64_t>(c.fp8_entries.size());
  s.live = static_cast<int64_t>(c.entries.size()) + s.fp8_live;
  return s;
}

void reset_cast_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.stats = {};
}

}  // namespace mpt::amp
