// src/deploy/gguf_export.cpp: a GPT-2 or Llama as a GGUF file llama.cpp loads: its metadata, the tokenizer, F32, Q8_0, Q4_0 and Q4_K tensors.
#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "deploy/writers.h"
#include "mpt/core/error.h"
#include "mpt/io/gguf.h"

namespace mpt::deploy::detail {

namespace {

io::GgufType tensor_type(const ExportTensor& t) {
  if (!t.q4_k.empty()) return io::GgufType::Q4_K;
  if (!t.q) return io::GgufType::F32;
  return t.q->spec.format == ops::QuantFormat::Int8 ? io::GgufType::Q8_0 : io::GgufType::Q4_0;
}

// general.file_type (llama.cpp's llama_ftype): ALL_F32 0, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7; gguf-q4_k: MOSTLY_Q4_K_S 14
// when every quantized tensor is Q4_K, MOSTLY_Q4_K_M 15 when some are its Q8_0 fallbacks (llama.cpp's Q4_K_M mixes
// Q4_K with a few wider types too), MOSTLY_Q8_0 7 when all are. llama.cpp only names the file's type with it.
uint32_t file_type(Format f, const std::vector<ExportTensor>& tensors) {
  if (f != Format::GgufQ4_K) return f == Format::GgufQ8_0 ? 7u : (f == Format::GgufQ4_0 ? 2u : 0u);
  int64_t q4_k = 0, q8_0 = 0;
  for (const ExportTensor& t : tensors) q4_k += !t.q4_k.empty(), q8_0 += t.q.has_value();
  if (q4_k == 0) return q8_0 > 0 ? 7u : 0u;
  return q8_0 > 0 ? 15u : 14u;
}

std::string type_text(const ExportTensor& t) {
  const std::string_view name = io::gguf_type_name(tensor_type(t));
  return t.note.empty() ? std::string(name) : fmt::format("{} ({})", name, t.note);
}

// The packed blocks of a quantized tensor: one FP16 scale per 32 codes (its group's or its channel's).
std::string packed(const ExportTensor& t) {
  const ops::GroupQuantized& q = *t.q;
  const std::vector<int8_t> codes = q.codes.to_vector<int8_t>();
  const std::vector<float> scales = q.scales.to_vector<float>();
  const int64_t width = q.codes.shape().back();
  const int64_t group = q.spec.granularity == ops::QuantGranularity::PerGroup ? q.spec.group_size : width;
  std::vector<uint16_t> block_scales(codes.size() / 32);
  for (size_t b = 0; b < block_scales.size(); ++b) {
    const int64_t first = static_cast<int64_t>(b) * 32, row = first / width;
    const float s = scales[static_cast<size_t>(row * (width / group) + (first % width) / group)];
    block_scales[b] = float_to_f16_bits(s);  // exact: the scheme's scales are FP16 values
  }
  return tensor_type(t) == io::GgufType::Q8_0 ? io::pack_q8_0(codes, block_scales) : io::pack_q4_0(codes, block_scales);
}

std::string f32_bytes(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

void add_tokenizer(io::GgufWriter& w, const ModelView& view, const ExportOptions& o) {
  MPT_CHECK(o.tokenizer != nullptr, "[export] {}: a GGUF file carries its tokenizer (tokenizer.ggml.*): give the "
            "tokenizer the model was trained with", format_name(o.format));
  const data::Vocabulary v = o.tokenizer->vocabulary();
  MPT_CHECK(static_cast<int64_t>(v.tokens.size()) == view.vocab,
            "[export] the tokenizer has {} tokens but the model's vocabulary is {}: they come from different runs",
            v.tokens.size(), view.vocab);
  MPT_CHECK(v.tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
            "[export] {} tokens do not fit llama.cpp's 32-bit token ids", v.tokens.size());
  const std::string expected = view.arch == "llama" ? "llama" : "gpt2";
  MPT_CHECK(v.model == expected,
            "[export] a {} model in GGUF needs a {} tokenizer (llama.cpp's tokenizer.ggml.model), but the run's "
            "tokenizer is '{}' ({}): train the Llama with --tokenizer bpe (SentencePiece), GPT-2 with char or gpt2",
            view.arch, expected == "llama" ? "SentencePiece" : "byte-level (GPT-2)", o.tokenizer->kind(), v.model);
  w.add_string("tokenizer.ggml.model", v.model);
  // The pre-tokenizer llama.cpp applies to text ("gpt-2": GPT-2's regex; "default" for SentencePiece). An unknown name
  // is an error there, and a gpt2 vocabulary needs one.
  w.add_string("tokenizer.ggml.pre", v.model == "gpt2" ? "gpt-2" : "default");
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32_array("tokenizer.ggml.scores", v.scores);
  w.add_i32_array("tokenizer.ggml.token_type", v.types);
  if (v.model == "gpt2") w.add_string_array("tokenizer.ggml.merges", v.merges);
  if (v.unk >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk));
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos));
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
  w.add_bool("tokenizer.ggml.add_bos_token", false);  // mptrain's models were trained without one
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

io::GgufWriter build(const ModelView& view, const std::vector<ExportTensor>& tensors, const ExportOptions& o) {
  io::GgufWriter w;
  const std::string& a = view.arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", o.name);
  w.add_u32("general.file_type", file_type(o.format, tensors));
  w.add_u32("general.quantization_version", io::kGgufQuantizationVersion);
  w.add_u32(a + ".context_length", static_cast<uint32_t>(view.context));
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(view.embd));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(view.ffn));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(view.layers));
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(view.heads));
  if (a == "llama") {
    w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(view.kv_heads));
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(view.norm_eps));
    w.add_f32(a + ".rope.freq_base", static_cast<float>(view.rope_theta));
    w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(view.embd / view.heads));
    w.add_u32(a + ".vocab_size", static_cast<uint32_t>(view.vocab));
  } else {
    w.add_f32(a + ".attention.layer_norm_epsilon", static_cast<float>(view.norm_eps));
  }
  add_tokenizer(w, view, o);
  for (const ExportTensor& t : tensors) {
    w.add_tensor(t.source->gguf_name, t.value.shape(), tensor_type(t),
                 !t.q4_k.empty() ? t.q4_k : (t.q ? packed(t) : f32_bytes(t.value)));
  }
  return w;
}

}  // namespace

std::vector<TensorPlan> gguf_plan(const ModelView& view, const std::vector<ExportTensor>& tensors,
                                  const ExportOptions& options) {
  build(view, tensors, options);  // every check the writer makes
  std::vector<TensorPlan> plan;
  for (const ExportTensor& t : tensors) {
    plan.push_back({t.source->gguf_name, t.value.shape(), type_text(t)});
  }
  return plan;
}

int64_t write_gguf(const ModelView& view, const std::vector<ExportTensor>& tensors, const ExportOptions& options,
                   const std::filesystem::path& out) {
  const io::GgufWriter w = build(view, tensors, options);
  w.write(out);
  return static_cast<int64_t>(std::filesystem::file_size(out));
}

}  // namespace mpt::deploy::detail
