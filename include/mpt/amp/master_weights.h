// mpt/amp/master_weights.h: FP32 master parameters and their cached low-precision compute copies.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mpt/core/tensor.h"
#include "mpt/fp8/scaling.h"
#include "mpt/ops/optim.h"

namespace mpt::fp8 {
struct Fp8Weight;  // mpt/fp8/linear.h
}

namespace mpt::amp {

// The copy of the F32 master parameter `master` in `dtype` (F16 or BF16) that GEMM-like ops use under Autocast.
// It is made once (one cast) and reused, by every micro-batch, until the parameter changes: an optimizer step
// invalidates the copies of the parameters it updates, Module::load_state_dict and Module::to invalidate all.
// The copy is a leaf of its own: when the master requires grad (and grad mode is on) so does the copy, and each time
// a backward finishes the copy's gradient it is converted to F32, added into the master's gradient (so micro-batch
// gradients accumulate in FP32, not in the low precision) and cleared, and the master's post-accumulate hooks run.
// A master that is not an F32 leaf, or already has `dtype`, is returned cast by a plain (recorded) to().
Tensor compute_copy(const Tensor& master, DType dtype);
// The same copy of a 2-d master [M, K] with zero rows appended up to padded_rows > M (ops::padded_rows), cached
// beside the unpadded one and invalidated with it: the weight a GEMM at a padded width reads (GPT's LM head at 50304
// of 50257 classes, ops::LinearOptions::out_padded), made once per optimizer step instead of padded per call. Made
// without gradient (the GEMM's weight gradient goes to the master): grad mode must be off.
Tensor compute_copy(const Tensor& master, DType dtype, int64_t padded_rows);

// The FP16/BF16 copies of several F32 master weights [M_i, K] packed as the rows of one [sum M_i, K] tensor, in order,
// for a GEMM that reads them as one weight (ops::packed_linear: Llama's gate and up, or q, k and v, in one GEMM).
// Cached like compute_copy, and each master's compute copy is then the view of its rows (the bits of its cast), so an
// optimizer step that rewrites those copies in place (refreshable_compute_copy) keeps the packing current; it is
// remade when any master's copy was dropped or remade since. Grad mode must be off (the GEMM's weight gradients go to
// the masters). Other dtypes, and masters that are not F32 leaves: packed afresh, uncached.
Tensor packed_compute_copy(const std::vector<Tensor>& masters, DType dtype);

// The FP8 copy of the master weight `master` (M, K) under `recipe` (fp8::quantize_fp8_weight: E4M3 codes of W and,
// when `transpose`, of W^T), for fp8::fp8_linear's fp8::Fp8LinearConfig::weight_fp8. Cached beside the compute copies,
// one per (master, recipe kind): made once and reused by every micro-batch until the same invalidations drop it (an
// optimizer step, Module::load_state_dict, Module::to). The copy holds no gradient: fp8_linear still takes the
// master, so dW lands in its FP32 gradient as without the cache. It is also remade, as a miss, when the master's
// storage, weight_meta or the recipe's weight parameters differ, when W^T is asked for and the copy lacks it, and
// under delayed scaling after any fp8::Fp8ScalingState::update() or load_state_dict (weight_meta's scale_version moved:
// the scale may have, and the host does not read the device to find out; a frozen weight is thus re-quantized once
// per step, as TransformerEngine re-casts its weights every step). Delayed scaling: making the copy records max |W|
// into weight_meta's history slot, which only those two calls reset, so reuses need not record it again. Telemetry is
// measured when the copy is made. A master that is not an F32 leaf is quantized afresh, uncached (and uncounted).
std::shared_ptr<const fp8::Fp8Weight> fp8_weight_copy(const Tensor& master, const fp8::Fp8Recipe& recipe,
                                                      const std::shared_ptr<fp8::Fp8TensorMeta>& weight_meta,
                                                      bool transpose = true);

// Drops the cached copies (FP16/BF16 and FP8) of one parameter, or of all.
void invalidate_compute_copies(const Tensor& master);
void invalidate_compute_copies();
// The same, keeping `keep` (one of the master's FP16/BF16 copies that the caller brought up to date) and, when
// keep_fp8, its delayed-scaling FP8 copy (which fp8_copies_rewritten brought up to date).
void invalidate_compute_copies(const Tensor& master, const Tensor& keep, bool keep_fp8 = false);

// The cached delayed-scaling FP8 copy of the F32 master `master` that an optimizer step may rewrite as it updates the
// master (ops::AdamWSlot::fp8, TransformerEngine's FP8 parameters) instead of dropping it, when the scale the next
// forward would remake it with is already known: fp8::Fp8ScalingState::update() ran since the copy was made (its
// scale version is older than its meta's), which also started the history's current slot afresh. Returns the copy's
// rowwise codes and scale_inv with the meta's scale and amax_history[0] (into which the step folds max |W|, as
// remaking the copy would); nothing (codes undefined) when no such copy is cached. The Trainer updates the scales
// before the optimizer step for this; a program that steps first and updates after keeps the old rule (the copy is
// dropped and remade by the next forward): the same bits either way.
ops::AdamWSlot::Fp8Codes refreshable_fp8_copy(const Tensor& master);
// After a step wrote the codes refreshable_fp8_copy returned for each of `masters`: makes W^T's codes from them (byte
// transposes, one launch for all on CUDA: ops::transpose_codes, when the copies have W^T) and marks each copy current
// under its meta's scale version, so the next forward reuses it. From then on a copy's tensors stay the same while it
// is cached: a miss (update() again, telemetry is due) requantizes into them, so a CUDA graph whose forward read them
// keeps reading the current codes.
void fp8_copies_rewritten(std::span<const Tensor> masters);

// The cached FP16/BF16 copy of the F32 master `master` that an optimizer step may rewrite in place instead of dropping
// it (ops::AdamWSlot::compute_copy: each updated element rounded to the copy's dtype, the cast's bits): contiguous,
// its first master.numel() elements the master's (a padded copy's extra rows stay zero; when the master has a padded
// and an unpadded copy, the padded one). Undefined when none is cached. The step then calls
// invalidate_compute_copies(master, copy) so that the master's other copies go.
Tensor refreshable_compute_copy(const Tensor& master);

struct CastCacheStats {
  int64_t casts = 0;  // copies made (FP16/BF16 and FP8)
  int64_t hits = 0;   // requests served from the cache
  int64_t live = 0;   // cached copies now
  int64_t fp8_casts = 0, fp8_hits = 0, fp8_live = 0;  // of which FP8 weight copies
};
CastCacheStats cast_cache_stats();
void reset_cast_cache_stats();

}  // namespace mpt::amp
