// tests/deploy/export_test_util.h: what the export tests share: temporary paths, a model's parameters and a GGUF file's tensors as floats, llama.cpp's rotary row order, a small BPE tokenizer.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "mpt/io/gguf.h"
#include "mpt/mpt.h"

namespace mpt::export_test {

inline std::filesystem::path temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
}

inline std::vector<float> floats(const Tensor& t) { return t.to(DType::F32).contiguous().to_vector<float>(); }

inline Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& p : m.named_parameters())
    if (p.name == name) return p.tensor;
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

inline std::vector<float> gguf_values(const io::GgufFile& f, const std::string& name) {
  const io::GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  return io::dequantize_gguf(t->type, t->bytes, t->numel());
}

// llama.cpp's rotary rows by index: row h * d + half * d / 2 + i of Hugging Face's layout moves to h * d + 2 i + half.
inline std::vector<float> interleave_rows(const std::vector<float>& w, int64_t heads, int64_t rows, int64_t cols) {
  std::vector<float> out(w.size());
  const int64_t d = rows / heads;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t i = 0; i < d / 2; ++i)
        for (int64_t c = 0; c < cols; ++c)
          out[static_cast<size_t>((h * d + 2 * i + half) * cols + c)] =
              w[static_cast<size_t>((h * d + half * d / 2 + i) * cols + c)];
  return out;
}

// A SentencePiece-style BPE of 300 tokens trained on a repeated sentence (GGUF's Llama tokenizer needs one).
inline const data::BpeTokenizer& bpe300() {
  static const data::BpeTokenizer tok = [] {
    std::string s;
    for (int i = 0; i < 400; ++i) s += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 17) + "\n";
    return data::BpeTokenizer::train(s, {.vocab_size = 300, .threads = 1});
  }();
  return tok;
}

}  // namespace mpt::export_test
