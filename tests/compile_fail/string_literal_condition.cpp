// tests/compile_fail/string_literal_condition.cpp: must NOT compile: MPT_CHECK with a string literal as its condition.
#include "mpt/core/error.h"

int check(int x) {
  MPT_CHECK("[op] oops", "[op] expected a positive value, got {}", x);
  return x;
}
