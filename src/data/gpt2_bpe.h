// src/data/gpt2_bpe.h: GPT-2 byte-level BPE internals shared by the tokenizer and load_tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "mpt/data/tokenizer.h"

namespace mpt::data::detail {

// GPT-2's bytes_to_unicode(): the code point that stands for each byte (printable Latin-1 bytes themselves, the
// others 256, 257, ... in byte order).
std::array<uint32_t, 256> gpt2_byte_symbols();

// A Gpt2BpeTokenizer from what Gpt2BpeTokenizer::save wrote ({"vocab": [tokens by id], "merges": ["a b", ...]}).
std::unique_ptr<Tokenizer> gpt2_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace mpt::data::detail
