// examples/embedded_text.cpp: links examples/data/tinyshakespeare.txt into the binary with the assembler's .incbin.
#include "embedded_text.h"

// MPT_TINYSHAKESPEARE_PATH (a string literal) is set by examples/CMakeLists.txt, which also makes this file
// rebuild when the text changes.
__asm__(".section .rodata\n"
        ".global mpt_tinyshakespeare_begin\n"
        ".type mpt_tinyshakespeare_begin, @object\n"
        "mpt_tinyshakespeare_begin:\n"
        ".incbin \"" MPT_TINYSHAKESPEARE_PATH "\"\n"
        ".global mpt_tinyshakespeare_end\n"
        ".type mpt_tinyshakespeare_end, @object\n"
        "mpt_tinyshakespeare_end:\n"
        ".byte 0\n"
        ".previous\n");

extern "C" const char mpt_tinyshakespeare_begin[];
extern "C" const char mpt_tinyshakespeare_end[];

namespace mpt_examples {

std::string_view tinyshakespeare() {
  return {mpt_tinyshakespeare_begin, static_cast<size_t>(mpt_tinyshakespeare_end - mpt_tinyshakespeare_begin)};
}

}  // namespace mpt_examples
