// src/fp8/recipe.cpp: FP8 formats per role, compute_scale_from_amax, NaN-ignoring amax, metas, telemetry.
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mpt/fp8/scaling.h"

#include "kernels/math/quantize.h"
#include "mpt/ops/cast.h"

// The FP8 ops are built from the ops layer below (cast, matmul, reductions, dispatch).
using namespace mpt::ops;  // NOLINT(google-build-using-namespace)

namespace mpt::fp8 {

DType fp8_dtype(const Fp8Recipe& recipe, Fp8Role role) {
  Fp8Format format = Fp8Format::E4M3;  // block scaling: E4M3 everywhere
  if (const auto* d = std::get_if<DelayedScaling>(&recipe)) format = d->format;
  if (const auto* c = std::get_if<CurrentScaling>(&recipe)) format = c->format;
  return format == Fp8Format::Hybrid && role == Fp8Role::GradOutput ? DType::F8E5M2 : DType::F8E4M3;
}

float fp8_max(DType fp8) {
  MPT_CHECK(is_fp8(fp8), "[fp8_max] expected f8e4m3 or f8e5m2, got {}", fp8);
  return fp8 == DType::F8E4M3 ? kE4M3Max : kE5M2Max;
}

float compute_scale_from_amax(float amax, float max, bool power_2, float epsilon, float inf_value) {
  return kernels::math::ScaleFromAmax{max, 0, power_2, epsilon, inf_value}(amax);
}

float amax_ignore_nan(const Tensor& x) {
  if (x.numel() == 0) return 0.0f;
  const float a = ops::amax(x).item<float>();  // NaN-propagating: exact unless x holds a NaN
  if (!std::isnan(a)) return a;
  float m = 0.0f;
  for (float v : x.to_vector<float>()) m = std::fmax(m, std::fabs(v));  // fmax drops NaN
  return m;
}

void Fp8TensorMeta::record_amax(const Tensor& amax) { ops::fold_amax_(amax_history.slice(0, 0, 1), amax); }

void Fp8TensorMeta::record_amax(float amax) { record_amax(Tensor::full({}, amax, DType::F32, amax_history.device())); }

float Fp8TensorMeta::current_amax() const { return amax_history.select(0, 0).item<float>(); }

void Fp8TensorMeta::measure(const Tensor& x, const ops::Quantized& q, float scale) {
  if (!collect_telemetry) return;
  const int64_t count = stats.count;
  stats = measure_quantization(x, q, scale);
  stats.count = count + 1;
}

Fp8TensorStats measure_quantization(const Tensor& x, const ops::Quantized& q, float scale) {
  MPT_CHECK(x.shape() == q.data.shape() && is_fp8(q.data.dtype()),
            "[fp8 telemetry] expected codes shaped like the input {}, got {}", x.meta_str(), q.data.meta_str());
  const std::vector<float> xs = x.to_vector<float>();
  const std::vector<float> codes = q.data.to_vector<float>();  // code values: 0 exactly for the codes +-0
  const std::vector<float> scale_inv = q.scale_inv.to_vector<float>();
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t kb = (cols + 127) / 128;
  const int64_t block_rows = q.layout == ops::ScaleLayout::Block128x128 ? 128 : 1;
  const float max = fp8_max(q.data.dtype());
  Fp8TensorStats s;
  s.numel = x.numel();
  s.scale = scale;
  if (q.layout != ops::ScaleLayout::PerTensor) {
    s.scale = INFINITY;
    for (float si : scale_inv) s.scale = std::fmin(s.scale, 1.0f / si);
  }
  int64_t saturated = 0, flushed = 0;
  for (int64_t i = 0; i < s.numel; ++i) {
    const float v = xs[static_cast<size_t>(i)];
    if (std::isnan(v)) continue;
    const int64_t r = i / cols, c = i % cols;
    const float si = q.layout == ops::ScaleLayout::PerTensor
                         ? scale
                         : 1.0f / scale_inv[static_cast<size_t>((r / block_rows) * kb + c / 128)];
    s.amax = std::fmax(s.amax, std::fabs(v));
    if (std::fabs(v * si) > max) ++saturated;
    if (v != 0.0f && codes[static_cast<size_t>(i)] == 0.0f) ++flushed;
  }
  if (s.numel > 0) {
    s.saturated = static_cast<double>(saturated) / static_cast<double>(s.numel);
    s.flushed = static_cast<double>(flushed) / static_cast<double>(s.numel);
  }
  return s;
}

}  // namespace mpt::fp8
