// src/deploy/ct_export.cpp: a Llama as a compressed-tensors Hugging Face checkpoint (int-quantized, pack-quantized, float-quantized) that transformers and vLLM load.
#include <fmt/format.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>

#include "deploy/writers.h"
#include "io/durable_file.h"
#include "mpt/core/error.h"
#include "mpt/io/safetensors.h"
#include "mpt/nn/hf_llama.h"

namespace mpt::deploy::detail {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const char* ct_format(Format f) {
  return f == Format::CtInt8 ? "int-quantized" : (f == Format::CtInt4 ? "pack-quantized" : "float-quantized");
}

// compressed-tensors' QuantizationArgs of a spec (its pydantic model's fields, as the library writes them).
json args(const ops::QuantSpec& s, bool weights) {
  const char* strategy = s.granularity == ops::QuantGranularity::PerChannel ? "channel"
                         : s.granularity == ops::QuantGranularity::PerToken ? "token"
                         : s.granularity == ops::QuantGranularity::PerGroup ? "group"
                                                                            : "tensor";
  return {{"actorder", nullptr},
          {"block_structure", nullptr},
          {"dynamic", !weights},
          {"group_size", s.granularity == ops::QuantGranularity::PerGroup ? json(s.group_size) : json(nullptr)},
          {"num_bits", s.format == ops::QuantFormat::Int4 ? 4 : 8},
          {"observer", weights ? json("minmax") : json(nullptr)},
          {"observer_kwargs", json::object()},
          {"strategy", strategy},
          {"symmetric", true},
          {"type", s.format == ops::QuantFormat::FP8 ? "float" : "int"}};
}

std::string config_json(const ModelView& view, const ExportOptions& o) {
  MPT_CHECK(view.arch == "llama",
            "[export] {}: compressed-tensors quantizes nn.Linear layers, and transformers' GPT-2 is built of Conv1D "
            "layers it does not target (tools/ct_reference.py --probe-gpt2): export a Llama (train_gpt --model llama), "
            "or GPT-2 as GGUF (gguf-q8_0, gguf-q4_0)", format_name(o.format));
  nn::LlamaConfig c;
  c.vocab_size = view.vocab, c.block_size = view.context, c.n_layer = view.layers, c.n_head = view.heads;
  c.n_kv_head = view.kv_heads, c.n_embd = view.embd, c.intermediate_size = view.ffn, c.rope_theta = view.rope_theta;
  c.norm_eps = view.norm_eps, c.tie_embeddings = view.tied_head;
  json j = json::parse(nn::hf_llama_config_json(c));
  const amp::QatScheme s = *scheme(o);
  const json group = {{"format", ct_format(o.format)},
                      {"input_activations", s.input ? args(*s.input, false) : json(nullptr)},
                      {"output_activations", nullptr},
                      {"targets", {"Linear"}},
                      {"weights", args(*s.weight, true)}};
  j["quantization_config"] = {{"config_groups", {{"group_0", group}}},
                              {"format", ct_format(o.format)},
                              {"global_compression_ratio", nullptr},
                              {"ignore", {"lm_head"}},
                              {"kv_cache_scheme", nullptr},
                              {"quant_method", "compressed-tensors"},
                              {"quantization_status", "compressed"},
                              {"sparsity_config", json::object()},
                              {"transform_config", json::object()},
                              {"version", "0.12.2"}};
  return j.dump(2) + "\n";
}

// INT4 codes [rows, cols] packed eight to an int32 [rows, cols / 8]: code c + 8 (0..15) of column k in bits
// 4 (k % 8) .. 4 (k % 8) + 3 of word k / 8 (compressed-tensors' pack_to_int32).
Tensor pack_int4(const Tensor& codes) {
  const int64_t rows = codes.shape()[0], cols = codes.shape()[1];
  MPT_CHECK(cols % 8 == 0, "[export] ct-int4 packs eight codes to an int32: the width {} is not a multiple of 8", cols);
  const std::vector<int8_t> c = codes.to_vector<int8_t>();
  std::vector<int32_t> w(static_cast<size_t>(rows * cols / 8), 0);
  for (size_t i = 0; i < c.size(); ++i) {
    const auto nibble = static_cast<uint32_t>(c[i] + 8) & 0xFu;
    auto& word = reinterpret_cast<uint32_t&>(w[i / 8]);
    word |= nibble << (4 * (i % 8));
  }
  return Tensor::from_vector(w, {rows, cols / 8});
}

std::map<std::string, Tensor> tensors_of(const std::vector<ExportTensor>& tensors, Format f) {
  std::map<std::string, Tensor> out;
  for (const ExportTensor& t : tensors) {
    const std::string& name = t.source->hf_name;
    if (!t.q) {
      out[name] = t.value;
      continue;
    }
    const std::string base = name.substr(0, name.size() - std::string("weight").size());
    const Shape& shape = t.q->codes.shape();
    Tensor scales = t.q->scales;
    if (t.q->spec.granularity == ops::QuantGranularity::PerChannel) scales = scales.reshape({shape[0], 1});
    out[base + "weight_scale"] = scales;
    if (f == Format::CtInt4) {
      out[base + "weight_packed"] = pack_int4(t.q->codes);
      out[base + "weight_shape"] = Tensor::from_vector(std::vector<int64_t>{shape[0], shape[1]}, {2});
    } else if (f == Format::CtFp8) {
      const Tensor c = t.q->codes.contiguous();
      out[base + "weight"] = Tensor(c.storage(), c.shape(), c.strides(), c.offset(), DType::F8E4M3);
    } else {
      out[base + "weight"] = t.q->codes;
    }
  }
  return out;
}

}  // namespace

std::vector<TensorPlan> ct_plan(const ModelView& view, const std::vector<ExportTensor>& tensors,
                                const ExportOptions& options) {
  config_json(view, options);  // the checks
  std::vector<TensorPlan> plan;
  for (const auto& [name, t] : tensors_of(tensors, options.format)) {
    plan.push_back({name, t.shape(), std::string(dtype_name(t.dtype()))});
  }
  return plan;
}

int64_t write_compressed_tensors(const ModelView& view, const std::vector<ExportTensor>& tensors,
                                 const ExportOptions& options, const fs::path& out) {
  const std::string config = config_json(view, options);
  const std::map<std::string, Tensor> weights = tensors_of(tensors, options.format);
  // A complete directory beside `out`, then renamed into place (an older export is replaced only then).
  const fs::path parent = fs::absolute(out).parent_path();
  const fs::path tmp = parent / fmt::format(".{}.tmp-{}", out.filename().string(), ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  MPT_CHECK(!ec, "[export] cannot create the directory '{}': {}", tmp.string(), ec.message());
  try {
    io::detail::write_file_durably(tmp / "config.json", config, "export");
    io::save_safetensors(tmp / "model.safetensors", weights, {{"format", "pt"}});
    io::detail::fsync_dir(tmp, "export");
    const fs::path old = parent / fmt::format(".{}.old-{}", out.filename().string(), ::getpid());
    const bool replace = fs::exists(out);
    if (replace) fs::rename(out, old);
    try {
      fs::rename(tmp, out);
    } catch (...) {
      if (replace) fs::rename(old, out);  // the older export comes back
      throw;
    }
    io::detail::fsync_dir(parent, "export");
    if (replace) fs::remove_all(old, ec);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return static_cast<int64_t>(fs::file_size(out / "config.json") + fs::file_size(out / "model.safetensors"));
}

}  // namespace mpt::deploy::detail
