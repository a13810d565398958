// src/data/base64.h: RFC 4648 base64 (binary models inside JSON tokenizer files).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mpt::data::detail {

std::string base64_encode(std::string_view bytes);
// The decoded bytes, or nothing when `text` is not padded base64 of the standard alphabet.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace mpt::data::detail
