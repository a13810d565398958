// src/io/json_object.h: parsing a JSON document that must be an object, with errors naming the op and the source.
#pragma once

#include <nlohmann/json.hpp>
#include <cstdint>
#include <optional>
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

// j[key] as a positive integer of at most 2^32 (a config's size); `fallback` when the key is absent, if given. Throws
// mpt::Error "[op] where: missing key \"key\"" or "... key \"key\": expected a positive integer, got ...".
inline int64_t positive_integer(const nlohmann::json& j, const char* key, std::string_view op, const std::string& where,
                                std::optional<int64_t> fallback = std::nullopt) {
  const auto it = j.find(key);
  if (it == j.end() && fallback) return *fallback;
  MPT_CHECK(it != j.end(), "[{}] {}: missing key \"{}\"", op, where, key);
  MPT_CHECK(it->is_number_integer() && it->get<int64_t>() > 0 && it->get<int64_t>() <= (int64_t{1} << 32),
            "[{}] {}: key \"{}\": expected a positive integer, got {}", op, where, key, it->dump());
  return it->get<int64_t>();
}

}  // namespace mpt::io::detail
