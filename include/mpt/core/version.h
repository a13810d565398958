// mpt/core/version.h: the library's version, as written into checkpoints.
#pragma once

namespace mpt {

// "MAJOR.MINOR.PATCH" of the mptrain build (CMake's project version).
const char* version();

}  // namespace mpt
