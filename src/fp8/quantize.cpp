// src/fp8/quantize.cpp: the one home of recipe-driven FP8 quantization: a tensor of a role (input, weight,
// grad_output) quantized under delayed, current or block scaling for the GEMMs that read it, on its device.
#include "fp8/quantize.h"

#include <string>
#include <tuple>
#include <variant>

#include "mpt/ops/cast.h"
#include "mpt/fp8/linear.h"
#include "ops/dispatch.h"

// The FP8 ops are built from the ops layer below (cast, matmul, reductions, dispatch).
using namespace mpt::ops;  // NOLINT(google-build-using-namespace)

namespace mpt::fp8 {
namespace detail {
namespace {

using fp8::Fp8Role;

// Per-tensor scaling (delayed or current): one pass quantizes t and, if asked, its transpose with one scale. Every
// scale and amax stays on t's device: delayed scaling reads the meta's scale and folds max |t| into its history
// (TE's amax_history[0]) in the same pass; current scaling computes amax and scale in a first pass.
Fp8Pair quantize_per_tensor(const Tensor& t, const fp8::Fp8Recipe& recipe, Fp8Role role,
                            const std::shared_ptr<fp8::Fp8TensorMeta>& meta, bool columnwise, const Tensor& dbias,
                            bool gelu_of_t) {
  const DType fmt = fp8::fp8_dtype(recipe, role);
  const auto* delayed = std::get_if<fp8::DelayedScaling>(&recipe);
  QuantizeOptions o;
  o.amax_ignore_nan = true;  // TE's amax skips NaN elements (scaling-spec B2, C5 and C6)
  // Every role folds its amax straight into the history's current slot (TE's amax_history[0]) in the quantizing
  // pass itself: no zeroing or folding launch (a cached weight copy records nothing again: amp::fp8_weight_copy).
  if (delayed != nullptr) {
    o.scale = meta->scale;
    o.amax = meta->amax_history.slice(0, 0, 1);
    o.amax_accumulate = true;
  } else {
    const auto& c = std::get<fp8::CurrentScaling>(recipe);
    o.power_of_2 = c.power_2_scale;
    o.amax_epsilon = c.amax_epsilon;
  }
  o.gelu = gelu_of_t;
  ops::Quantized q, qt;
  if (columnwise) o.dbias = dbias;
  if (columnwise) std::tie(q, qt) = quantize_fp8_transpose(t, fmt, o);
  else q = quantize_fp8(t, fmt, o);
  if (meta && meta->collect_telemetry) {  // a debugging aid: reads the device
    const auto* c = std::get_if<fp8::CurrentScaling>(&recipe);
    const float scale = c ? fp8::compute_scale_from_amax(fp8::amax_ignore_nan(t), fp8::fp8_max(fmt), c->power_2_scale,
                                                         c->amax_epsilon)
                          : meta->scale.item<float>();
    meta->measure(t, q, scale);
  }
  return {q, qt};
}

// Block scaling: weights 128x128 (the transposed codes share the tile scales), activations and gradients 1x128 with
// the columnwise copy quantized again from t along the other axis (scaling-spec B3); both from one read of t when
// both are wanted (ops::quantize_blockwise_transpose).
Fp8Pair quantize_block(const Tensor& t, const fp8::BlockScaling& r, Fp8Role role,
                       const std::shared_ptr<fp8::Fp8TensorMeta>& meta, bool rowwise, bool columnwise,
                       const Tensor& dbias, bool gelu_of_t) {
  BlockQuantizeOptions o{r.power_2_scale};
  o.gelu = gelu_of_t;  // an activation's 1x128 blocks only (quantize_for_gemm's check)
  const bool telemetry = meta && meta->collect_telemetry;
  Fp8Pair p;
  ops::Quantized q;
  if (role == Fp8Role::Weight && columnwise) {  // W^T: W's codes transposed, sharing the tile scales, same launch
    std::tie(q, p.columnwise) = quantize_blockwise_transpose(t, DType::F8E4M3, o, ScaleLayout::Block128x128);
  } else if (role == Fp8Role::Weight) {
    q = quantize_blockwise(t, DType::F8E4M3, ScaleLayout::Block128x128, o);
  } else if (columnwise && (rowwise || telemetry)) {  // both from one read of t, its column sums from the same pass
    BlockQuantizeOptions ob = o;
    ob.dbias = dbias;
    std::tie(q, p.columnwise) = quantize_blockwise_transpose(t, DType::F8E4M3, ob);
  } else {
    if (rowwise || telemetry) q = quantize_blockwise(t, DType::F8E4M3, ScaleLayout::Block1x128, o);
    if (columnwise) {
      BlockQuantizeOptions ot = o;
      ot.transpose = true;  // t^T's codes without its transposed copy
      ot.dbias = dbias;     // and its column sums from the same pass
      p.columnwise = quantize_blockwise(t, DType::F8E4M3, ScaleLayout::Block1x128, ot);
    }
  }
  if (telemetry) meta->measure(t, q, 0.0f);
  if (rowwise) p.rowwise = q;
  return p;
}

}  // namespace

Fp8Pair quantize_for_gemm(const Tensor& t, const fp8::Fp8Recipe& recipe, Fp8Role role,
                          const std::shared_ptr<fp8::Fp8TensorMeta>& meta, bool rowwise, bool columnwise,
                          const Tensor& dbias, bool gelu_of_t) {
  MPT_CHECK(!gelu_of_t || (role == Fp8Role::Input && !(meta && meta->collect_telemetry) && !dbias.defined() &&
                           t.dtype() != DType::F8E4M3),
            "[quantize_for_gemm] gelu(t) is quantized for an input whose meta collects no telemetry, from a wide t "
            "without dbias; got {} as {}", t.meta_str(), fp8::to_string(role));
  if (t.dtype() == DType::F8E4M3) {  // codes made with the meta's scale by the op before (check_fp8_input)
    MPT_CHECK(role == Fp8Role::Input && !std::holds_alternative<fp8::BlockScaling>(recipe) && meta &&
                  !dbias.defined() && t.dim() == 2,
              "[quantize_for_gemm] f8e4m3 codes {} are taken as a 2-d input quantized with a per-tensor scale "
              "(delayed or current scaling), not as {}", t.meta_str(), fp8::to_string(role));
    Fp8Pair p;
    if (rowwise) p.rowwise = {t, meta->scale_inv, ScaleLayout::PerTensor};
    if (columnwise) p.columnwise = {t.t().contiguous(), meta->scale_inv, ScaleLayout::PerTensor};
    return p;
  }
  // dbias comes from the columnwise pass (a weight's columnwise copy is its codes' transpose: no pass over t).
  const bool block = std::holds_alternative<fp8::BlockScaling>(recipe);
  const bool fused = columnwise && !(block && role == Fp8Role::Weight);
  if (dbias.defined() && !fused) Tensor(dbias).copy_(ops::detail::bias_grad(t));
  const Tensor fused_dbias = fused ? dbias : Tensor{};
  if (block) {
    return quantize_block(t, std::get<fp8::BlockScaling>(recipe), role, meta, rowwise, columnwise, fused_dbias,
                          gelu_of_t);
  }
  return quantize_per_tensor(t, recipe, role, meta, columnwise, fused_dbias, gelu_of_t);
}

Fp8Pair quantize_dgelu_for_gemm(const Tensor& dh, const Tensor& pre, const fp8::BlockScaling& recipe,
                                const Tensor& dbias) {
  BlockQuantizeOptions o{recipe.power_2_scale};
  o.dbias = dbias;
  o.dgelu_aux = pre;
  Fp8Pair p;
  std::tie(p.rowwise, p.columnwise) = quantize_blockwise_transpose(dh, DType::F8E4M3, o);
  return p;
}

bool is_wide_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

DType input_grad_dtype(const char* op, DType x, const std::optional<DType>& codes_grad) {
  if (x != DType::F8E4M3 || !codes_grad) return input_grad_dtype(x);
  MPT_CHECK(is_wide_dtype(*codes_grad), "[{}] codes_grad_dtype must be f32, bf16 or f16, got {}", op, *codes_grad);
  return *codes_grad;
}

void check_fp8_input(const char* op, const Tensor& x, const fp8::Fp8Recipe& recipe,
                     const std::shared_ptr<fp8::Fp8TensorMeta>& input_meta) {
  MPT_CHECK(x.defined() && x.dim() >= 1 && x.numel() > 0 && (is_wide_dtype(x.dtype()) || x.dtype() == DType::F8E4M3),
            "[{}] x must be a non-empty f32, bf16 or f16 tensor (or f8e4m3 codes), got {}", op,
            x.defined() ? x.meta_str() : std::string("undefined"));
  if (x.dtype() != DType::F8E4M3) return;
  MPT_CHECK(!std::holds_alternative<fp8::BlockScaling>(recipe),
            "[{}] x {} is FP8 codes, which only per-tensor scaling takes (delayed or current, quantized with the "
            "input meta's scale); the recipe is block scaling", op, x.meta_str());
  MPT_CHECK(input_meta != nullptr, "[{}] x {} is FP8 codes, which need the input meta whose scale made them "
            "(metas.input)", op, x.meta_str());
  MPT_CHECK(!input_meta->collect_telemetry, "[{}] x {} is FP8 codes but the input meta collects telemetry: telemetry "
            "measures the unquantized input, so give it in f32", op, x.meta_str());
}


void check_fp8_meta(const char* kOp, const std::shared_ptr<fp8::Fp8TensorMeta>& meta, const char* slot, Fp8Role role,
                    const fp8::Fp8Recipe& recipe, Device dev) {
  const bool delayed = std::holds_alternative<fp8::DelayedScaling>(recipe);
  if (!meta) {
    MPT_CHECK(!delayed, "[{}] delayed scaling needs {} (fp8::Fp8ScalingState::register_linear)", kOp, slot);
    return;
  }
  MPT_CHECK(meta->role == role, "[{}] {} is '{}', registered as {}", kOp, slot, meta->name,
            fp8::to_string(meta->role));
  MPT_CHECK(meta->dtype == fp8::fp8_dtype(recipe, role),
            "[{}] {} ('{}') is {} but the recipe quantizes it to {}: the scaling state was made for another "
            "recipe", kOp, slot, meta->name, meta->dtype, fp8::fp8_dtype(recipe, role));
  MPT_CHECK(!delayed || meta->scale.device() == dev, "[{}] {} ('{}') lives on {} but the operands on {}", kOp,
            slot, meta->name, meta->scale.device().str(), dev.str());
}

}  // namespace detail

Fp8Weight quantize_fp8_weight(const Tensor& weight, const fp8::Fp8Recipe& recipe,
                              const std::shared_ptr<fp8::Fp8TensorMeta>& weight_meta, bool transpose) {
  MPT_CHECK(weight.defined() && weight.dim() == 2 && detail::is_wide_dtype(weight.dtype()) && weight.numel() > 0,
            "[quantize_fp8_weight] weight must be a non-empty 2-d f32, bf16 or f16 tensor, got {}",
            weight.defined() ? weight.meta_str() : std::string("undefined"));
  detail::check_fp8_meta("quantize_fp8_weight", weight_meta, "metas.weight", fp8::Fp8Role::Weight, recipe,
                         weight.device());
  Fp8Weight w;
  w.recipe_index = recipe.index();
  // Delayed: the version of the meta's scale the codes are made with (it changes only in Fp8ScalingState::update()
  // and load_state_dict, which bump it; amp::fp8_weight_copy compares it before reusing the copy).
  if (weight_meta) w.scale_version = weight_meta->scale_version;
  const detail::Fp8Pair p =
      detail::quantize_for_gemm(weight, recipe, fp8::Fp8Role::Weight, weight_meta, true, transpose);
  w.rowwise = p.rowwise;
  w.columnwise = p.columnwise;
  return w;
}

}  // namespace mpt::fp8
