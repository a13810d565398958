// src/core/error.cpp: formats mpt::Error messages with the failed check and its location.
#include "mpt/core/error.h"

#include <cstring>

namespace mpt::detail {

void throw_error(const char* file, int line, std::string_view failed, std::string message) {
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  if (failed.empty()) {
    message += fmt::format(" ({}:{})", base, line);
  } else {
    message += fmt::format(" (check `{}` failed at {}:{})", failed, base, line);
  }
  throw Error(message);
}

}  // namespace mpt::detail
