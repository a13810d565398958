// tests/fuzz/fuzz_checkpoint_manifest.cpp: the state.json parser on arbitrary text: mpt::Error or a valid manifest.
#include <cstdint>
#include <string_view>

#include "train/checkpoint_manifest.h"
#include "mpt/core/error.h"

// Input: one byte choosing whether the checksum is verified (odd) or not (even: the field checks behind it are
// reached), then the text. A manifest that parses is written and parsed again: it must survive the round trip.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool verify = (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const mpt::train::detail::Manifest m = mpt::train::detail::parse_manifest(text, "fuzz", verify);
    const mpt::train::detail::Manifest again =
        mpt::train::detail::parse_manifest(mpt::train::detail::write_manifest(m), "fuzz (rewritten)", true);
    if (again.step != m.step || again.files.size() != m.files.size() || again.precision != m.precision)
      __builtin_trap();
  } catch (const mpt::Error&) {
  }
  return 0;
}
