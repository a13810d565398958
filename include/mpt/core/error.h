// mpt/core/error.h: mpt::Error and the MPT_CHECK / MPT_THROW macros used for every user-facing error.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace mpt {

// Every error the library raises. The message starts with "[op]" and names the shapes, dtypes,
// devices or files involved; the location of the failed check follows it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

[[noreturn]] void throw_error(const char* file, int line, std::string_view failed, std::string message);

// A condition that is a string literal ("[op] ...") is always true: a bug in the check itself.
template <class T>
inline constexpr bool is_string_literal_v =
    std::is_array_v<std::remove_reference_t<T>> &&
    std::is_same_v<std::remove_cv_t<std::remove_extent_t<std::remove_reference_t<T>>>, char>;

}  // namespace detail
}  // namespace mpt

// MPT_CHECK(cond, "[op] expected {} got {}", a, b): throws mpt::Error unless cond holds.
#define MPT_CHECK(cond, ...)                                                                    \
  do {                                                                                          \
    static_assert(!::mpt::detail::is_string_literal_v<decltype((cond))>,                        \
                  "MPT_CHECK: the condition is a string literal and can never fail");          \
    if (!(cond)) [[unlikely]]                                                                   \
      ::mpt::detail::throw_error(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__));        \
  } while (0)

// MPT_THROW("[op] message {}", x): unconditional mpt::Error.
#define MPT_THROW(...) ::mpt::detail::throw_error(__FILE__, __LINE__, {}, ::fmt::format(__VA_ARGS__))
