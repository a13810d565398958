// mpt/fp8/scaling.h: FP8 recipes (delayed, current, block scaling), per-tensor scaling state, its manager, telemetry.
#pragma once

#include <cfloat>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::ops {
struct Quantized;  // mpt/ops/cast.h
}

namespace mpt::fp8 {

// HYBRID: forward tensors (input, weight) E4M3, gradients (grad_output) E5M2. E4M3: every tensor E4M3.
// Pure E5M2 is not offered (TransformerEngine rejects it too).
enum class Fp8Format : uint8_t { Hybrid, E4M3 };
enum class AmaxAlgo : uint8_t { Max, MostRecent };

// Per-tensor scales from an amax history (shared/design/scaling-spec.md B1): scale = fp8_max * 2^-margin / amax,
// amax = the history's max (Max) or this step's amax (MostRecent). Scales change in Fp8ScalingState::update().
struct DelayedScaling {
  int64_t amax_history_len = 1024;
  AmaxAlgo algo = AmaxAlgo::Max;
  int margin = 0;  // 0..64
  Fp8Format format = Fp8Format::Hybrid;
};

// Per-tensor scales from the tensor being quantized (B2): scale = compute_scale_from_amax(amax(x)).
struct CurrentScaling {
  Fp8Format format = Fp8Format::Hybrid;
  bool power_2_scale = false;
  float amax_epsilon = 0.0f;
};

// E4M3 everywhere with one FP32 scale per block (B3): 1x128 for activations and gradients, 128x128 for weights.
struct BlockScaling {
  bool power_2_scale = true;
};

using Fp8Recipe = std::variant<DelayedScaling, CurrentScaling, BlockScaling>;

// What an FP8 tensor is in a GEMM: it decides the format (a gradient is E5M2 under HYBRID).
enum class Fp8Role : uint8_t { Input, Weight, GradOutput };
const char* to_string(Fp8Role role);  // "input", "weight", "grad_output" (meta names and errors)

// The FP8 dtype of a tensor of `role` under `recipe` (f8e4m3 or f8e5m2).
DType fp8_dtype(const Fp8Recipe& recipe, Fp8Role role);
// The largest finite value of an FP8 dtype: 448 (f8e4m3), 57344 (f8e5m2).
float fp8_max(DType fp8);

// TransformerEngine's compute_scale_from_amax (B2): amax < epsilon -> epsilon; amax 0, Inf or NaN -> 1;
// s = fp8_max / amax (one IEEE division); an infinite s -> inf_value; power_2 keeps s's exponent only. The host face of
// kernels::math::ScaleFromAmax, the project's one amax -> scale function.
float compute_scale_from_amax(float amax, float fp8_max, bool power_2 = false, float epsilon = 0.0f,
                              float inf_value = FLT_MAX);

// max |x| with NaN elements ignored and Inf kept (TE's fmaxf amax; ops::amax propagates NaN instead). 0 for an
// empty tensor. Returns a host float: on a CUDA tensor it waits for the device (and copies x to the host when x
// holds a NaN).
float amax_ignore_nan(const Tensor& x);

// Telemetry of one quantization (Fp8ScalingState::set_collect_telemetry).
struct Fp8TensorStats {
  float amax = 0.0f;     // max |x| (NaN ignored)
  float scale = 0.0f;    // the per-tensor scale; block scaling: the smallest block scale (of the largest block amax)
  double saturated = 0;  // fraction of elements with |x * scale| > fp8_max (clipped to +-fp8_max; Inf counts)
  double flushed = 0;    // fraction of elements with x != 0 whose code is +-0 (lost to underflow)
  int64_t numel = 0;
  int64_t count = 0;     // quantizations measured so far; the fields above describe the last one
};

// The scaling state of one FP8 tensor (TE's per-tensor FP8 meta). Its tensors live on the state's device and are
// only ever updated in place, so every copy of the shared_ptr sees the same state.
struct Fp8TensorMeta {
  std::string name;
  Fp8Role role = Fp8Role::Input;
  DType dtype = DType::F8E4M3;  // the format this tensor is quantized to
  Tensor scale;                 // f32 0-d: q = fp8(x * scale); 1 initially
  Tensor scale_inv;             // f32 0-d: 1 / scale (rcp_rn), kept beside scale as TE does
  // (Current scaling: an input's scale and scale_inv are those of the codes a norm last wrote for it, new tensors each
  // time: nn::autocast_input_format. Nothing else reads them; each quantization finds its own scale.)
  // f32 [L]: [0] the current step's amax (max over every quantization since the last update), [1..L-1] the amaxes
  // of past updates, newest last. Used by delayed scaling only.
  Tensor amax_history;
  bool collect_telemetry = false;
  Fp8TensorStats stats{};
  // Bumped whenever update() or load_state_dict may have changed the scale: an FP8 weight copy made under an older
  // version is stale (compared on the host, without reading the device).
  uint64_t scale_version = 0;

