// src/data/batching.cpp: dynamic padding of variable-length samples, and the length-bucketing sampler.
#include "mpt/data/batching.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/sampler_state.h"
#include "data/shuffle.h"
#include "mpt/core/error.h"

namespace mpt::data {
namespace {

constexpr int64_t kIgnoreIndex = -100;  // ops::cross_entropy skips these targets

// Pads samples[i][0 .. length_i) into ids and, for language modelling (shift = 1), samples[i][1 .. length_i + 1)
// into targets.
PaddedBatch pad(std::span<const std::vector<int32_t>> samples, const PadOptions& o, const char* op, int64_t shift) {
  MPT_CHECK(!samples.empty(), "[{}] the batch has no samples", op);
  MPT_CHECK(o.pad_to_multiple >= 1, "[{}] pad_to_multiple {} must be at least 1", op, o.pad_to_multiple);
  MPT_CHECK(o.max_length >= 0, "[{}] max_length {} must not be negative (0: no limit)", op, o.max_length);
  const int64_t batch = static_cast<int64_t>(samples.size());
  std::vector<int32_t> lengths(samples.size());
  int64_t longest = 0, tokens = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const std::vector<int32_t>& s = samples[static_cast<size_t>(i)];
    const int64_t n = static_cast<int64_t>(s.size()) - shift;  // positions this sample fills
    MPT_CHECK(!s.empty(), "[{}] sample {} is empty", op, i);
    MPT_CHECK(n >= 1, "[{}] sample {} has 1 id; language modelling needs at least 2 (inputs and next-id targets)", op,
              i);
    MPT_CHECK(o.max_length == 0 || n <= o.max_length || o.truncate,
              "[{}] sample {} has length {}, more than max_length {} (set truncate to cut it)", op, i, n,
              o.max_length);
    const int64_t kept = o.max_length > 0 ? std::min(n, o.max_length) : n;
    for (int64_t t = 0; t < kept + shift; ++t)
      MPT_CHECK(s[static_cast<size_t>(t)] >= 0, "[{}] sample {} has id {} at position {}; ids must not be negative",
                op, i, s[static_cast<size_t>(t)], t);
    MPT_CHECK(kept <= INT32_MAX, "[{}] sample {} has length {}, more than an I32 length holds", op, i, kept);
    lengths[static_cast<size_t>(i)] = static_cast<int32_t>(kept);
    longest = std::max(longest, kept);
    tokens += kept;
  }
  int64_t seq = (longest + o.pad_to_multiple - 1) / o.pad_to_multiple * o.pad_to_multiple;
  if (o.max_length > 0) seq = std::min(seq, o.max_length);  // the model's context wins over the rounding

