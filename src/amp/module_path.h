// src/amp/module_path.h: whole-component prefix matching of dotted module paths (the policies' per-module overrides).
#pragma once

#include <string_view>

namespace mpt::amp::detail {

// `prefix` equals `path` or is a whole-component prefix of it ("h.1" matches "h.1.attn" but not "h.10"); "" matches all.
inline bool component_prefix(std::string_view prefix, std::string_view path) {
  if (prefix.empty()) return true;
  if (!path.starts_with(prefix)) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.';
}

}  // namespace mpt::amp::detail
