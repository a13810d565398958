// src/data/utf8.h: UTF-8 validation for the tokenizers that encode text, not bytes.
#pragma once

#include <cstddef>
#include <string_view>

namespace mpt::data::detail {

// The offset of the first byte that does not start or continue a valid UTF-8 sequence (RFC 3629: no overlong forms,
// no surrogates, at most U+10FFFF), or text.size() when all of it is valid.
size_t first_invalid_utf8(std::string_view text);

}  // namespace mpt::data::detail
