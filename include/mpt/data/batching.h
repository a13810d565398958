// mpt/data/batching.h: batches of variable-length sequences: dynamic padding, a sampler that groups similar lengths.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpt/core/tensor.h"
#include "mpt/data/sampler.h"

namespace mpt::data {

struct PadOptions {
  int64_t pad_id = 0;           // written into `ids` past a sample's end
  int64_t pad_to_multiple = 1;  // T rounds up to a multiple of this (fewer distinct shapes, tensor-core friendly)
  int64_t max_length = 0;       // > 0: T never exceeds it, and a longer sample is an error unless `truncate`
  bool truncate = false;        // cut longer samples to max_length instead
};

struct PaddedBatch {
  Tensor ids;          // [B, T] I64 on the CPU: pad_id past each sample's end
  Tensor targets;      // [B, T] I64 on the CPU: next-token targets, -100 (cross_entropy's ignore_index) past the end;
                       // undefined for pad_batch
  Tensor lengths;      // [B] I32 on the CPU: each sample's real length (>= 1)
  int64_t tokens = 0;  // real positions: the sum of lengths
  double padding_fraction() const;  // 1 - tokens / (B x T): the share of the batch's work spent on padding
};

// Pads the samples to the longest one (T = its length rounded up to pad_to_multiple, at most max_length when set).
// Ids must not be negative.
PaddedBatch pad_batch(std::span<const std::vector<int32_t>> samples, const PadOptions& o = {});

// Language modelling: a sample s of n >= 2 ids gives the inputs s[0 .. n-1) and the targets s[1 .. n), so its length
// is n - 1. max_length bounds that length (the model's context): a truncated sample keeps its first max_length + 1 ids.
PaddedBatch pad_lm_batch(std::span<const std::vector<int32_t>> samples, const PadOptions& o = {});

struct BucketSamplerOptions {
  std::vector<int64_t> lengths;  // every sample's length (>= 1)
  int64_t batch = 1;             // samples per rank per batch
  int64_t bucket_batches = 32;   // global batches per window sorted by length: 1 is plain random batching
  int rank = 0, world = 1;
  uint64_t seed = 0;
};

// Epochs of batches whose samples have similar lengths, so that padding them wastes little. Epoch e visits the samples
// in an order drawn from (seed, e) (Fisher-Yates on SplitMix64, as WindowSampler) and drops the order's last
// samples that do not fill a global batch of world x batch (drop_last; dropped before sorting, so that no length is
// dropped more often than another). It cuts the rest into windows of world x batch x bucket_batches samples, sorts each
// window by length (stable: ties keep the drawn order), cuts each window into global batches and visits those in an
// order drawn from a second stream of (seed, e), so long and short batches interleave. Rank r gets
// [r * batch, (r + 1) * batch) of each global batch: the ranks' samples have similar lengths, and so their steps
// similar times. The position and the saved state work as WindowSampler's.
class LengthBucketSampler {
 public:
  explicit LengthBucketSampler(BucketSamplerOptions o);
  std::vector<int64_t> next();  // this rank's sample indices, `batch` of them, shortest first; advances the position
  SamplerPosition position() const { return pos_; }
  void set_position(SamplerPosition p);  // epoch >= 0, index a multiple of world x batch within the epoch
  int64_t batches_per_epoch() const;
  const BucketSamplerOptions& options() const { return o_; }

  // {"sampler": "length_bucket", "version": 1, "seed", "bucket_batches", "samples", "lengths_hash", "global_batch",
  // "epoch", "index"}. Loading checks that the data (samples and the FNV-1a hash of their lengths), seed, bucket size
  // and global batch are this sampler's, and names what differs.
  std::string state_json() const;
  void load_state_json(std::string_view json);

 private:
  void start_epoch(int64_t epoch);
  BucketSamplerOptions o_;
  uint64_t lengths_hash_ = 0;
  SamplerPosition pos_;
  std::vector<int64_t> order_;  // sample indices of the current epoch, in visiting order, whole global batches
};

}  // namespace mpt::data
