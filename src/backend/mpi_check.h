// src/backend/mpi_check.h: MPT_MPI_CHECK: an MPI return code as mpt::Error naming the failed call.
// Defined only where <mpi.h> is on the include path (the targets that link MPI). MPI's default
// handler (MPI_ERRORS_ARE_FATAL) aborts before a code is returned: the communicator code must set
// MPI_ERRORS_RETURN on its communicators for these checks to see failures.
#pragma once

#if __has_include(<mpi.h>)
#include <mpi.h>

#include <string>
#include <string_view>

#include "mpt/core/error.h"

namespace mpt::mpi_backend {

inline std::string mpi_status_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  int error_class = 0;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) error_class = -1;
  return fmt::format("MPI error {} (class {}): {}", code, error_class, std::string_view(text, length));
}

}  // namespace mpt::mpi_backend

#define MPT_MPI_CHECK(expr)                                                                      \
  do {                                                                                           \
    const int mpt_status_ = (expr);                                                              \
    if (mpt_status_ != MPI_SUCCESS) [[unlikely]]                                                 \
      ::mpt::detail::throw_error(__FILE__, __LINE__, #expr,                                      \
                                 "[mpi] " + ::mpt::mpi_backend::mpi_status_text(mpt_status_));   \
  } while (0)

#endif
