// src/amp/master_weights.cpp: the cache of low-precision compute copies and the FP32 gradient hand-off.
#include "mpt/amp/master_weights.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/cast.h"
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
  bool rewritten = false;  // an optimizer step rewrote it (fp8_copies_rewritten): its tensors stay while it is cached
  bool measured = false;   // telemetry was measured when it was made (a rewritten copy is not)
};

// The key of the delayed-scaling copies (the only ones an optimizer step rewrites).
constexpr size_t kDelayedIndex = 0;
static_assert(std::is_same_v<std::variant_alternative_t<kDelayedIndex, fp8::Fp8Recipe>, fp8::DelayedScaling>);

// Several masters' copies packed as the rows of one tensor (packed_compute_copy); each master's entry in `entries`
// is a view of its rows while the packing is current.
struct PackedEntry {
  Tensor packed;
  std::vector<std::shared_ptr<autograd::AutogradMeta>> owners;
};
using PackedKey = std::pair<std::vector<const autograd::AutogradMeta*>, DType>;

struct Cache {
  std::mutex mutex;
  std::map<std::tuple<const autograd::AutogradMeta*, DType, int64_t>, Entry> entries;  // (master, dtype, padded rows)
  std::map<std::pair<const autograd::AutogradMeta*, size_t>, Fp8Entry> fp8_entries;
  std::map<PackedKey, PackedEntry> packed;
  CastCacheStats stats;
};

Cache& cache() {
  static Cache c;
  return c;
}

// Adds the copy's gradient into the master's, in the master's gradient dtype (autograd::grad_dtype), then clears
// the copy's.
void hand_off(const Tensor& master, const Tensor& copy) {
  const Tensor g = copy.grad();
  if (!g.defined()) return;
  copy.set_grad(Tensor{});
  autograd::NoGradGuard no_grad;
  const Tensor existing = master.grad();
  const DType want = existing.defined() ? existing.dtype() : autograd::grad_dtype(master);
  const Tensor gm = g.dtype() == want ? g : g.to(want);
  if (existing.defined()) {
    ops::add_(existing, gm);
  } else {
    master.set_grad(gm);
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
    // A copy an optimizer step rewrote measured no telemetry: a step that collects it remakes the copy.
    const bool same = e.copy && e.data == master.data_ptr() && e.meta == weight_meta &&
                      same_weight_quantization(e.recipe, recipe) && (!transpose || e.copy->has_transpose());
    const bool unmeasured = delayed && weight_meta && weight_meta->collect_telemetry && !e.measured;
    const bool valid = same && !unmeasured &&
                       (!delayed || (weight_meta && weight_meta->scale_version == e.copy->scale_version));
    if (valid) {
      ++c.stats.hits;
      ++c.stats.fp8_hits;
      return e.copy;
    }
    if (same && e.rewritten) {  // requantized into the tensors it had (made afresh, then copied in: a rare path)
      Fp8Entry& kept = it->second;
      const auto fresh = quantize_weight(master, recipe, weight_meta, kept.copy->has_transpose());
      auto into = std::make_shared<fp8::Fp8Weight>(*kept.copy);
      Tensor(into->rowwise.data).copy_(fresh->rowwise.data);
      Tensor(into->rowwise.scale_inv).copy_(fresh->rowwise.scale_inv);
      if (into->has_transpose()) {
        Tensor(into->columnwise.data).copy_(fresh->columnwise.data);
        if (!into->columnwise.scale_inv.shares_storage(into->rowwise.scale_inv))
          Tensor(into->columnwise.scale_inv).copy_(fresh->columnwise.scale_inv);
      }
      into->scale_version = fresh->scale_version;
      kept.copy = into;
      kept.measured = weight_meta->collect_telemetry;
      ++c.stats.casts;
      ++c.stats.fp8_casts;
      return kept.copy;
    }
  }
  auto copy = quantize_weight(master, recipe, weight_meta, transpose);
  c.fp8_entries.insert_or_assign(key, Fp8Entry{copy, master.data_ptr(), weight_meta, recipe, master.autograd_meta(),
                                               false, weight_meta && weight_meta->collect_telemetry});
  ++c.stats.casts;
  ++c.stats.fp8_casts;
  return copy;
}

ops::AdamWSlot::Fp8Codes refreshable_fp8_copy(const Tensor& master) {
  if (!master.defined() || master.dtype() != DType::F32 || master.autograd_meta() == nullptr) return {};
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  const auto it = c.fp8_entries.find({master.autograd_meta().get(), kDelayedIndex});
  if (it == c.fp8_entries.end()) return {};
  const Fp8Entry& e = it->second;
  if (!e.copy || !e.meta || e.data != master.data_ptr() || e.copy->scale_version >= e.meta->scale_version) return {};
  const ops::Quantized& q = e.copy->rowwise;
  if (q.layout != ops::ScaleLayout::PerTensor || q.data.dtype() != DType::F8E4M3 || !q.data.is_contiguous() ||
      q.data.numel() != master.numel() || q.data.device() != master.device())
    return {};
  return {q.data, e.meta->scale, e.meta->amax_history.slice(0, 0, 1), q.scale_inv};
}

