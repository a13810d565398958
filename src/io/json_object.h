// src/io/json_object.h: parsing a JSON document that must be an object, with errors naming the op and the source.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "mpt/core/error.h"

namespace mpt::io::detail {

// `text` parsed; throws mpt::Error "[op] where: not valid JSON: ..." or "... expected a JSON object, got array".
inline nlohmann::json parse_json_object(std::string_view text, std::string_view op, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    MPT_THROW("[{}] {}: not valid JSON: {}", op, where, e.what());
  }
  MPT_CHECK(j.is_object(), "[{}] {}: expected a JSON object, got {}", op, where, j.type_name());
  return j;
}

}  // namespace mpt::io::detail
