// tests/tools/dist_timeout.cpp: under mpirun, rank 0 all-reduces while the others never do (MODE=mismatch) or die
// (MODE=killed): rank 0's wait() must end with an mpt::Error naming the collective and the rank, within its timeout.
// MODE=debug (MPT_DIST_DEBUG=1): rank 1 all-reduces a smaller tensor; both ranks name the disagreement at once.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "mpt/dist/communicator.h"

int main(int argc, char** argv) {
  const bool killed = argc > 1 && std::strcmp(argv[1], "killed") == 0;
  const bool debug = argc > 1 && std::strcmp(argv[1], "debug") == 0;
  const auto w = mpt::dist::world();
  w->set_timeout(std::chrono::milliseconds(1500));
  mpt::Tensor t = mpt::Tensor::ones({1024});
  w->all_reduce(t, mpt::dist::ReduceOp::Sum)->wait();  // one that completes: the job is set up
  if (debug) {
    mpt::Tensor mine = mpt::Tensor::ones({w->rank() == 1 ? 512 : 1024});
    try {
      w->all_reduce(mine, mpt::dist::ReduceOp::Sum)->wait();
      std::printf("rank %d: the mismatched all_reduce was not caught\n", w->rank());
      std::_Exit(1);
    } catch (const std::exception& e) {
      std::printf("rank %d: %s\n", w->rank(), e.what());
      std::fflush(stdout);
      std::_Exit(0);
    }
  }
  if (w->rank() != 0) {
    if (killed) ::kill(::getpid(), SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(4));  // never joins the second all_reduce
    std::_Exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    w->all_reduce(t, mpt::dist::ReduceOp::Sum)->wait();
    std::printf("rank 0: the second all_reduce completed, which it cannot\n");
    std::_Exit(1);
  } catch (const std::exception& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank 0 after %.1f s: %s\n", s, e.what());
    std::fflush(stdout);
    std::_Exit(s < 10 ? 0 : 1);
  }
}