void fp8_copies_rewritten(std::span<const Tensor> masters) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  std::vector<Fp8Entry*> entries;
  std::vector<Tensor> rows, cols;  // the rewritten codes and W^T's, to transpose into
  for (const Tensor& master : masters) {
    MPT_CHECK(master.defined() && master.autograd_meta() != nullptr, "[fp8_copies_rewritten] expected an F32 master "
              "parameter, got {}", master.defined() ? master.meta_str() : "an undefined tensor");
    const auto it = c.fp8_entries.find({master.autograd_meta().get(), kDelayedIndex});
    MPT_CHECK(it != c.fp8_entries.end() && it->second.copy && it->second.meta,
              "[fp8_copies_rewritten] {} has no cached delayed-scaling FP8 copy (refreshable_fp8_copy gave none)",
              master.meta_str());
    entries.push_back(&it->second);
    if (it->second.copy->has_transpose()) {
      rows.push_back(it->second.copy->rowwise.data);
      cols.push_back(it->second.copy->columnwise.data);
    }
  }
  ops::transpose_codes(rows, cols);
  for (Fp8Entry* e : entries) {
    auto copy = std::make_shared<fp8::Fp8Weight>(*e->copy);
    copy->scale_version = e->meta->scale_version;
    e->copy = std::move(copy);
    e->rewritten = true;
    e->measured = false;
  }
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

namespace {

void check_packable(const std::vector<Tensor>& masters, const char* op) {
  MPT_CHECK(!masters.empty() && masters[0].defined() && masters[0].dim() == 2,
            "[{}] expected one or more 2-d weights [M_i, K], got {}", op,
            masters.empty() ? std::string("none") : masters[0].defined() ? masters[0].meta_str() : "undefined");
  for (const Tensor& m : masters) {
    MPT_CHECK(m.defined() && m.dim() == 2 && m.size(1) == masters[0].size(1) && m.dtype() == masters[0].dtype() &&
                  m.device() == masters[0].device(),
              "[{}] every weight must be [M_i, {}] of {} on {}, got {}", op, masters[0].size(1), masters[0].dtype(),
              masters[0].device(), m.defined() ? m.meta_str() : "undefined");
  }
}

// The masters converted to `dtype` into the rows of one new tensor, in order (no gradient).
Tensor pack_rows(const std::vector<Tensor>& masters, DType dtype, std::vector<Tensor>* views = nullptr) {
  int64_t rows = 0;
  for (const Tensor& m : masters) rows += m.size(0);
  Tensor packed = Tensor::empty({rows, masters[0].size(1)}, dtype, masters[0].device());
  int64_t at = 0;
  for (const Tensor& m : masters) {
    Tensor view = packed.slice(0, at, at + m.size(0));
    view.copy_(m.detach());
    if (views != nullptr) views->push_back(view);
    at += m.size(0);
  }
  return packed;
}

// Whether every master's cached copy is still the view of its rows in `packed` (none was dropped or remade since).
bool packing_current(Cache& c, const Tensor& packed, const std::vector<Tensor>& masters, DType dtype) {
  int64_t at = 0;
  for (const Tensor& m : masters) {
    const auto it = c.entries.find({m.autograd_meta().get(), dtype, 0});
    const void* rows = static_cast<const char*>(packed.data_ptr()) + at * packed.size(1) * packed.element_size();
    if (it == c.entries.end() || !it->second.copy.defined() || it->second.data != m.data_ptr() ||
        it->second.requires_grad || !it->second.copy.shares_storage(packed) || it->second.copy.data_ptr() != rows)
      return false;
    at += m.size(0);
  }
  return true;
}

}  // namespace

Tensor packed_compute_copy(const std::vector<Tensor>& masters, DType dtype) {
  const char* op = "packed_compute_copy";
  check_packable(masters, op);
  MPT_CHECK(!autograd::is_grad_enabled(), "[{}] the packed copy is made with grad mode off (the GEMM's weight "
            "gradients go to the masters)", op);
  const bool cacheable = (dtype == DType::BF16 || dtype == DType::F16) &&
                         std::all_of(masters.begin(), masters.end(), [](const Tensor& m) {
                           return m.dtype() == DType::F32 && m.is_leaf() && m.autograd_meta() != nullptr;
                         });
  if (!cacheable) return pack_rows(masters, dtype);
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  PackedKey key{{}, dtype};
  for (const Tensor& m : masters) key.first.push_back(m.autograd_meta().get());
  if (const auto it = c.packed.find(key);
      it != c.packed.end() && packing_current(c, it->second.packed, masters, dtype)) {
    c.stats.hits += static_cast<int64_t>(masters.size());
    return it->second.packed;
  }
  std::vector<Tensor> views;
  PackedEntry e{pack_rows(masters, dtype, &views), {}};
  for (size_t i = 0; i < masters.size(); ++i) {
    const Tensor& m = masters[i];
    c.entries[{m.autograd_meta().get(), dtype, 0}] = Entry{views[i], m.data_ptr(), false, m.autograd_meta()};
    e.owners.push_back(m.autograd_meta());
  }
  c.stats.casts += static_cast<int64_t>(masters.size());
  return c.packed.insert_or_assign(std::move(key), std::move(e)).first->second.packed;
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

void invalidate_compute_copies(const Tensor& master, const Tensor& keep, bool keep_fp8) {
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
  for (auto it = c.fp8_entries.lower_bound({id, size_t{0}}); it != c.fp8_entries.end() && it->first.first == id;) {
    if (keep_fp8 && it->first.second == kDelayedIndex) {
      ++it;
    } else {
      it = c.fp8_entries.erase(it);
    }
  }
  for (auto it = c.packed.begin(); it != c.packed.end();) {
    const auto& ids = it->first.first;
    const bool holds = std::find(ids.begin(), ids.end(), id) != ids.end();
    if (holds && !(keep.defined() && it->second.packed.shares_storage(keep))) {
      it = c.packed.erase(it);
    } else {
      ++it;
    }
  }
}

void invalidate_compute_copies() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.entries.clear();
  c.fp8_entries.clear();
  c.packed.clear();
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
