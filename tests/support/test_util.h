// tests/support/test_util.h: small helpers shared by the test suites (expected-error checks).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

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

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace mpt::testing

// EXPECT_MPT_ERROR(statement, "fragment"): the statement throws mpt::Error whose message contains fragment.
#define EXPECT_MPT_ERROR(stmt, fragment)                                                               \
  do {                                                                                                 \
    const std::string mpt_message_ = ::mpt::testing::error_message([&] { stmt; });                     \
    EXPECT_TRUE(::mpt::testing::contains(mpt_message_, fragment))                                      \
        << "expected an mpt::Error containing \"" << (fragment) << "\", got \"" << mpt_message_ << "\""; \
  } while (0)
