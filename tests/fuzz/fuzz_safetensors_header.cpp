// tests/fuzz/fuzz_safetensors_header.cpp: the safetensors header parser on arbitrary bytes: mpt::Error or success.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "io/safetensors_format.h"
#include "mpt/core/error.h"

// Input: 8 bytes of byte-buffer size (little-endian), then the header text. Anything but a clean parse or an
// mpt::Error (another exception, a crash, a sanitizer report, a hang) is a finding.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t buffer_size = 0;
  std::memcpy(&buffer_size, data, 8);
  const std::string_view header(reinterpret_cast<const char*>(data + 8), size - 8);
  try {
    const auto parsed = mpt::io::detail::parse_safetensors_header(header, buffer_size, "fuzz");
    uint64_t covered = 0;  // a header that parses tiles the buffer exactly
    for (const auto& e : parsed.entries) {
      if (e.begin != covered || e.end < e.begin) __builtin_trap();
      covered = e.end;
    }
    if (covered != buffer_size) __builtin_trap();
  } catch (const mpt::Error&) {
  }
  return 0;
}