  PaddedBatch out;
  out.ids = Tensor::empty({batch, seq}, DType::I64);  // (B,T)
  int64_t* ids = out.ids.data<int64_t>();
  std::fill_n(ids, batch * seq, o.pad_id);
  int64_t* targets = nullptr;
  if (shift > 0) {
    out.targets = Tensor::empty({batch, seq}, DType::I64);  // (B,T)
    targets = out.targets.data<int64_t>();
    std::fill_n(targets, batch * seq, kIgnoreIndex);
  }
  for (int64_t i = 0; i < batch; ++i) {
    const int32_t* s = samples[static_cast<size_t>(i)].data();
    for (int64_t t = 0; t < lengths[static_cast<size_t>(i)]; ++t) {
      ids[i * seq + t] = s[t];
      if (targets) targets[i * seq + t] = s[t + 1];
    }
  }
  out.lengths = Tensor::from_vector(lengths, {batch});  // (B)
  out.tokens = tokens;
  return out;
}

// FNV-1a over the lengths' little-endian bytes: the same on every platform.
uint64_t fnv1a(const std::vector<int64_t>& values) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t v : values) {
    const auto u = static_cast<uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (u >> (8 * byte)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

}  // namespace

double PaddedBatch::padding_fraction() const {
  if (!ids.defined() || ids.numel() == 0) return 0;
  return 1 - static_cast<double>(tokens) / static_cast<double>(ids.numel());
}

PaddedBatch pad_batch(std::span<const std::vector<int32_t>> samples, const PadOptions& o) {
  return pad(samples, o, "pad_batch", 0);
}

PaddedBatch pad_lm_batch(std::span<const std::vector<int32_t>> samples, const PadOptions& o) {
  return pad(samples, o, "pad_lm_batch", 1);
}

LengthBucketSampler::LengthBucketSampler(BucketSamplerOptions o) : o_(std::move(o)) {
  const int64_t samples = static_cast<int64_t>(o_.lengths.size());
  MPT_CHECK(samples > 0, "[length_bucket_sampler] no samples (lengths is empty)");
  MPT_CHECK(o_.batch >= 1 && o_.world >= 1 && o_.rank >= 0 && o_.rank < o_.world,
            "[length_bucket_sampler] batch {} must be positive and rank {} within world size {}", o_.batch, o_.rank,
            o_.world);
  MPT_CHECK(o_.bucket_batches >= 1, "[length_bucket_sampler] bucket_batches {} must be at least 1 (1: no bucketing)",
            o_.bucket_batches);
  MPT_CHECK(samples >= o_.batch * o_.world,
            "[length_bucket_sampler] {} samples are fewer than one batch of {} ({} per rank x {} ranks)", samples,
            o_.batch * o_.world, o_.batch, o_.world);
  for (int64_t i = 0; i < samples; ++i)
    MPT_CHECK(o_.lengths[static_cast<size_t>(i)] >= 1, "[length_bucket_sampler] sample {} has length {}; lengths "
              "must be at least 1", i, o_.lengths[static_cast<size_t>(i)]);
  lengths_hash_ = fnv1a(o_.lengths);
  start_epoch(0);
}

void LengthBucketSampler::start_epoch(int64_t epoch) {
  const int64_t step = o_.batch * o_.world;
  const int64_t batches = static_cast<int64_t>(o_.lengths.size()) / step;
  detail::SplitMix64 samples_rng{detail::epoch_seed(o_.seed, epoch, 0)};
  std::vector<int64_t> drawn = detail::random_permutation(static_cast<int64_t>(o_.lengths.size()), samples_rng);
  drawn.resize(static_cast<size_t>(batches * step));  // drop_last
  const auto by_length = [&](int64_t a, int64_t b) {
    return o_.lengths[static_cast<size_t>(a)] < o_.lengths[static_cast<size_t>(b)];
  };
  const int64_t window = step * o_.bucket_batches;
  for (int64_t w = 0; w < batches * step; w += window)
    std::stable_sort(drawn.begin() + w, drawn.begin() + std::min(w + window, batches * step), by_length);
  detail::SplitMix64 batches_rng{detail::epoch_seed(o_.seed, epoch, 1)};
  const std::vector<int64_t> visit = detail::random_permutation(batches, batches_rng);
  order_.resize(drawn.size());
  for (int64_t b = 0; b < batches; ++b)
    std::copy_n(drawn.begin() + visit[static_cast<size_t>(b)] * step, step, order_.begin() + b * step);
  pos_ = {epoch, 0};
}

int64_t LengthBucketSampler::batches_per_epoch() const {
  return static_cast<int64_t>(o_.lengths.size()) / (o_.batch * o_.world);
}

std::vector<int64_t> LengthBucketSampler::next() {
  const int64_t step = o_.batch * o_.world;
  if (pos_.index + step > static_cast<int64_t>(order_.size())) start_epoch(pos_.epoch + 1);
  const auto first = order_.begin() + pos_.index + o_.rank * o_.batch;
  std::vector<int64_t> indices(first, first + o_.batch);
  pos_.index += step;
  return indices;
}

void LengthBucketSampler::set_position(SamplerPosition p) {
  MPT_CHECK(p.epoch >= 0 && p.index >= 0, "[length_bucket_sampler] position (epoch {}, index {}) must not be negative",
            p.epoch, p.index);
  const int64_t step = o_.batch * o_.world;
  MPT_CHECK(p.index % step == 0 && p.index <= batches_per_epoch() * step,
            "[length_bucket_sampler] index {} of epoch {} is not a batch boundary (multiples of {} up to {} samples)",
            p.index, p.epoch, step, batches_per_epoch() * step);
  start_epoch(p.epoch);
  pos_ = p;
}

std::string LengthBucketSampler::state_json() const {
  const nlohmann::json j{{"sampler", "length_bucket"},
                         {"version", 1},
                         {"seed", o_.seed},
                         {"bucket_batches", o_.bucket_batches},
                         {"samples", static_cast<int64_t>(o_.lengths.size())},
                         {"lengths_hash", fmt::format("{:016x}", lengths_hash_)},
                         {"global_batch", o_.world * o_.batch},
                         {"epoch", pos_.epoch},
                         {"index", pos_.index}};
  return j.dump();
}

void LengthBucketSampler::load_state_json(std::string_view text) {
  const SamplerPosition p =
      detail::read_sampler_state(text, "length_bucket", "length_bucket_sampler", [&](const auto& check) {
        check("samples", static_cast<int64_t>(o_.lengths.size()), "the data differs from the saved run's");
        check("lengths_hash", fmt::format("{:016x}", lengths_hash_),
              "the samples' lengths differ from the saved run's: the data differs");
        check("seed", o_.seed, "give the saved run's --seed");
        check("bucket_batches", o_.bucket_batches, "give the saved run's bucket size");
        check("global_batch", o_.world * o_.batch,
              "keep ranks x --batch as it was (the ranks may change, the samples per batch may not)");
      });
  set_position(p);
}

}  // namespace mpt::data
