// tests/support/test_util.h: small helpers shared by the test suites (expected-error checks).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <type_traits>
#include <string>
#include <vector>

#include "kernels/math/numerics.h"
#include "mpt/core/error.h"

namespace mpt::testing {

// Runs `fn`, expects an mpt::Error, and returns its message ("" and a test failure when none is thrown).
template <class F>
std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const mpt::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no mpt::Error was thrown";
  return {};
}

// Same length and identical bytes (NaN payloads and signed zeros included).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Value of a float or 16-bit float as double (16-bit types widen exactly through float).
template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));
}

// NaN in T: pre-fill outputs with it so an element a kernel does not write fails the comparison.
template <class T>
T poison() {
  return static_cast<T>(std::numeric_limits<float>::quiet_NaN());
}

// The relative spacing of T's normal values: float 2^-23, f16 2^-10, bf16 2^-7.
template <class T>
double relative_ulp() {
  if constexpr (std::is_same_v<T, float>) return 0x1p-23;
  if constexpr (std::is_same_v<T, f16>) return 0x1p-10;
  return 0x1p-7;
}

// The absolute spacing of T's subnormals where kernels can produce them (f16 below 2^-14); 0 for float and bf16,
// whose subnormals lie far below the values these tests produce.
template <class T>
double subnormal_step() {
  return std::is_same_v<T, f16> ? 0x1p-24 : 0.0;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace mpt::testing

// EXPECT_MPT_ERROR(statement, "fragment"): the statement throws mpt::Error whose message contains fragment.
#define EXPECT_MPT_ERROR(stmt, fragment)                                                               \
  do {                                                                                                 \
    const std::string mpt_message_ = ::mpt::testing::error_message([&] { stmt; });                     \
    EXPECT_TRUE(::mpt::testing::contains(mpt_message_, fragment))                                      \
        << "expected an mpt::Error containing \"" << (fragment) << "\", got \"" << mpt_message_ << "\""; \
  } while (0)
