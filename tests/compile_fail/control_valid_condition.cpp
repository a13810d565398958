// tests/compile_fail/control_valid_condition.cpp: the control: the same check with real conditions compiles.
#include "mpt/core/error.h"

int check(int x) {
  MPT_CHECK(x > 0, "[op] expected a positive value, got {}", x);
  const char* name = x > 1 ? "many" : nullptr;
  MPT_CHECK(name, "[op] a pointer condition is a null check and is allowed");
  return x;
}
