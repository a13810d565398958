// src/deploy/export.cpp: export formats by name, their QAT schemes, the tensors they hold, and the dispatch to the GGUF and compressed-tensors writers.
#include "mpt/deploy/export.h"

#include <fmt/format.h>

#include "deploy/quantized_tensor.h"
#include "deploy/writers.h"
#include "mpt/core/error.h"
#include "mpt/io/gguf.h"

namespace mpt::deploy {

namespace {
constexpr std::pair<Format, std::string_view> kNames[] = {
    {Format::GgufF32, "gguf-f32"},   {Format::GgufQ8_0, "gguf-q8_0"}, {Format::GgufQ4_0, "gguf-q4_0"},
    {Format::GgufQ4_K, "gguf-q4_k"}, {Format::CtInt8, "ct-int8"},     {Format::CtInt4, "ct-int4"},
    {Format::CtFp8, "ct-fp8"}};

constexpr int64_t kQ4KBlock = 256;  // Q4_K's block: the width a weight needs to be Q4_K, not its Q8_0 fallback

// gguf-q8_0's weights: INT8 per output channel, FP16 scales (the inputs are llama.cpp's business).
amp::QatScheme q8_0_scheme() {
  amp::QatScheme s = amp::QatScheme::named("int8");
  s.input.reset();  // llama.cpp quantizes activations its own way (q8_0 blocks in its dot products)
  return s;
}
}  // namespace

Format parse_format(std::string_view name) {
  for (const auto& [f, n] : kNames)
    if (n == name) return f;
  MPT_THROW("[export] unknown format '{}': expected gguf-f32, gguf-q8_0, gguf-q4_0, gguf-q4_k, ct-int8, ct-int4 or "
            "ct-fp8", name);
}

std::string_view format_name(Format f) {
  for (const auto& [g, n] : kNames)
    if (g == f) return n;
  return "?";
}

bool is_gguf(Format f) {
  return f == Format::GgufF32 || f == Format::GgufQ8_0 || f == Format::GgufQ4_0 || f == Format::GgufQ4_K;
}

std::optional<amp::QatScheme> scheme(const ExportOptions& o) {
  switch (o.format) {
    case Format::GgufF32:
    case Format::GgufQ4_K: return std::nullopt;  // Q4_K: post-training quantization, no QAT scheme
    case Format::GgufQ8_0: return q8_0_scheme();
    case Format::GgufQ4_0:
    case Format::CtInt4: return amp::QatScheme::named("int4", o.group_size);
    case Format::CtInt8: return amp::QatScheme::named("int8");
    case Format::CtFp8: return amp::QatScheme::named("fp8");
  }
  return std::nullopt;
}

namespace detail {

std::optional<amp::QatPolicy> weight_policy(const ExportOptions& options) {
  if (options.format == Format::GgufQ4_K) return amp::QatPolicy::linears_but_head(q8_0_scheme());
  const std::optional<amp::QatScheme> s = scheme(options);
  return s ? std::optional<amp::QatPolicy>(amp::QatPolicy::linears_but_head(*s)) : std::nullopt;
}

WeightCoding weight_coding(const ExportOptions& options, const ops::QuantSpec& spec, int64_t width,
                           std::string_view what) {
  const std::string_view f = format_name(options.format);
  if (options.format == Format::GgufQ4_K) {
    if (width % kQ4KBlock == 0) return WeightCoding::Q4_K;
    MPT_CHECK(width % 32 == 0, "[export] {}: {} cannot be written as {}: its width {} is a multiple neither of Q4_K's "
              "256-wide blocks nor of the 32-wide blocks of its Q8_0 fallback", f, what, f, width);
  } else if (is_gguf(options.format)) {
    const int64_t block = spec.granularity == ops::QuantGranularity::PerGroup ? spec.group_size : width;
    MPT_CHECK(width % 32 == 0 && block % 32 == 0, "[export] {}: {} cannot be written as {}: its blocks are 32 wide, "
              "and the width {} (group {}) is not a multiple of 32", f, what, f, width, block);
  }
  return WeightCoding::Scheme;
}

Tensor learned_scales(const Tensor& scale, const std::optional<ops::QuantSpec>& learned, const ops::QuantSpec& spec,
                      const ExportOptions& options, std::string_view what) {
  if (!scale.defined() || !learned || options.format == Format::GgufQ4_K) return {};
  ops::QuantSpec plain = spec;
  plain.f16_scale = false;
  MPT_CHECK(*learned == plain, "[export] {}: {} learned its weight scales (LSQ) for {}, but the format writes {}: "
            "export to the scheme it was trained with (its group size: --group), or from a model without learned "
            "scales", format_name(options.format), what, learned->str(), plain.str());
  return scale;
}

std::vector<ExportTensor> export_tensors(const ModelView& view, const ExportOptions& options) {
  const std::optional<amp::QatPolicy> policy = weight_policy(options);
  const bool gguf = is_gguf(options.format);
  std::vector<ExportTensor> out;
  for (const ViewTensor& t : view.tensors) {
    ExportTensor e{&t, gguf && t.rope_heads > 0 ? rope_interleave(t.value, t.rope_heads) : t.value, std::nullopt,
                   {}, {}};
    const amp::QatScheme* ts = policy && !t.linear.empty() ? policy->at(t.linear) : nullptr;
    if (ts != nullptr && ts->weight) {
      const int64_t width = e.value.shape().back();
      const std::string what = fmt::format("{} ({})", t.hf_name, e.value.meta_str());
      if (weight_coding(options, *ts->weight, width, what) == WeightCoding::Q4_K) {
        e.q4_k = io::quantize_q4_k(e.value.to_vector<float>());  // row after row: each row is whole blocks
      } else {
        if (options.format == Format::GgufQ4_K)
          e.note = fmt::format("Q4_K fallback: width {} is not a multiple of {}", width, kQ4KBlock);
        const Tensor learned = learned_scales(t.weight_scale, t.weight_scale_spec, *ts->weight, options, what);
        if (learned.defined())  // the rows of the scales follow the weight's (GGUF's rotary order)
          e.q = ops::quantize_groups(e.value, *ts->weight,
                                     gguf && t.rope_heads > 0 ? rope_interleave(learned, t.rope_heads) : learned);
        else
          e.q = ops::quantize_groups(e.value, *ts->weight);  // checks that the group divides the width
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace detail

std::vector<TensorPlan> plan_export(const nn::Module& model, const ExportOptions& options) {
  const detail::ModelView view = detail::view_of(model);
  return is_gguf(options.format) ? detail::gguf_plan(view, detail::export_tensors(view, options), options)
                                 : detail::ct_plan(view, detail::export_tensors(view, options), options);
}

int64_t export_model(const nn::Module& model, const ExportOptions& options, const std::filesystem::path& out) {
  const detail::ModelView view = detail::view_of(model);
  const std::vector<detail::ExportTensor> tensors = detail::export_tensors(view, options);
  return is_gguf(options.format) ? detail::write_gguf(view, tensors, options, out)
                                 : detail::write_compressed_tensors(view, tensors, options, out);
}

}  // namespace mpt::deploy
