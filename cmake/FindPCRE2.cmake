# cmake/FindPCRE2.cmake: Debian's libpcre2-dev (8-bit code units) as the imported target PCRE2::pcre2-8, for GPT-2's
# pre-tokenizer regex (Unicode properties \p{L}, \p{N}). Installed beside mptrain's package config.
find_path(PCRE2_INCLUDE_DIR pcre2.h)
find_library(PCRE2_LIBRARY pcre2-8)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PCRE2 REQUIRED_VARS PCRE2_LIBRARY PCRE2_INCLUDE_DIR
                                  REASON_FAILURE_MESSAGE "install libpcre2-dev (bash tools/install-deps.sh)")
if(PCRE2_FOUND AND NOT TARGET PCRE2::pcre2-8)
  add_library(PCRE2::pcre2-8 UNKNOWN IMPORTED)
  set_target_properties(PCRE2::pcre2-8 PROPERTIES IMPORTED_LOCATION "${PCRE2_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}")
endif()
mark_as_advanced(PCRE2_INCLUDE_DIR PCRE2_LIBRARY)
