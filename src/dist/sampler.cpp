// src/dist/sampler.cpp: DistributedSampler: a seeded per-epoch permutation, padded or cut, strided by rank.
#include "mpt/dist/sampler.h"

#include <numeric>
#include <random>

#include "mpt/core/error.h"

namespace mpt::dist {

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int ranks, const SamplerOptions& options)
    : n_(dataset_size), rank_(rank), ranks_(ranks), options_(options) {
  MPT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "[DistributedSampler] rank {} of {} ranks", rank, ranks);
  MPT_CHECK(dataset_size >= 0, "[DistributedSampler] dataset size {} is negative", dataset_size);
  MPT_CHECK(!options.drop_last || dataset_size >= ranks, "[DistributedSampler] drop_last with {} examples for {} "
            "ranks leaves every rank empty", dataset_size, ranks);
  per_rank_ = options.drop_last ? n_ / ranks_ : (n_ + ranks_ - 1) / ranks_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {  // Fisher-Yates with a 64-bit Mersenne Twister seeded by (seed, epoch): rank-independent
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch_));
    for (int64_t i = n_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  const int64_t total = per_rank_ * ranks_;
  for (int64_t i = n_; i < total; ++i) order.push_back(order[static_cast<size_t>((i - n_) % std::max<int64_t>(n_, 1))]);
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = rank_; i < total; i += ranks_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace mpt::dist
