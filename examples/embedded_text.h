// examples/embedded_text.h: the training text linked into the example binaries (examples/data/tinyshakespeare.txt).
#pragma once

#include <string_view>

namespace mpt_examples {

// The bytes of examples/data/tinyshakespeare.txt, as built into the binary.
std::string_view tinyshakespeare();

}  // namespace mpt_examples
