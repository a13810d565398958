// tests/tools/checkpoint_crash_child.cpp: trains a GPT `step` steps and saves a checkpoint, SIGKILLing itself at
// save point `kill_at` (tests/io/test_checkpoint_crash.cpp runs it once per point).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "crash_child_model.h"
#include "mpt/train/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: checkpoint_crash_child DIR STEP KILL_AT KEEP (KILL_AT -1: no kill)\n");
    return 2;
  }
  try {
    const int64_t step = std::stoll(argv[2]), kill_at = std::stoll(argv[3]), keep = std::stoll(argv[4]);
    mpt::testing::CrashChildRun run(step);
    int64_t points = 0;
    mpt::train::testing::set_save_hook([&](std::string_view) {
      if (points++ == kill_at) ::kill(::getpid(), SIGKILL);
    });
    mpt::train::save_checkpoint(argv[1], run.state(), {.keep = keep});
    std::printf("points %lld\n", static_cast<long long>(points));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_crash_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
