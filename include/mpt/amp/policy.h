// mpt/amp/policy.h: the precision policy (what GEMM-like ops compute in, per module) and the Autocast guard.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "mpt/core/device.h"
#include "mpt/core/dtype.h"

namespace mpt::fp8 {
class Fp8ScalingState;  // mpt/fp8/scaling.h
}  // namespace mpt::fp8

namespace mpt::amp {

struct QatPolicy;     // mpt/amp/qat.h
class Fp8GemmRule;    // mpt/amp/fp8_rule.h

// What a GEMM-like op (Linear, the LM head, and through their outputs attention and the MLP activation) computes in.
// FP8 GEMMs take FP8 operands and produce BF16 (the FP8 recipe decides formats and scales).
enum class Precision : uint8_t { FP32, FP16, BF16, FP8 };
std::string_view to_string(Precision p);
Precision parse_precision(std::string_view s);  // "fp32", "fp16", "bf16", "fp8"

// The dtype a GEMM in `p` produces: F32, F16, BF16, and BF16 for FP8.
DType output_dtype(Precision p);

// Which precision each GEMM-like op runs in. Everything else follows PyTorch's autocast lists: LayerNorm, softmax,
// the cross-entropy loss and reductions compute in FP32 (mptrain's kernels read FP16/BF16 storage and accumulate
// in FP32), and the residual stream stays in the parameters' dtype (FP32 masters) unless `residual` names a half
// dtype. See docs/numerics.md.
struct Policy {
  Precision compute = Precision::FP32;
  // Per-module overrides by dotted module path (Module::path()): the longest matching prefix wins, matched on whole
  // components ("h.1" matches "h.1.attn.c_attn" but not "h.10"). GPT's tied LM head is "lm_head".
  std::map<std::string, Precision> overrides;
  // FP8 GEMMs: the recipe and its scaling state (delayed-scaling histories, telemetry), shared by every FP8 layer;
  // each Linear registers its metas under its path on first use. Call fp8_state->update() once per optimizer step.
  std::shared_ptr<mpt::fp8::Fp8ScalingState> fp8_state;
  // Quantization-aware training (mpt/amp/qat.h): the Linear layers it names fake-quantize their weight (and input)
  // before the GEMM, which runs in the precision above (FP32, BF16 or FP16; not FP8). Null: none.
  std::shared_ptr<const QatPolicy> qat;
  // Which of the layers FP8 covers gain from it on this GPU (mpt/amp/fp8_rule.h): a layer the rule judges slower in
  // FP8 at its shape runs BF16 instead. Null: every layer the overrides give FP8 runs FP8.
  std::shared_ptr<const Fp8GemmRule> fp8_rule;
  // The residual stream's dtype (the embeddings' sum, every block's residual add, and their gradients). Unset: the
  // parameters' dtype, FP32 masters' under mixed precision (PyTorch autocast's regime: only GEMM-like ops run low).
  // BF16 or F16: the stream in a half dtype as llm.c keeps it and Megatron-LM by default (fp32_residual_connection
  // off): the embeddings' sum is rounded once and every residual add rounds its sum, and the norms read and write
  // half the bytes they do beside an FP32 stream (docs/numerics.md, "The residual stream"). F32, BF16 or F16.
  std::optional<DType> residual;
  Policy& residual_in(DType d) {
    residual = d;
    return *this;
  }
  // The FP32 masters' gradient dtype (autograd::set_grad_dtype, which the Trainer applies to every trainable
  // parameter). Unset or F32: FP32 gradients (PyTorch AMP's). BF16: llm.c's regime, half the gradients' memory; each
  // weight-gradient GEMM writes BF16 and adds later micro-batches into it, so every micro-batch's sum is rounded to
  // BF16 (docs/numerics.md, "BF16 gradients"). F32 or BF16.
  std::optional<DType> grads;
  Policy& grads_in(DType d) {
    grads = d;
    return *this;
  }

  // The precision the overrides give the module at `path`.
  Precision at(std::string_view path) const;
  // The precision a Linear at `path` with W [out, in] on `device` runs in: at(path), with FP8 turned to BF16 where
  // fp8_rule judges FP8 slower at that shape (the decision the layer, its norm and the report share).
  Precision at(std::string_view path, int64_t in, int64_t out, Device device) const;
  Policy& override_module(std::string path, Precision p) {
    overrides[std::move(path)] = p;
    return *this;
  }

  static Policy with_compute(Precision p) {
    Policy policy;
    policy.compute = p;
    return policy;
  }
  static Policy fp32() { return {}; }
  static Policy fp16() { return with_compute(Precision::FP16); }
  static Policy bf16() { return with_compute(Precision::BF16); }
  // FP8 GEMMs with the first and last blocks and the LM head kept in BF16 (the usual FP8 recipe: those layers are
  // the most sensitive; DeepSeek-V3 and TE's examples keep them in higher precision).
  // block_prefix: the module path of the blocks, "h" (GPT: h.0 ...) or "model.layers" (Llama).
  static Policy fp8(int64_t n_layer, std::shared_ptr<mpt::fp8::Fp8ScalingState> state,
                    std::string_view block_prefix = "h");
  // The policy a training recipe name selects (train_gpt's --precision, the benchmarks): "fp32", "bf16", "fp16",
  // "fp8-delayed" (TE's defaults: HYBRID formats, a 1024-step amax history, max), "fp8-current" or "fp8-block"
  // (DeepSeek-style 1x128 / 128x128), the FP8 ones through fp8() with a fresh scaling state on `device`.
  static Policy named(std::string_view name, int64_t n_layer, Device device, std::string_view block_prefix = "h");
};

// A residual stream dtype by name ("f32", "bf16", "f16": the command lines' --residual), else an error.
DType parse_residual_dtype(std::string_view name);

// A gradient dtype by name ("f32", "bf16": the command lines' --grads), else an error.
DType parse_grad_dtype(std::string_view name);

// The name a run's checkpoints carry for the recipe `base` ("bf16", "fp8-delayed", ...) under `policy`: `base`, with
// "+residual-<dtype>" for a residual stream other than FP32 and "+grads-<dtype>" for gradients other than FP32, so that
// a run resumes only with the stream and the gradients it trained with (bit-exact resume).
std::string precision_name(std::string base, const Policy& policy);

// The residual stream's dtype under the current policy for a model whose parameters are `params`: the policy's
// `residual`, else `params` (also outside any Autocast). `model` names the caller in the error for a dtype other
// than F32, BF16 or F16.
DType residual_dtype(DType params, std::string_view model);

// Makes `policy` the current one for this thread until the guard dies (guards nest; the innermost wins).
// Modules consult amp::current_policy() in forward; backward runs whatever forward recorded.
class Autocast {
 public:
  explicit Autocast(Policy policy);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  Policy policy_;
  const Policy* previous_;
};

// The innermost active policy of this thread, or nullptr outside any Autocast.
const Policy* current_policy();
// The precision of the module at `path` under the current policy (FP32 outside Autocast).
Precision current_precision(std::string_view path);

}  // namespace mpt::amp
