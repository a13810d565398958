// src/data/sampler.cpp: the rank-aware window sampler: per-epoch offsets and orders drawn from (seed, epoch).
#include "mpt/data/sampler.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "data/sampler_state.h"
#include "data/shuffle.h"
#include "mpt/core/error.h"

namespace mpt::data {
WindowSampler::WindowSampler(const SamplerOptions& o) : o_(o) {
  MPT_CHECK(o.window >= 2, "[sampler] window {} must be at least 2 (seq + 1)", o.window);
  MPT_CHECK(o.batch >= 1 && o.world >= 1 && o.rank >= 0 && o.rank < o.world,
            "[sampler] batch {} must be positive and rank {} within world size {}", o.batch, o.rank, o.world);
  MPT_CHECK(o.tokens / o.window >= o.batch * o.world,
            "[sampler] {} tokens hold {} windows of {} (seq + 1), fewer than one batch of {} ({} per rank x {} ranks): "
            "use more data, a shorter --seq or a smaller --batch", o.tokens, o.tokens / o.window, o.window,
            o.batch * o.world, o.batch, o.world);
  start_epoch(0);
}

void WindowSampler::start_epoch(int64_t epoch) {
  detail::SplitMix64 g{detail::epoch_seed(o_.seed, epoch)};
  // The offset keeps at least one batch of windows in the epoch.
  const int64_t slack = o_.tokens - o_.batch * o_.world * o_.window;
  offset_ = static_cast<int64_t>(g.below(static_cast<uint64_t>(std::min(o_.window, slack + 1))));
  order_ = detail::random_permutation((o_.tokens - offset_) / o_.window, g);
  pos_ = {epoch, 0};
}

int64_t WindowSampler::batches_per_epoch() const {
  return static_cast<int64_t>(order_.size()) / (o_.batch * o_.world);
}

std::vector<int64_t> WindowSampler::next() {
  const int64_t step = o_.batch * o_.world;
  if (pos_.index + step > static_cast<int64_t>(order_.size())) start_epoch(pos_.epoch + 1);
  std::vector<int64_t> starts(static_cast<size_t>(o_.batch));
  const int64_t first = pos_.index + o_.rank * o_.batch;
  for (int64_t b = 0; b < o_.batch; ++b)
    starts[static_cast<size_t>(b)] = offset_ + order_[static_cast<size_t>(first + b)] * o_.window;
  pos_.index += step;
  return starts;
}

void WindowSampler::set_position(SamplerPosition p) {
  MPT_CHECK(p.epoch >= 0 && p.index >= 0, "[sampler] position (epoch {}, index {}) must not be negative", p.epoch,
            p.index);
  start_epoch(p.epoch);
  const int64_t step = o_.batch * o_.world;
  MPT_CHECK(p.index % step == 0 && p.index <= static_cast<int64_t>(order_.size()),
            "[sampler] index {} of epoch {} is not a batch boundary (multiples of {} up to {} windows)", p.index,
            p.epoch, step, order_.size());
  pos_ = p;
}

std::string WindowSampler::state_json() const {
  const nlohmann::json j{{"sampler", "window"}, {"version", 1}, {"seed", o_.seed}, {"window", o_.window},
                         {"tokens", o_.tokens}, {"global_batch", o_.world * o_.batch}, {"epoch", pos_.epoch},
                         {"index", pos_.index}};
  return j.dump();
}

void WindowSampler::load_state_json(std::string_view text) {
  const SamplerPosition p = detail::read_sampler_state(text, "window", "sampler", [&](const auto& check) {
    check("tokens", o_.tokens, "the data differs from the saved run's");
    check("window", o_.window, "give the saved run's --seq");
    check("seed", o_.seed, "give the saved run's --seed");
    check("global_batch", o_.world * o_.batch,
          "keep ranks x --batch as it was (the ranks may change, the windows per batch may not)");
  });
  set_position(p);
}

}  // namespace mpt::data
