// src/core/version.cpp: mpt::version() from the build's project version.
#include "mpt/core/version.h"

#ifndef MPT_VERSION_STRING
#error "MPT_VERSION_STRING is set by src/CMakeLists.txt"
#endif

namespace mpt {

const char* version() { return MPT_VERSION_STRING; }

}  // namespace mpt