  // amax_history[0] = fmax(amax_history[0], amax) on the meta's device (amax: 0-d f32 there, NaN-free; a kernel, no
  // host read).
  void record_amax(const Tensor& amax);
  void record_amax(float amax);  // the same from a host value (a NaN changes nothing)
  float current_amax() const;  // amax_history[0], as a host float
  // When collect_telemetry: stats = measure_quantization(x, q, scale), count + 1.
  void measure(const Tensor& x, const ops::Quantized& q, float scale);
};

// Telemetry of quantizing x into q: per-tensor q was made with `scale`; a block layout uses 1 / scale_inv of each
// element's block (exact for power-of-2 scales). Reads x and the codes on the host (one extra pass over both).
Fp8TensorStats measure_quantization(const Tensor& x, const ops::Quantized& q, float scale);

// The three metas of one FP8 linear layer.
struct Fp8LinearMetas {
  std::shared_ptr<Fp8TensorMeta> input, weight, grad_output;
};

// Called by update() with this step's amaxes as one contiguous f32 vector [metas] on the state's device (a copy of
// every meta's current amax, registration order). A data-parallel run MAX-reduces it in place, so every rank computes
// the same scales: one collective, which the update's kernel may wait for on the device rather than the host
// (train::DataParallel::attach). Ranks must register their metas in the same order. (Until 2026-12-03 the hook got one
// 0-d tensor per meta, and DataParallel read each to the host: a copy and a synchronisation per meta per step.)
using AmaxReduction = std::function<void(Tensor& amaxes)>;

// The metas of one model's FP8 tensors under one recipe: registration, scale updates, checkpoint state, telemetry.
class Fp8ScalingState {
 public:
  explicit Fp8ScalingState(Fp8Recipe recipe = DelayedScaling{}, Device device = Device::cpu());

  const Fp8Recipe& recipe() const { return recipe_; }
  Device device() const { return device_; }

  // Registers the meta of one FP8 tensor (scale 1, history zeros) or returns the existing one of that name (its
  // role must match). Every recipe has metas: delayed scaling keeps its scales there, all recipes their telemetry.
  std::shared_ptr<Fp8TensorMeta> register_tensor(const std::string& name, Fp8Role role);
  // "<prefix>.input", "<prefix>.weight", "<prefix>.grad_output".
  Fp8LinearMetas register_linear(const std::string& prefix);
  std::shared_ptr<Fp8TensorMeta> meta(const std::string& name) const;  // throws for an unknown name
  // The metas with a state of their own, in registration order (what state_dict() holds): shared names are not in it.
  const std::vector<std::shared_ptr<Fp8TensorMeta>>& metas() const { return metas_; }
  // `name` quantizes the same tensor as `with` (registered here if new): from now on it resolves to with's meta
  // (register_tensor, meta), so both quantize with one scale and fold one amax. For readers of one tensor that a
  // producer quantizes once for all (Llama's q, k, v of one norm output: nn::shared_input_format). A meta `name`
  // already had (registered from a checkpoint written before it was shared) is dropped: the two recorded the amaxes
  // of the same tensor. load_state_dict still accepts name's keys (into with's meta); state_dict() no longer has
  // them. Returns with's meta.
  std::shared_ptr<Fp8TensorMeta> share_tensor(const std::string& name, const std::string& with, Fp8Role role);
  const std::map<std::string, std::string>& shared_names() const { return shared_; }  // name -> the meta's name

  void set_amax_reduction(AmaxReduction hook) { reduction_ = std::move(hook); }

  // Delayed scaling: the fused update of B1 over every meta (the reduction hook first, then per meta: an amax of 0
  // leaves history and scale untouched; otherwise the scale is computed from the history before it rolls). Call it
  // once per optimizer step, after backward and before the next forward, skipped optimizer steps included (as TE
  // does): every micro-batch of a step then shares one set of scales. TE instead updates forward metas at the
  // outermost autocast exit and gradient metas at the end of backward, i.e. once per micro-batch. Current and block
  // scaling keep no state across steps: a no-op (the hook is not called). On a CUDA state everything runs on the
  // device (one launch per 54 metas, plus the hook's own work): no host round trip.
  void update();
  int64_t num_updates() const { return num_updates_; }
  // The host's side of an update() that a CUDA graph replayed (its kernel ran inside the graph): counts it and moves
  // every meta's scale version on, as update() does, so FP8 weight copies made before it are not reused after.
  void replayed_update();

  // "<name>.scale", "<name>.scale_inv", "<name>.amax_history" for every meta: CPU snapshots (clones) that later
  // updates do not touch. load_state_dict copies them back bit for bit into the registered metas (shapes must
  // match: the history length is part of the recipe); strict: a missing or unknown key is an error; nothing is
  // copied unless every check passes.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& dict, bool strict = true);

  // Telemetry (off by default). When on, every quantization of a registered tensor also measures amax, saturated
  // and flushed fractions: an extra read of the high-precision tensor and its codes on the host (on CUDA: a copy to
  // the host and a synchronisation per quantization). For debugging and monitoring runs, not for speed.
  void set_collect_telemetry(bool on);
  bool collect_telemetry() const { return collect_telemetry_; }
  std::map<std::string, Fp8TensorStats> telemetry() const;

 private:
  Fp8Recipe recipe_;
  Device device_;
  std::vector<std::shared_ptr<Fp8TensorMeta>> metas_;  // registration order (the reduction's order)
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> shared_;  // share_tensor's names -> the names of the metas they resolve to
  AmaxReduction reduction_;
  bool collect_telemetry_ = false;
  int64_t num_updates_ = 0;
};

}  // namespace mpt::fp8
