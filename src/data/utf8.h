// src/data/utf8.h: UTF-8 validation for the tokenizers that encode text, not bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mpt::data::detail {

// The offset of the first byte that does not start or continue a valid UTF-8 sequence (RFC 3629: no overlong forms,
// no surrogates, at most U+10FFFF), or text.size() when all of it is valid.
size_t first_invalid_utf8(std::string_view text);

// The UTF-8 encoding of a code point below U+10000.
std::string utf8_of(uint32_t cp);

}  // namespace mpt::data::detail
