// mpt/dist/sampler.h: DistributedSampler: each rank's share of a dataset's indices per epoch (torch's semantics).
#pragma once

#include <cstdint>
#include <vector>

namespace mpt::dist {

struct SamplerOptions {
  bool shuffle = true;     // a permutation per epoch, from (seed, epoch): the same on every rank
  uint64_t seed = 0;
  bool drop_last = false;  // drop the tail that does not divide evenly; else pad by repeating the first indices
};

// torch.utils.data.DistributedSampler: the epoch's order (a seeded permutation, or 0..n-1) is cut to a multiple of
// `ranks` (drop_last) or padded to one by wrapping around, and rank r takes positions r, r + ranks, r + 2 ranks, ...
// Every rank gets the same count, so every rank runs the same number of steps (a data-parallel job needs that);
// together the ranks cover every index once per epoch (padding repeats a few). Call set_epoch before each epoch.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int ranks, const SamplerOptions& options = {});
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t size() const { return per_rank_; }  // indices per rank per epoch
  std::vector<int64_t> indices() const;       // this rank's, for the current epoch

 private:
  int64_t n_;
  int rank_, ranks_;
  SamplerOptions options_;
  int64_t per_rank_;
  int64_t epoch_ = 0;
};

}  // namespace mpt::dist
